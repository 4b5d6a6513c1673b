"""The words a client and a node speak, wherever the node is served.

The CLI, the dashboard, the agent's API and the node's service all use these
types, so they live below all of them: a client that imported them from the
service would load the allocator, the runtimes and the probes to ask an agent
one question. What a node is asked (:class:`LaunchRequest`,
:class:`ReserveRequest`), what it answers (:class:`LaunchResult`,
:class:`Reading`, :class:`You`, :class:`NodeView`) and the refusals only the
port has (:class:`OverQuota`, :class:`Cancelled`, :class:`AgentUnavailable`)
are all here; the calls themselves are :class:`tpnode_tui.node.Node`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Optional

from tpnode_tui.model.errors import NotAllowed, TpnodeError
from tpnode_tui.model.jobs import Launched, QueuedLaunch
from tpnode_tui.model.snapshot import NodeSnapshot

#: the longest drain reason taken: it is shown on a tile and in every log line about the card
DRAIN_REASON_MOST = 500


def new_run_id(prefix: str = "run") -> str:
    """A run id that sorts by time and does not collide between two launches in one second
    (the random part is the kernel's, as secrets.token_hex's is, without loading hashlib)."""
    return f"{prefix}-{time.strftime('%m%d-%H%M%S')}-{os.urandom(2).hex()}"


def is_owner(owner_uid: Optional[int], owner: str, uid: int, user: str) -> bool:
    """Whether the account ``uid``/``user`` owns what recorded ``owner_uid``
    and ``owner``: by uid where one was recorded, else by name. The node's
    rules are made of it, and a client (the dashboard) asks it to offer only
    what the node would allow."""
    if owner_uid is not None:
        return owner_uid == uid
    return bool(owner) and owner == user


class OverQuota(NotAllowed):
    """The owner holds as many cards as they may: a queued launch waits for their own jobs."""


class Cancelled(TpnodeError):
    """A launch cancelled while it waited for its turn."""


class AgentUnavailable(TpnodeError):
    """No agent answers (not running, restarting, or not reachable from here)."""


@dataclass(frozen=True)
class LaunchRequest:
    """A launch as a client asks for it; the node fills in who and how."""

    cards: int
    command: tuple[str, ...] = ()
    image: Optional[str] = None
    run_id: Optional[str] = None
    #: another owner than the caller: operators only
    owner: str = ""
    #: the command's environment and working directory, for a process job. A
    #: client of an agent sends its own (the job runs as the caller, as a launch
    #: from their shell would); None in-process: the job gets this process's
    env: Optional[tuple[tuple[str, str], ...]] = None
    cwd: Optional[str] = None
    #: wait in the queue when the node has no room now, instead of refusing
    queue: bool = False
    #: how the cards must sit on the node's topology: None (the best set free now),
    #: "same-switch" or "contiguous" (a launch waits for such a set)
    placement: Optional[str] = None
    #: a MIG profile ("1g.18gb"): one MIG slice of it instead of whole cards
    #: (``cards`` is then 1); None: whole cards, never a card in MIG mode
    slice: Optional[str] = None


@dataclass(frozen=True)
class ReserveRequest:
    cards: int
    duration_s: float
    run_id: Optional[str] = None
    owner: str = ""
    placement: Optional[str] = None
    #: a MIG profile: reserve one MIG slice of it (``cards`` is then 1)
    slice: Optional[str] = None


@dataclass(frozen=True)
class LaunchResult:
    """What a launch got: cards now, or a place in the queue."""

    launched: Optional[Launched] = None
    queued: Optional[QueuedLaunch] = None


@dataclass(frozen=True)
class Reading:
    """What the node last learned of itself, as it is handed to every reader."""

    seq: int
    #: the last good snapshot (None until one poll succeeded)
    snapshot: Optional[NodeSnapshot]
    #: why the latest poll failed; None when it succeeded
    error: Optional[str] = None
    #: when polls started failing (None while they succeed)
    stale_since: Optional[float] = None


@dataclass(frozen=True)
class You:
    """The caller as the node sees them: for the header and ``status --json``."""

    user: str
    uid: int
    operator: bool
    cards_held: int
    card_limit: Optional[int]


@dataclass(frozen=True)
class NodeView:
    """One reading of the node, and the caller as the node sees them then."""

    reading: Reading
    you: You

    @property
    def snapshot(self) -> Optional[NodeSnapshot]:
        return self.reading.snapshot
