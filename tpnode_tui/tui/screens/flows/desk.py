"""The desk a flow works at: the main screen, as far as the flows use it, and what every flow says the same way."""

from __future__ import annotations

import logging
from typing import Any, ContextManager, Coroutine, Optional, Protocol, TypeVar

from textual.notifications import SeverityLevel
from textual.screen import Screen

from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.tui.follow.selection import Selection
from tpnode_tui.tui.follow.session import Session
from tpnode_tui.tui.wording import refusals
from tpnode_tui.tui.wording.refusals import read_only

log = logging.getLogger(__name__)

Answer = TypeVar("Answer")


class Desk(Protocol):
    """Where an action is asked for: the session, what is selected, a way to ask
    (a dialog, awaited) and to say (a notification), and workers to act in."""

    @property
    def session(self) -> Session: ...

    #: an eviction's dry run is on its way: a second would ask twice
    evict_asking: bool

    def selection(self) -> Selection: ...

    async def ask(self, question: Screen[Answer]) -> Answer:
        """The dialog's answer; only from inside a worker (``start``)."""
        ...

    def suspended(self) -> ContextManager[None]:
        """This terminal handed to a child (a shell) while the dashboard waits; none when headless."""
        ...

    def start(self, work: Coroutine[Any, Any, None], group: str) -> None:
        """Run ``work`` in a worker of ``group``: an action waits on the node (a
        launch on the allocation lock, for as long as another process holds it)
        while the picture goes on being drawn."""
        ...

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: Optional[float] = None,
        markup: bool = True,
    ) -> None: ...


def failed(desk: Desk, title: str, error: BaseException) -> None:
    """Say why an action failed: the node's words for its refusals, the error's
    name and words for anything else (and the traceback in the log)."""
    if not isinstance(error, TpnodeError):
        log.warning("%s", title, exc_info=error)
        message = f"{type(error).__name__}: {error}"
    else:
        message = str(error)
    desk.notify(message, title=title, severity="error", timeout=12)


def refused(desk: Desk, what: str) -> bool:
    """The guard inside each action, for calls that bypass the keys (the command
    palette): a read-only dashboard, or a node that is not answering, does nothing."""
    session = desk.session
    if session.readonly:
        desk.notify(read_only(what), severity="warning")
        return True
    not_answering = session.follower.not_answering(what)
    if not_answering is not None:
        desk.notify(not_answering, title="Not answering", severity="warning", timeout=10)
        return True
    return False


def not_operator(desk: Desk, what: str) -> bool:
    """The node refuses anyway; this only spares a question that cannot end well
    (an action called from the palette after the person's role changed)."""
    now = desk.selection()
    if now.operator:
        return False
    desk.notify(refusals.not_operator(now, what), severity="warning")
    return True
