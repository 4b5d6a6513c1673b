"""The question asked before quitting drops launches not started yet."""

from __future__ import annotations

from typing import Sequence

from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen
from tpnode_tui.tui.wording.jobs import PLACING, QUEUED, WAITING

#: how quitting names a launch it would drop, by its state
DROPPED_AS = {
    QUEUED: "queued",
    WAITING: "waiting for the allocation lock",
    PLACING: "being placed now: stop and reclaim it if it shows up",
    "": "under way",
}


class QuitScreen(ConfirmScreen):
    """Quit and drop these launches? It names each of them: whoever asked for
    them may be waiting, and nothing else will start them."""

    def __init__(self, dropped: Sequence[tuple[str, str]], *, agent: bool, demo: bool) -> None:
        """``dropped``: (run id, state) of each launch quitting would drop; ``agent``:
        the node is served by its agent; ``demo``: the dashboard shows the demo."""
        names = [f"{run_id} ({DROPPED_AS.get(state, state)})" for run_id, state in dropped]
        many = len(names) > 1
        count = f"{len(names)} launch{'es' if many else ''} not started yet"
        jobs = "The demo stops its own jobs." if demo else "Running jobs and reservations keep running."
        where = (
            "They wait for the allocation lock on this dashboard's behalf, and end with it"
            if agent
            else "They live only in this dashboard"
        )
        body = (
            f"{count} will be dropped: {', '.join(names)}.\n\n{where}; nothing else will start "
            f"{'them' if many else 'it'}. {jobs}"
        )
        super().__init__(f"Quit and drop {count}?", body, yes="Quit")
