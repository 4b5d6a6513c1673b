"""Stop, extend, cancel and reclaim: what is done to a job, a reservation or a launch not started yet.

Each is offered on what is the caller's (or anyone's, for an operator), but
the node decides who may do what, and a refusal is said in its words.
"""

from __future__ import annotations

import time

from tpnode_tui.model.errors import Conflict, JobNotFound, NotAllowed, TpnodeError
from tpnode_tui.model.jobs import JobState, QueuedLaunch
from tpnode_tui.port.types.refusals import AgentUnavailable
from tpnode_tui.text.render import format_duration
from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen
from tpnode_tui.tui.screens.dialogs.extend import ExtendScreen
from tpnode_tui.tui.screens.flows.desk import Desk, failed, refused
from tpnode_tui.tui.wording.jobs import WAITING
from tpnode_tui.tui.wording.keys import BY_NAME
from tpnode_tui.tui.wording.questions import reclaim_question, stop_question


def extend(desk: Desk) -> None:
    """The extend key: how much longer the selected reservation holds its cards."""
    if refused(desk, "extending"):
        return
    now = desk.selection()
    job = now.extend_target()
    if job is None:
        desk.notify(BY_NAME["extend"].why_not(now), severity="warning")
        return
    desk.start(_ask_then_extend(desk, job), group="action")


async def _ask_then_extend(desk: Desk, job: JobState) -> None:
    longer = await desk.ask(ExtendScreen(job))
    if longer is None:
        return
    session = desk.session
    try:
        extended = await session.node.extend(job.key, longer)
    except Exception as e:
        failed(desk, f"Could not extend {job.key}", e)
        return
    until = time.strftime("%H:%M:%S", time.localtime(extended.expires_at or 0))
    left = format_duration((extended.expires_at or 0) - session.clock())
    desk.notify(f"{extended.key} holds {extended.holding} until {until} ({left} left).", title="Extended")


def cancel(desk: Desk) -> None:
    """The cancel key: the launch not started yet highlighted in the jobs table."""
    if refused(desk, "cancelling"):
        return
    now = desk.selection()
    launch = now.selected_launch()
    if launch is None:
        desk.notify(BY_NAME["cancel_launch"].why_not(now), severity="warning")
        return
    desk.start(_cancel(desk, launch), group="action")


async def _cancel(desk: Desk, launch: QueuedLaunch) -> None:
    """Cancel through the node, which says whether it was still in time."""
    run_id = launch.run_id
    launches = desk.session.launches
    launches.cancelling(run_id)
    try:
        await desk.session.node.cancel(run_id)
    except JobNotFound:
        launches.not_cancelled(run_id)
        desk.notify(
            f"{run_id} is no longer queued or waiting: it was placed or dropped meanwhile.",
            title="Nothing to cancel",
            severity="warning",
        )
        return
    except (NotAllowed, AgentUnavailable) as e:
        launches.not_cancelled(run_id)
        failed(desk, f"Could not cancel {run_id}", e)
        return
    except TpnodeError as e:  # being placed already: too late, and the node says what to do
        launches.not_cancelled(run_id, too_late=True)
        desk.notify(str(e), title="Too late to cancel", severity="warning", timeout=12)
        return
    launches.cancelled(run_id)
    if launch.state == WAITING:
        desk.notify(
            f"{run_id} is abandoned: it was still waiting for the allocation lock, so no "
            "card was picked and nothing was started.",
            title="Cancelled",
        )
    else:
        desk.notify(f"{run_id} is no longer queued.", title="Cancelled")


def stop(desk: Desk) -> None:
    """The stop key: the highlighted row's job while the jobs table has the focus, else the selected card's."""
    if refused(desk, "stopping"):
        return
    now = desk.selection()
    job = now.stop_target()
    if job is None:
        desk.notify(BY_NAME["stop"].why_not(now), severity="warning")
        return
    where = "Highlighted in the jobs table" if now.jobs_focused else f"On the selected card {now.card_index}"
    desk.start(_ask_then_stop(desk, job, stop_question(job, where)), group="action")


async def _ask_then_stop(desk: Desk, job: JobState, question: str) -> None:
    """The node decides who may stop what: a refusal is shown in its words."""
    if not await desk.ask(ConfirmScreen(f"Stop {job.run_id}?", question, yes="Stop it")):
        return
    try:
        await desk.session.node.stop(job.key)
    except NotAllowed as e:
        failed(desk, f"Not allowed to stop {job.key}", e)
        return
    except Exception as e:
        failed(desk, f"Could not stop {job.key}", e)
        return
    desk.notify(f"{job.key} stopped; it frees {job.holding} once it has exited.", title="Stopped")


def reclaim(desk: Desk) -> None:
    """The reclaim key: the exited jobs the caller may remove, listed first."""
    if refused(desk, "reclaiming"):
        return
    now = desk.selection()
    exited = now.exited_jobs()
    if not exited:
        desk.notify(BY_NAME["reclaim"].why_not(now))
        return
    desk.start(_ask_then_reclaim(desk, exited), group="action")


async def _ask_then_reclaim(desk: Desk, exited: list[JobState]) -> None:
    n = len(exited)
    question = ConfirmScreen(f"Reclaim {n} exited job{'s' if n != 1 else ''}?", reclaim_question(exited), yes="Reclaim")
    if await desk.ask(question):
        await reclaim_listed(desk, exited)


async def reclaim_listed(desk: Desk, jobs: list[JobState]) -> None:
    """Only the listed run ids, one by one: a job restarted since the list was
    shown is live again and is refused by the node, not removed."""
    removed: list[str] = []
    kept: list[str] = []
    for run_id in dict.fromkeys(j.key for j in jobs):
        try:
            removed += [j.key for j in await desk.session.node.reclaim(run_id)]
        except JobNotFound:
            pass  # reclaimed elsewhere meanwhile: the outcome is the same
        except Conflict as e:  # live again since the list was shown
            kept.append(str(e))
        except Exception as e:
            failed(desk, f"Could not reclaim {run_id}", e)
    if removed:
        desk.notify("Removed " + ", ".join(dict.fromkeys(removed)) + ".", title="Reclaimed")
    for why in kept:
        desk.notify(f"Not removed: {why}", severity="warning", timeout=10)
