"""The shell key: the caller's own shell on a reservation's cards, on this terminal.

The dashboard does not become the shell: it runs ``tpnode-tui shell RUN_ID``
as a child on the terminal while it is suspended, so the node moves that
child, not the dashboard, into the reservation's fence, and the child
becomes the login shell there. The node decides who may (its owner, an
operator); a refusal is the child's one line, left on the terminal until
enter (:func:`tpnode_tui.tui.terminal.on_this_terminal`). While the shell
runs, the dashboard waits: it neither draws nor, serving the node itself,
polls it (an agent goes on serving).
"""

from __future__ import annotations

from tpnode_tui.tui.screens.flows.desk import Desk, failed, refused
from tpnode_tui.tui.terminal import how_it_ended
from tpnode_tui.tui.wording.keys import BY_NAME


def shell(desk: Desk) -> None:
    """The shell key: a shell on the selected reservation, until it is exited."""
    if refused(desk, "opening a shell"):
        return
    session = desk.session
    now = desk.selection()
    job = now.shell_target()
    open_shell = session.open_shell
    if job is None or open_shell is None:
        desk.notify(BY_NAME["shell"].why_not(now), severity="warning")
        return
    if session.node.in_process and session.launches.asked:
        # This process serves the node: while the shell runs it does nothing else,
        # and a launch of its own holding the allocation lock would keep the shell's move waiting.
        desk.notify(
            "A launch asked from this dashboard is still being answered, and this dashboard serves the "
            "node itself: open the shell once it is answered.",
            severity="warning",
        )
        return
    try:
        with desk.suspended():
            end = open_shell(job.key)
    except Exception as e:  # a terminal that cannot be handed over: say so, keep the dashboard
        failed(desk, f"Could not open a shell on {job.key}", e)
        return
    if end.started:
        desk.notify(f"Back from the shell on {job.key}.", timeout=4)
    else:
        desk.notify(
            f"No shell was opened on {job.key} ({how_it_ended(end.code)}), for the reason it gave on the terminal.",
            title="Shell",
            severity="warning",
            timeout=8,
        )
