"""The refusals only the port has."""

from __future__ import annotations

from tpnode_tui.model.errors import NotAllowed, TpnodeError


class OverQuota(NotAllowed):
    """The owner holds as many cards as they may: a queued launch waits for their own jobs."""


class Cancelled(TpnodeError):
    """A launch cancelled while it waited for its turn."""


class AgentUnavailable(TpnodeError):
    """No agent answers (not running, restarting, or not reachable from here)."""
