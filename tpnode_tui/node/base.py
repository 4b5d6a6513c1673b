"""What a client may ask of a node, wherever the node is served."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Optional, Protocol

from ..model import JobState, Launched, NodeSnapshot, QueuedLaunch
from ..service import LaunchRequest, LaunchResult, Reading, ReserveRequest, You


@dataclass(frozen=True)
class NodeView:
    """One reading of the node, and the caller as the node sees them then."""

    reading: Reading
    you: You

    @property
    def snapshot(self) -> Optional[NodeSnapshot]:
        return self.reading.snapshot


class Node(Protocol):
    #: "agent" or "local": where the node is served from, for ``status --json``
    via: str

    async def status(self) -> NodeView:
        """The node now (an agent's latest reading); raises when it cannot be read."""
        ...

    def views(self) -> AsyncIterator[NodeView]:
        """Every new reading as it is made, the latest first; ends when the node goes away."""
        ...

    async def launch(self, request: LaunchRequest) -> LaunchResult: ...

    async def reserve(self, request: ReserveRequest) -> Launched: ...

    async def extend(self, run_id: str, duration_s: float) -> JobState: ...

    async def stop(self, run_id: str) -> JobState: ...

    async def reclaim(self, run_id: Optional[str]) -> list[JobState]: ...

    async def cancel(self, run_id: str) -> QueuedLaunch: ...

    async def queued(self) -> tuple[QueuedLaunch, ...]:
        """Launches queued or under way now, in order."""
        ...

    async def audit(self, since_s: Optional[float]) -> tuple[list[dict[str, Any]], bool]:
        """Logged actions (the caller's own, or all for an operator) and whether they are all."""
        ...

    async def close(self) -> None: ...
