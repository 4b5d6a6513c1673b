"""Which NVIDIA device files a job may open, decided from what it holds: pure, no I/O.

The rule every mechanism applies: the fence takes nothing a job had before
but other jobs' cards. Of NVIDIA's majors a job may open the control and
modeset devices, unified memory, its own cards' files and, for a MIG slice,
its instances' access capabilities; every other minor is denied, as Slurm's
``ConstrainDevices`` does. See docs/architecture.md, section 'What a job may
open'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tpnode_tui.devices.errors import CannotFence
from tpnode_tui.devices.nvidia import (
    CTL_MINOR,
    MAX_CARD_MINOR,
    MODESET_MINOR,
    NVIDIA_MAJOR,
    UVM_MINORS,
    MigMinors,
    NvidiaMajors,
)

#: MIG ids, as the driver's capability names carry them: far fewer in practice
#: (7 GPU instances, 8 compute instances each), a bound only so that a number
#: from outside cannot be absurd.
_MAX_INSTANCE_ID = 999


@dataclass(frozen=True)
class SliceGrant:
    """A MIG slice as device files know it: its card's minor, its GPU instance's and compute instance's ids."""

    card: int
    gpu_instance: int
    compute_instance: int


@dataclass(frozen=True)
class Grant:
    """What a job holds, in device minors: whole cards, and MIG slices.

    A card's *minor* (``/dev/nvidia<minor>``), which the probe reads from the
    driver, not its index: the two differ on some machines.
    """

    cards: frozenset[int] = frozenset()
    slices: tuple[SliceGrant, ...] = ()

    def card_minors(self) -> frozenset[int]:
        """The cards whose files the job opens: its whole cards and the cards its slices are on."""
        return self.cards | {s.card for s in self.slices}


@dataclass(frozen=True)
class MajorRule:
    """One fenced major: the minors a job may open; every other minor of it is denied."""

    major: int
    #: what the major's files are, for words ("nvidia-caps")
    name: str
    allowed: frozenset[int]
    #: the minors a deny list names one by one, for a mechanism that has no
    #: "every minor but these" (cgroup v1); None when they cannot be known
    denied: Optional[tuple[int, ...]]


@dataclass(frozen=True)
class DeviceRules:
    """The fence for one job: its fenced majors' rules. Any other device is allowed."""

    majors: tuple[MajorRule, ...]

    def allows(self, major: int, minor: int) -> bool:
        """Whether a job under these rules may open character device ``major:minor``."""
        rule = next((r for r in self.majors if r.major == major), None)
        return rule is None or minor in rule.allowed


def _check_grant(grant: Grant) -> None:
    """A grant comes from the probe's readings: refuse numbers no device file can have."""
    for card in sorted(grant.card_minors()):
        if not 0 <= card <= MAX_CARD_MINOR:
            raise CannotFence(f"{card} is not a card's device minor (0 to {MAX_CARD_MINOR})")
    for s in grant.slices:
        if not (0 <= s.gpu_instance <= _MAX_INSTANCE_ID and 0 <= s.compute_instance <= _MAX_INSTANCE_ID):
            raise CannotFence(f"GPU instance {s.gpu_instance}, compute instance {s.compute_instance} is not a MIG id")


def _cards_rule(grant: Grant) -> MajorRule:
    cards = grant.card_minors()
    return MajorRule(
        major=NVIDIA_MAJOR,
        name="nvidia",
        allowed=cards | {MODESET_MINOR, CTL_MINOR},
        denied=tuple(m for m in range(MAX_CARD_MINOR + 1) if m not in cards),
    )


def _slice_minors(grant: Grant, mig: Optional[MigMinors], mig_why: str) -> frozenset[int]:
    """The capability minors of the job's slices; CannotFence when one is not listed,
    since a fence without them would keep the job from its own slice."""
    if not grant.slices:
        return frozenset()
    if mig is None:
        raise CannotFence(f"the MIG capabilities' minors are not known ({mig_why or 'mig-minors was not read'})")
    minors = set()
    for s in grant.slices:
        for ci in (None, s.compute_instance):
            minor = mig.access(s.card, s.gpu_instance, ci)
            if minor is None:
                name = f"gpu{s.card}/gi{s.gpu_instance}" + ("" if ci is None else f"/ci{ci}") + "/access"
                raise CannotFence(f"mig-minors lists no {name}, the capability of a slice the job holds")
            minors.add(minor)
    return frozenset(minors)


def _caps_denied(grant: Grant, mig: Optional[MigMinors], allowed: frozenset[int]) -> Optional[tuple[int, ...]]:
    """The capability minors a deny list names: the node-wide ones (``config``,
    ``monitor``) and every one of the job's own cards that is not its slice's.

    A capability of a card the job cannot open is left off: it grants access to
    an instance *of that card*, useless without the card's file, which is
    denied. The list stays a few hundred lines instead of the driver's
    thousands (each line of a cgroup v1 deny list costs more than the last).
    """
    if mig is None:
        return None
    denied = set(mig.on_card(None))
    for card in grant.card_minors():
        denied.update(mig.on_card(card))
    return tuple(sorted(denied - allowed))


def device_rules(grant: Grant, majors: NvidiaMajors, mig: Optional[MigMinors] = None, mig_why: str = "") -> DeviceRules:
    """The fence for a job holding ``grant`` on a node whose NVIDIA majors are ``majors``.

    ``mig`` is the driver's list of capability minors, None when it could not
    be read (``mig_why`` says why): a job without slices is fenced all the same
    where the mechanism can deny "every other minor" (cgroup v2), since it is
    allowed no capability at all. A module not loaded has no major to fence;
    its files could not be opened by anyone until it loads.
    """
    _check_grant(grant)
    known = [m for m in (majors.uvm, majors.caps) if m is not None]
    if NVIDIA_MAJOR in known or len(set(known)) != len(known):
        raise CannotFence(f"/proc/devices gives NVIDIA's modules one major twice ({majors})")
    rules = [_cards_rule(grant)]
    if majors.uvm is not None:
        # uvm has no minors but these two, and both are allowed: nothing to name in a deny list
        rules.append(MajorRule(major=majors.uvm, name="nvidia-uvm", allowed=frozenset(UVM_MINORS), denied=()))
    if majors.caps is not None:
        allowed = _slice_minors(grant, mig, mig_why)
        rules.append(
            MajorRule(major=majors.caps, name="nvidia-caps", allowed=allowed, denied=_caps_denied(grant, mig, allowed))
        )
    elif grant.slices:
        raise CannotFence("the job holds a MIG slice but /proc/devices lists no nvidia-caps major")
    return DeviceRules(tuple(rules))
