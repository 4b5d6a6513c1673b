"""The states a card and a MIG slice can be in: one typed enumeration each, for every layer.

The allocator decides them, every client shows them and the wire carries them,
so they are named once, here. A state this code does not know (a newer node's,
or a document written by hand) is refused where it comes in, never shown as
something else: a card read back as "free" because its word was not
understood would be handed out.
"""

from __future__ import annotations

from typing import Literal, get_args

#: A card as shown, exactly one at a time: held by a platform job or a
#: reservation; in use from outside the platform; unhealthy; free as far as the
#: platform knows but unverified (use from outside cannot be probed); drained
#: by an operator or an XID; split into MIG slices (see its slices); free.
CardStateName = Literal["free", "job", "reservation", "external", "unhealthy", "unverified", "drained", "mig"]
CARD_STATES: tuple[CardStateName, ...] = get_args(CardStateName)

#: A MIG slice, exactly one at a time: held by a platform job or reservation; in
#: use from outside the platform; not offered because it shares its GPU
#: instance's memory with a slice that is held or in use; unhealthy, drained or
#: unverified (with its card, or on its own); free.
SliceStateName = Literal["free", "job", "reservation", "external", "shared", "unhealthy", "unverified", "drained"]
SLICE_STATES: tuple[SliceStateName, ...] = get_args(SliceStateName)
