"""The dashboard's follower of the node's readings: what it knows beyond the readings.

The follow itself (readings as they come, a node gone and followed again,
how fresh what is shown is) is the web page's too: tpnode_tui/node/follow.py.
Here: the picture paused by the person at the dashboard, the header's and
banners' state, and why an action cannot be asked for while the node does
not answer.
"""

from __future__ import annotations

from typing import Optional

from tpnode_tui.node.follow import Follower
from tpnode_tui.tui.wording.header import PollState, lock_line
from tpnode_tui.tui.wording.times import clock_time


class NodeFollower(Follower):
    """The node's readings as the dashboard follows them (:class:`Follower`), and
    whether the person at it has paused the picture."""

    #: the readings are not followed (p): the picture holds still
    paused: bool = False

    def poll_state(self, *, readonly: bool, served: str, via: str) -> PollState:
        """How the last polls went, for the header and the banners; ``served`` and
        ``via``: where the node is served from, in words and in a word."""
        snap = self.snapshot
        return PollState(
            paused=self.paused,
            readonly=readonly,
            stale_since=self.stale_since,
            stale_error=self.stale_error,
            agent_gone=self.gone_since is not None and self.gone_agent,
            lock_waiting=lock_line(snap),
            unverified_allowed=snap is not None and snap.allow_unverified,
            you=self.you,
            served=served,
            via=via,
        )

    def not_answering(self, what: str) -> Optional[str]:
        """Why ``what`` (an action, "launching") cannot be asked for now: the node
        does not answer. None while it does."""
        if self.gone_since is None:
            return None
        who = "the node's agent is" if self.gone_agent else "the node is"
        return (
            f"{who} not answering since {clock_time(self.gone_since)}, so {what} cannot "
            f"be asked for ({self.gone_why}); the dashboard reconnects by itself."
        )
