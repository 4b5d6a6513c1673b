"""The dashboard driven from the keyboard, over the real pieces.

Each test runs the app (Textual's pilot) on a node served in the test's
process, as the dashboard serves one without an agent (tests/helpers/dashboard.py):
the node's real service and allocator, the simulated probe reading a scene
file in tmp_path, the process runtime with real processes in a tmp state dir,
and the flock lock. What a test asserts is what an operator would see: the
tile, the table, the banner, the notification. The dashboard over an agent,
and over accounts that are not operators, is in tests/tui/test_tui_agent.py.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import socket
import time
from dataclasses import replace

import pytest

from helpers.callers import BOB
from helpers.dashboard import (
    SIZE,
    Dashboard,
    end,
    fill,
    header,
    hold_the_flock,
    polled,
    queued,
    row_cells,
    row_status,
    select_row,
    states,
    tile_text,
)
from helpers.services import write_scene
from helpers.waiting import until_pilot
from tpnode_tui.allocator.allocator import GpuAllocator
from tpnode_tui.locks import make_lock
from tpnode_tui.model.errors import NotAllowed
from tpnode_tui.node.local import LocalNode
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.port.types.reservations import ReserveRequest
from tpnode_tui.tui.app import NodeDashboard
from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen
from tpnode_tui.tui.screens.dialogs.extend import ExtendScreen
from tpnode_tui.tui.screens.dialogs.launch import LaunchScreen
from tpnode_tui.tui.screens.dialogs.reserve import ReserveScreen
from tpnode_tui.tui.screens.flows.jobs import reclaim_listed
from tpnode_tui.tui.screens.flows.launches import enqueue, submit
from tpnode_tui.tui.terminal import ShellEnd
from tpnode_tui.tui.widgets.tiles import CardGrid
from tpnode_tui.tui.wording.jobs import COLUMNS as JOB_COLUMNS

#: the node as the dashboard serves one without an agent (helpers/dashboard.py)
pytestmark = pytest.mark.service_node(dashboard=True)
#: two cards, so that one launch can take the node
SMALL = pytest.mark.service_node(cards=2)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(run_id: str, cards: int = 1) -> LaunchRequest:
    return LaunchRequest(cards=cards, command=("sleep", "60"), run_id=run_id)


# -- launch -----------------------------------------------------------------------


async def test_launch_from_the_form_puts_the_job_on_the_tiles(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await pilot.press("l")
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        await fill(pilot, screen, "cards", "2")
        await fill(pilot, screen, "command", "sleep 60")
        await fill(pilot, screen, "run-id", "from-the-form")
        await pilot.press("enter")
        await until_pilot(
            pilot, lambda: app.follower.snapshot and states(app)[:2] == ["job", "job"], "the job on cards 0,1"
        )
        assert "from-the-form" in tile_text(app, 0) and "from-the-form" in tile_text(app, 1)
        assert "FREE" in tile_text(app, 2)
        assert app.heard("from-the-form got cards 0,1")
        [job] = [j for j in app.follower.snapshot.jobs if j.run_id == "from-the-form"]
        assert job.command == ("sleep", "60") and job.live


async def test_the_launch_form_refuses_bad_input_next_to_the_field(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await pilot.press("l")
        screen = app.screen
        for typed, said in [
            ("two", "not a whole number"),
            ("0", "at least 1"),
            ("-1", "at least 1"),
            ("5", "this node has 4 cards"),
        ]:
            await fill(pilot, screen, "cards", typed)
            await pilot.press("enter")
            assert app.screen is screen, f"{typed!r} was accepted"
            assert said in str(screen.query_one("#cards-error").render())
        await fill(pilot, screen, "cards", "1")
        await fill(pilot, screen, "command", "python -c 'unclosed")
        await pilot.press("enter")
        assert app.screen is screen
        assert "cannot be read" in str(screen.query_one("#command-error").render())
        await fill(pilot, screen, "command", "sleep 60")
        await fill(pilot, screen, "run-id", "has spaces")
        await pilot.press("enter")
        assert app.screen is screen
        assert "not valid" in str(screen.query_one("#run-id-error").render())
        await pilot.press("escape")
        assert not isinstance(app.screen, LaunchScreen)
        await polled(pilot, app)
        assert app.follower.snapshot.jobs == (), "a refused or cancelled form launched something"


@SMALL
async def test_no_capacity_offers_a_queue_and_the_queued_launch_starts_when_a_card_frees(service_node):
    await service_node.place("holder", 2)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        assert states(app) == ["job", "job"]
        await pilot.press("l")
        await fill(pilot, app.screen, "cards", "1")
        await fill(pilot, app.screen, "run-id", "waits-its-turn")
        await pilot.press("enter")
        await until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the queue offer")
        offer = str(app.screen.query_one(".dialog-body").render())
        assert "need 1 card," in offer and "0 free" in offer, offer
        await pilot.press("y")
        await until_pilot(pilot, lambda: app.heard("waits-its-turn is queued"), "the launch to be queued")
        await until_pilot(pilot, lambda: "launch:waits-its-turn" in app.query_one("#jobs").row_keys, "its row")
        # Each round of the node's queue tries it, and a reading made meanwhile shows it "placing".
        await until_pilot(pilot, lambda: row_status(app, "waits-its-turn") == "queued #1", "it listed as queued #1")
        assert queued(app) == ["waits-its-turn"]
        assert states(app) == ["job", "job"], "a queued launch must not take a held card"

        await service_node.allocator.stop("holder")
        await until_pilot(pilot, lambda: "waits-its-turn" not in queued(app), "the node's queue to place it")
        await until_pilot(
            pilot,
            lambda: any(c.run_id == "waits-its-turn" for c in app.follower.snapshot.cards),
            "the placed job on a tile",
        )
        await until_pilot(pilot, lambda: app.heard("Queued launch started: waits-its-turn got card "), "the report")


@SMALL
async def test_a_launch_that_can_never_fit_is_refused_with_the_reason(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await submit(app.main, request("too-big", cards=3))
        assert app.heard("too-big needs 3 cards and this node has 2")
        assert not isinstance(app.screen, ConfirmScreen), "a request that never fits must not be queued"
        await polled(pilot, app)
        assert "too-big" not in queued(app)


@SMALL
async def test_a_queued_launch_can_be_cancelled_from_the_jobs_table(service_node):
    await service_node.place("holder", 2)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await enqueue(app.main, request("never-mind"))
        await until_pilot(pilot, lambda: "launch:never-mind" in app.query_one("#jobs").row_keys, "its row")
        assert app.main.check_action("cancel_launch", ()) is False, "cancel shows only on a launch's row"
        await select_row(pilot, app, "launch:never-mind")
        assert app.main.check_action("cancel_launch", ())
        await pilot.press("c")
        await until_pilot(pilot, lambda: app.heard("never-mind is no longer queued"), "the cancel")
        await until_pilot(pilot, lambda: "never-mind" not in queued(app), "the node's queue to drop it")
        await service_node.allocator.stop("holder")
        await polled(pilot, app, 3)
        assert all(j.run_id != "never-mind" for j in app.follower.snapshot.jobs), "a cancelled launch started"


async def test_a_queued_launch_waiting_for_the_lock_lets_polling_go_on(service_node):
    other = make_lock(service_node.allocator.settings)  # another process's hold on the same lock file
    app = service_node.app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await polled(pilot, app)
            header = app.query_one("#header")
            async with other.hold():
                # Agreeing to wait in the queue: with nobody before it in line, it is
                # tried at once, and waits for the lock.
                app.run_worker(enqueue(app.main, request("behind-the-lock")))
                await until_pilot(
                    pilot,
                    lambda: "waiting for the allocation lock" in str(header.render()),
                    "the header to name the wait",
                )
                await until_pilot(pilot, lambda: row_status(app, "behind-the-lock") == "waiting", "a waiting row")
                await polled(pilot, app, 3)  # a reading that waited on the lock would never land
                assert "waiting for the allocation lock" in str(header.render())
                assert all(j.run_id != "behind-the-lock" for j in app.follower.snapshot.jobs)
                assert "launch:behind-the-lock" in app.query_one("#jobs").row_keys
            await until_pilot(
                pilot,
                lambda: any(c.run_id == "behind-the-lock" for c in app.follower.snapshot.cards),
                "the queued launch once the lock is free",
            )
            await until_pilot(pilot, lambda: app.heard("behind-the-lock got card "), "its report")
            assert "behind-the-lock" not in queued(app)
            await until_pilot(pilot, lambda: "allocation lock" not in str(header.render()), "the line to go")
    finally:
        await other.close()


async def test_a_launch_waiting_for_another_process_s_lock_is_listed_and_can_be_abandoned(service_node):
    holder = await hold_the_flock(service_node.state)
    app = service_node.app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await polled(pilot, app)
            await pilot.press("l")
            await fill(pilot, app.screen, "run-id", "behind-the-flock")
            await pilot.press("enter")
            await until_pilot(pilot, lambda: row_status(app, "behind-the-flock") == "waiting", "a waiting row")
            await until_pilot(
                pilot,
                lambda: f"held by pid {holder.pid}" in row_cells(app, "behind-the-flock")[-1],
                f"the row to say what it waits for: {row_cells(app, 'behind-the-flock')}",
            )
            await polled(pilot, app, 2)  # the waiting launch holds back no poll

            await pilot.press("q")
            assert isinstance(app.screen, ConfirmScreen), "quit did not ask with a launch waiting"
            body = str(app.screen.query_one(".dialog-body").render())
            assert "behind-the-flock (waiting for the allocation lock)" in body, body
            await pilot.press("n")
            assert app.return_code is None

            await select_row(pilot, app, "launch:behind-the-flock")
            assert app.main.check_action("cancel_launch", ())
            await pilot.press("c")
            await until_pilot(
                pilot,
                lambda: app.heard("behind-the-flock is abandoned: it was still waiting for the allocation lock"),
                "the cancel",
            )
            await until_pilot(pilot, lambda: not row_cells(app, "behind-the-flock"), "the row to go")
            assert service_node.allocator.lock.waiting is None, "the abandoned launch still waits for the lock"

            await end(holder)  # the lock is free now: an abandoned launch must not go ahead after all
            await polled(pilot, app, 3)
            assert all(j.run_id != "behind-the-flock" for j in await service_node.allocator.runtime.ps())
            assert not app.heard("behind-the-flock got") and not app.heard("Launch refused")
            await pilot.press("q")
            assert app.return_code == 0, "quit asked with nothing left to drop"
    finally:
        await end(holder)


async def test_launches_waiting_for_redis_say_so_and_each_can_be_abandoned(make_node):
    url = f"redis://127.0.0.1:{closed_port()}/0"
    n = make_node(2, settings={"lock_redis_url": url})
    app = n.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        app.run_worker(submit(app.main, request("first")))  # with Redis down, they wait for ever
        app.run_worker(submit(app.main, request("second")))
        for run_id in ("first", "second"):
            await until_pilot(pilot, lambda r=run_id: row_status(app, r) == "waiting", f"{run_id} to wait")
            await until_pilot(
                pilot,
                lambda r=run_id: f"Redis at {url} unreachable" in row_cells(app, r)[-1],
                f"why {run_id} waits",
            )
        await select_row(pilot, app, "launch:first")
        await pilot.press("c")
        abandoned = "first is abandoned: it was still waiting for the allocation lock"
        await until_pilot(pilot, lambda: app.heard(abandoned), "the cancel")
        await until_pilot(pilot, lambda: not row_cells(app, "first"), "its row to go")
        await polled(pilot, app, 2)
        assert row_status(app, "second") == "waiting", "cancelling one ended another"
        assert not app.heard("Launch refused")


@SMALL
async def test_a_cancel_once_the_launch_holds_the_lock_is_too_late_and_says_so(service_node):
    runtime = service_node.allocator.runtime
    real_create, gate = runtime.create, asyncio.Event()

    async def slow_create(spec, gpus):  # the real create, once the test lets it go on
        await gate.wait()
        return await real_create(spec, gpus)

    runtime.create = slow_create
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await pilot.press("l")
        await fill(pilot, app.screen, "run-id", "too-late")
        await pilot.press("enter")
        await until_pilot(pilot, lambda: row_status(app, "too-late") == "placing", "the launch to hold the lock")
        await select_row(pilot, app, "launch:too-late")
        await pilot.press("c")
        await until_pilot(
            pilot,
            lambda: app.heard(
                "Too late to cancel: too-late already holds the allocation lock and is placing its job: too late "
                "to cancel"
            ),
            "the node's answer",
        )
        gate.set()
        await until_pilot(
            pilot,
            lambda: app.heard("too-late was cancelled while its launch was under way, and it got card 0 anyway"),
            "the too-late notice",
        )
        assert not app.heard("Launched: too-late")
        assert [j.run_id for j in await runtime.ps() if j.live] == ["too-late"], "it was placed all the same"


@SMALL
async def test_quit_with_launches_queued_asks_first_naming_them(service_node):
    await service_node.place("holder", 2)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        for run_id in ("first-in-line", "second-in-line"):
            await enqueue(app.main, request(run_id))
        await until_pilot(pilot, lambda: queued(app) == ["first-in-line", "second-in-line"], "both in the queue")
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)
        body = str(app.screen.query_one(".dialog-body").render())
        assert "2 launches not started yet will be dropped: first-in-line (" in body, body
        assert "second-in-line (queued)" in body, body
        await pilot.press("ctrl+q")  # asked again while asking: still one question
        assert len(app.screen_stack) == 2
        await pilot.press("n")
        assert app.return_code is None, "declining must not quit"
        await polled(pilot, app)
        assert queued(app) == ["first-in-line", "second-in-line"], "declining dropped a launch"
        await pilot.press("q", "y")
        assert app.return_code == 0


async def test_quit_with_nothing_queued_does_not_ask(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await pilot.press("q")
        assert app.return_code == 0


# -- reserve ------------------------------------------------------------------------


async def test_reserve_from_the_form_holds_a_card_for_its_owner(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await pilot.press("v")
        screen = app.screen
        assert isinstance(screen, ReserveScreen)
        await fill(pilot, screen, "duration", "forever")
        await pilot.press("enter")
        assert app.screen is screen
        assert "a reservation always ends" in str(screen.query_one("#duration-error").render())
        assert screen.query_one("#owner").value == "root", "the owner proposed is who asks"
        guest = f"guest{secrets.token_hex(3)}"  # a person with no account here (an operator may name one)
        await fill(pilot, screen, "duration", "30m")
        await fill(pilot, screen, "owner", guest)
        await fill(pilot, screen, "run-id", "rsv-for-guest")
        await pilot.press("enter")
        await until_pilot(pilot, lambda: app.follower.snapshot and states(app)[0] == "reservation", "the reservation")
        text = tile_text(app, 0)
        assert "RESERVED" in text and "rsv-for-guest" in text and "ends in" in text
        [job] = app.follower.snapshot.jobs
        assert job.kind == "reservation" and job.owner == guest
        assert 29 * 60 < job.expires_at - time.time() <= 30 * 60
        assert app.heard(f"Reserved for {guest}: rsv-for-guest got card 0.")


async def test_extend_asks_how_much_longer_and_the_reservation_holds_its_card_longer(service_node):
    launched = await service_node.local.reserve(ReserveRequest(cards=1, duration_s=600, run_id="rsv-short"))
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        assert app.main.check_action("extend", ())
        await pilot.press("plus")
        screen = app.screen
        assert isinstance(screen, ExtendScreen)
        await fill(pilot, screen, "duration", "a while")
        await pilot.press("enter")
        assert app.screen is screen and str(screen.query_one("#duration-error").render())
        await fill(pilot, screen, "duration", "30m")
        await pilot.press("enter")
        await until_pilot(pilot, lambda: app.heard("Extended: rsv-short holds card 0 until"), "the extension")
        await until_pilot(
            pilot,
            lambda: app.follower.snapshot.jobs[0].expires_at > launched.job.expires_at + 1700,
            "the new expiry in a reading",
        )
        await pilot.press("right")
        assert app.main.check_action("extend", ()) is False, "extend is offered on a reservation only"


async def test_the_shell_key_opens_a_shell_on_the_selected_reservation_and_says_how_it_ended(service_node):
    await service_node.local.reserve(ReserveRequest(cards=1, duration_s=600, run_id="rsv-sh"))
    await service_node.place("a-job", 1)
    asked: list[str] = []
    ends = [ShellEnd(started=True, code=1), ShellEnd(started=False, code=77)]

    def open_shell(run_id: str) -> ShellEnd:
        """What runs ``tpnode-tui shell RUN_ID`` on the terminal (tests/system/test_fence_shell.py runs it)."""
        asked.append(run_id)
        return ends[len(asked) - 1]

    app = service_node.app(open_shell=open_shell)
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        assert app.query_one(CardGrid).selected == 0 and states(app)[:2] == ["reservation", "job"]
        footer_keys = {b.binding.action for b in app.screen.active_bindings.values() if b.enabled}
        assert "shell" in footer_keys
        await pilot.press("S")  # a shell that ran ends with its last command's status: no failure
        assert asked == ["rsv-sh"] and app.heard("Back from the shell on rsv-sh.")
        await pilot.press("S")
        assert app.heard("No shell was opened on rsv-sh (exit code 77), for the reason it gave on the terminal.")
        app.launches.asked.add("placing-now")  # this dashboard serves the node and a launch of its own is under way
        await pilot.press("S")
        assert app.heard("A launch asked from this dashboard is still being answered")
        app.launches.asked.clear()
        docker = replace(app.main.selection(), snapshot=replace(app.follower.snapshot, runtime_kind="docker"))
        assert docker.shell_target() is None, "a docker node's reservation is a container: no shells"
        await pilot.press("right")
        assert app.main.check_action("shell", ()) is False, "a shell is offered on a reservation only"
        await pilot.press("S")
        assert asked == ["rsv-sh", "rsv-sh"]

    for other in (
        service_node.app(open_shell=open_shell, readonly=True),  # read-only: nothing is done from it
        service_node.app(),  # no shells from here: a node over --host, the demo's
        Dashboard(LocalNode(service_node.local.service, BOB), open_shell=open_shell),  # not bob's
    ):
        async with other.run_test(size=SIZE) as pilot:
            await polled(pilot, other)
            assert other.query_one(CardGrid).selected == 0 and states(other)[0] == "reservation"
            assert other.main.check_action("shell", ()) is False
    assert asked == ["rsv-sh", "rsv-sh"]


async def test_the_detail_pane_shows_a_running_job_s_cuda_exports_to_copy(service_node):
    await service_node.place("two-cards", 2)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        detail = str(app.query_one("#detail-text").render())
        assert "env     export CUDA_VISIBLE_DEVICES=0,1" in detail, detail
        assert "export CUDA_DEVICE_ORDER=PCI_BUS_ID" in detail
        await pilot.press("right", "right")
        assert "export" not in str(app.query_one("#detail-text").render()), "a free card has no exports"


# -- stop and reclaim -------------------------------------------------------------------


async def test_stop_asks_naming_the_run_id_and_stops_only_when_confirmed(service_node):
    await service_node.place("to-stop", 1)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        assert app.query_one(CardGrid).selected == 0 and states(app)[0] == "job"
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        assert "to-stop" in str(app.screen.query_one(".dialog-body").render())
        await pilot.press("n")
        await polled(pilot, app, 2)
        assert states(app)[0] == "job", "declining must not stop the job"

        await pilot.press("s")
        await pilot.press("y")
        await until_pilot(pilot, lambda: states(app)[0] == "free", "card 0 to be free")
        [job] = app.follower.snapshot.jobs
        assert not job.live
        assert app.heard("to-stop stopped")
        await pilot.press("right")
        assert app.main.check_action("stop", ()) is False, "stop is offered only on a card with a job"


async def test_stop_words_what_it_acts_on_a_card_or_a_jobs_table_row(service_node):
    await service_node.place("on-card-zero", 1)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await pilot.press("s")
        assert "On the selected card 0: on-card-zero" in str(app.screen.query_one(".dialog-body").render())
        await pilot.press("n")

        await enqueue(app.main, request("still-waiting", cards=4))
        await until_pilot(pilot, lambda: "launch:still-waiting" in app.query_one("#jobs").row_keys, "its row")
        table = app.query_one("#jobs")
        table.focus()
        table.move_cursor(row=table.row_keys.index("job:on-card-zero"))
        await pilot.pause()
        await pilot.press("s")
        body = str(app.screen.query_one(".dialog-body").render())
        assert "Highlighted in the jobs table: on-card-zero" in body and "selected card" not in body
        await pilot.press("n")
        table.move_cursor(row=table.row_keys.index("launch:still-waiting"))
        await pilot.pause()
        app.main.action_stop()  # as the palette would; the key itself is hidden on this row
        assert app.heard("The highlighted row is a launch not started yet, not a running job: c cancels it.")


async def test_reclaim_removes_only_the_exited_jobs_it_listed(service_node):
    await service_node.place("done-early", 1, "true")
    await service_node.place("still-running", 1)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await until_pilot(
            pilot,
            lambda: (
                app.follower.snapshot
                and any(j.run_id == "done-early" and not j.live for j in app.follower.snapshot.jobs)
            ),
            "done-early to exit",
        )
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmScreen)
        assert str(app.screen.query_one(".dialog-title").render()) == "Reclaim 1 exited job?"
        listed = str(app.screen.query_one(".dialog-body").render())
        assert "done-early" in listed and "still-running" not in listed

        # Another job ends while the question is open: it was not listed, so it stays.
        await service_node.place("ends-meanwhile", 1, "true")
        while any(j.live for j in await service_node.allocator.runtime.ps() if j.run_id == "ends-meanwhile"):
            await asyncio.sleep(0.05)
        await pilot.press("y")
        await until_pilot(pilot, lambda: app.heard("Removed done-early"), "the reclaim to finish")
        await polled(pilot, app, 2)
        left = {j.run_id: j.live for j in app.follower.snapshot.jobs}
        assert left == {"still-running": True, "ends-meanwhile": False}


async def test_reclaim_keeps_a_listed_job_that_is_live_again_and_says_so(service_node):
    await service_node.place("alive", 1)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        [job] = [j for j in app.follower.snapshot.jobs if j.run_id == "alive"]
        app.run_worker(reclaim_listed(app.main, [job]))  # as if it had exited when the list was shown
        await until_pilot(pilot, lambda: app.heard("Not removed: alive is still running"), "the warning")
        assert not app.heard("Could not reclaim")
        assert [j.run_id for j in await service_node.allocator.runtime.ps()] == ["alive"]


# -- read-only ------------------------------------------------------------------------


async def test_readonly_hides_and_refuses_every_action(service_node):
    await service_node.place("someones-job", 1)
    app = service_node.app(readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        for action in ("launch", "reserve", "extend", "stop", "reclaim", "cancel_launch", "drain", "undrain", "evict"):
            assert app.main.check_action(action, ()) is False, action
        assert "READ-ONLY" in str(app.query_one("#header").render())
        footer_keys = {b.binding.action for b in app.screen.active_bindings.values() if b.enabled}
        assert not footer_keys & {"launch", "reserve", "stop", "reclaim"}
        await pilot.press("l", "v", "s")
        assert app.screen is app.screen_stack[0], "a dialog opened in read-only mode"
        app.main.action_launch()  # as the command palette would call it
        app.main.action_stop()
        app.main.action_drain()
        app.main.action_evict()
        await pilot.pause()
        assert app.screen is app.screen_stack[0]
        assert app.heard("read-only dashboard: launching is refused")
        assert app.heard("read-only dashboard: stopping is refused")
        assert app.heard("read-only dashboard: draining is refused")
        assert app.heard("read-only dashboard: evicting is refused")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Launch a job" not in titles and "Help: keys and card states" in titles
        assert [j.live for j in app.follower.snapshot.jobs] == [True]


# -- honesty about what cannot be seen -------------------------------------------------


async def test_probe_blind_shows_a_banner_and_no_free_card(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        banner = app.query_one("#blind-banner")
        assert not banner.has_class("-shown")
        write_scene(service_node.scene, 4, blind=True)
        await until_pilot(pilot, lambda: banner.has_class("-shown"), "the blind banner")
        text = str(banner.render())
        assert "PROBE-BLIND" in text and "free count may be too high" in text
        assert states(app) == ["unverified"] * 4
        assert "FREE" not in tile_text(app, 0) and "UNVERIFIED" in tile_text(app, 0)

        write_scene(service_node.scene, 4)
        await until_pilot(pilot, lambda: not banner.has_class("-shown"), "the banner to go")
        assert states(app) == ["free"] * 4


async def test_a_short_terminal_keeps_the_jobs_table_on_screen_while_blind(service_node):
    app = service_node.app()
    async with app.run_test(size=(80, 24)) as pilot:
        await polled(pilot, app)
        write_scene(service_node.scene, 4, blind=True)
        banner = app.query_one("#blind-banner")
        await until_pilot(pilot, lambda: banner.has_class("-shown"), "the blind banner")
        await pilot.pause()
        assert "launches wait for the probe" in str(banner.render())
        reason, explanation = str(banner.render()).split("\n")
        assert len(explanation) < 78, "the reason, then one short line"
        jobs = app.query_one("#jobs")
        assert jobs.region.y + 2 <= app.size.height - 1, f"jobs table pushed under the footer: {jobs.region}"


def on_screen(app: NodeDashboard, selector: str) -> bool:
    """Whether a widget takes at least one row above the footer."""
    region = app.query_one(selector).region
    return region.height > 0 and region.y < app.size.height - 1


async def test_the_layout_follows_each_resize_at_once_both_ways(service_node):
    app = service_node.app()
    async with app.run_test(size=(200, 60)) as pilot:
        await polled(pilot, app)
        assert on_screen(app, "#summary") and on_screen(app, "#jobs")
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert not on_screen(app, "#summary"), "an 80x24 screen keeps the summary"
        assert on_screen(app, "#jobs"), "an 80x24 screen pushes the jobs table off"
        jobs = app.query_one("#jobs").region
        assert jobs.y + 2 <= app.size.height - 1, f"jobs table under the footer: {jobs}"
        assert "runtime process" not in str(app.query_one("#header").render()), "the header stays long"
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert on_screen(app, "#summary"), "back at 120x40 the summary stays hidden"
        assert "runtime process" in str(app.query_one("#header").render())


@pytest.mark.service_node(cards=8)
async def test_at_80x24_every_card_shows_and_nothing_is_cut(service_node):
    """The smallest terminal laid out for: a line per card, every one of the
    eight inside the grid as drawn; the header's two lines and the jobs
    table's columns whole (a column with no room is left out, never cut to
    "FEN"); the detail pane's facts wrapped under their own column, the PCI
    address never split from its name."""
    card = {"name": "NVIDIA H200", "memory_total_mib": 143771, "uuid": "GPU-3f1c2b7e-9a41-4c2d-8e5f-0a1b2c3d4e5f"}
    write_scene(service_node.scene, [card | {"pci_bus_id": f"00000000:{0x18 + n:02X}:00.0"} for n in range(8)])
    await service_node.place("demo-train-llama", 1)
    await service_node.allocator.reserve(1, 7200, owner="alice", run_id="rsv-alice")
    app = service_node.app()
    async with app.run_test(size=(80, 24)) as pilot:
        await polled(pilot, app, 2)
        await pilot.pause()
        grid = app.query_one(CardGrid)
        shown = grid.content_region
        assert [t.region in shown for t in grid.tiles] == [True] * 8, [t.region for t in grid.tiles]
        assert all(tile_text(app, n).startswith(str(n)) for n in range(8))

        lines = header(app).splitlines()
        assert len(lines) == 2 and "updated" in lines[0] and lines[0].rstrip().endswith(("now", "ago")), lines
        table = app.query_one("#jobs")
        labels = [str(column.label) for column in table.columns.values()]
        assert set(labels) <= {label for _key, label in JOB_COLUMNS} and "RUN ID" in labels, labels
        assert sum(column.get_render_width(table) for column in table.columns.values()) <= table.size.width

        detail = str(app.query_one("#detail-text").render()).splitlines()
        pci = next(line for line in detail if "PCI " in line)
        assert re.search(r"PCI [0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9]", pci), detail
        assert all(len(line) <= 80 - 5 for line in detail), detail
        assert not any(line[:1].strip() for line in detail[1:]), "a line the pane wrapped at its left edge"


async def test_a_256_card_node_names_its_cards_as_ranges_and_keeps_the_jobs_table(make_node):
    n = make_node(256)
    busy = {"name": "NVIDIA H200", "memory_total_mib": 143771, "memory_used_mib": 30000}
    sick = {"name": "NVIDIA H200", "memory_total_mib": 143771, "health": {"row_remap_pending": True}}
    idle = {"name": "NVIDIA H200", "memory_total_mib": 143771}
    cards = [busy if 4 <= i <= 6 or i == 8 or 13 <= i <= 244 else sick if 245 <= i <= 254 else idle for i in range(256)]
    write_scene(n.scene, cards)
    app = n.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await pilot.pause()
        summary = app.query_one("#summary")
        text = str(summary.render())
        assert "236 held by processes outside the platform (cards 4-6,8,13-244)" in text, text
        assert "10 unhealthy (cards 245-254: row remapping pending, which needs a GPU reset)" in text, text
        assert summary.region.height <= 2, f"the summary takes {summary.region.height} rows"
        jobs = app.query_one("#jobs").region
        assert jobs.height >= 4 and jobs.bottom <= app.size.height - 1, f"jobs table off screen: {jobs}"

        await pilot.press("l")
        context = str(app.screen.query_one(".dialog-context").render())
        assert "10 of 256 cards free now (cards 0-3,7,9-12,255)." in context, context
        await fill(pilot, app.screen, "cards", "4")
        await fill(pilot, app.screen, "run-id", "four-cards")
        await pilot.press("enter")
        await until_pilot(pilot, lambda: app.heard("four-cards got cards 0-3"), "the launch")
        await until_pilot(pilot, lambda: "job:four-cards" in app.query_one("#jobs").row_keys, "its row")
        table = app.query_one("#jobs")
        row = table.get_row("job:four-cards")
        assert "0-3" in [str(cell) for cell in row], row
        assert "cards 0-3" in str(app.query_one("#detail-text").render())
        await pilot.press("s")
        assert "4 cards" not in str(app.screen.query_one(".dialog-body").render())
        assert "cards 0-3" in str(app.screen.query_one(".dialog-body").render())
        await pilot.press("n")


async def test_a_failing_poll_marks_everything_stale_and_recovers_by_itself(service_node):
    await service_node.place("running-job", 1)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        state_file = service_node.state / "jobs.json"
        good = state_file.read_bytes()
        state_file.write_text("{ this is not json")
        banner = app.query_one("#stale-banner")
        await until_pilot(pilot, lambda: banner.has_class("-shown"), "the stale banner")
        text = str(banner.render())
        assert "stale since" in text and "jobs.json" in text
        header = str(app.query_one("#header").render())
        assert "STALE since" in header
        for index in range(4):
            tile = app.query_one(f"#card-{index}")
            assert tile.has_class("-stale")
            assert "FREE" not in tile_text(app, index), f"card {index} shown free while stale"
        assert "unknown" in str(app.query_one("#detail-text").render())
        assert app.main.check_action("stop", ()) is False, "nothing to stop is known while stale"

        assert app.follower.stale_since is not None and app.follower.stale_since <= time.time()
        with pytest.raises(AttributeError):
            app.follower.stale_since = None  # read-only: only a poll decides it

        state_file.write_bytes(good)
        await until_pilot(pilot, lambda: not banner.has_class("-shown"), "recovery")
        assert app.follower.stale_since is None
        assert not app.query_one("#card-1").has_class("-stale")
        assert "FREE" in tile_text(app, 1) and "running-job" in tile_text(app, 0)


async def test_a_first_poll_that_fails_says_nothing_was_read_and_shows_no_card(service_node):
    await service_node.place("running-job", 1)
    state_file = service_node.state / "jobs.json"
    good = state_file.read_bytes()
    state_file.write_text("{ this is not json")
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        banner = app.query_one("#stale-banner")
        await until_pilot(pilot, lambda: banner.has_class("-shown"), "the banner")
        text = str(banner.render())
        assert "jobs.json" in text and "nothing has been read yet" in text.lower(), text
        assert "last good reading" not in text, text
        header = str(app.query_one("#header").render())
        assert "last good reading" not in header and "reading the node" not in header, header
        assert "nothing read yet" in header.lower(), header
        assert not app.query("CardTile"), "a card shown with nothing read"
        assert not on_screen(app, "#detail") and not on_screen(app, "#summary")
        assert app.follower.snapshot is None and app.main.check_action("stop", ()) is False

        state_file.write_bytes(good)
        await until_pilot(pilot, lambda: not banner.has_class("-shown"), "recovery")
        await pilot.pause()
        assert "running-job" in tile_text(app, 0) and "FREE" in tile_text(app, 1)


async def test_no_driver_and_no_count_says_so_instead_of_an_empty_grid(make_node):
    problem = "NVML: library not found; nvidia-smi: not found on PATH"
    n = make_node(0)
    write_scene(n.scene, [], fail=problem)
    app = n.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        panel = app.query_one("#no-cards")
        assert panel.has_class("-shown") and app.query_one(CardGrid).has_class("-hidden")
        text = str(panel.render())
        assert problem in text and "tpnode-tui --demo" in text and "--gpu-count" in text


async def test_the_header_says_who_holds_the_lock_and_that_a_launch_waits_for_it(service_node, tmp_path):
    other = GpuAllocator.from_settings(service_node.allocator.settings)  # another process's view, same lock file
    app = service_node.app()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await polled(pilot, app)
            header = app.query_one("#header")
            async with other.lock.hold():
                await until_pilot(pilot, lambda: "held by pid" in str(header.render()), "the lock holder")
                app.run_worker(submit(app.main, request("behind-the-lock")))
                await until_pilot(
                    pilot, lambda: "waiting for the allocation lock" in str(header.render()), "the waiting line"
                )
                await polled(pilot, app, 2)  # the waiting launch holds back no poll
                assert all(j.run_id != "behind-the-lock" for j in app.follower.snapshot.jobs)
            await until_pilot(
                pilot,
                lambda: any(c.run_id == "behind-the-lock" for c in app.follower.snapshot.cards),
                "the launch once the lock is free",
            )
            await until_pilot(pilot, lambda: "allocation lock" not in str(header.render()), "the line to go")
    finally:
        await other.close()


async def test_the_lock_is_inspected_once_per_poll_by_the_snapshot(service_node):
    lock = service_node.allocator.lock
    real = lock.state
    calls = 0

    async def counting_state():
        nonlocal calls
        calls += 1
        return await real()

    lock.state = counting_state
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app, 4)
        readings = app.follower.readings
    assert readings >= 4 and calls <= readings + 1, f"{calls} lock inspections in {readings} readings"


# -- readings ---------------------------------------------------------------------------


async def test_the_grid_holds_still_under_a_dialog_and_catches_up_when_it_closes(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await pilot.press("l")
        write_scene(service_node.scene, 4, blind=True)
        await until_pilot(pilot, lambda: not app.follower.snapshot.occupancy.external_probe_ok, "a poll to see it")
        assert "FREE" in tile_text(app, 0), "the grid was redrawn under the dialog"
        await pilot.press("escape")
        await pilot.pause()
        assert "UNVERIFIED" in tile_text(app, 0)
        assert app.query_one("#blind-banner").has_class("-shown")


async def test_pause_holds_the_picture_still_until_resumed(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await pilot.press("p")
        await pilot.pause(0.1)  # a reading already on its way may still land
        frozen = app.follower.readings
        await service_node.place("while-paused", 1)
        await pilot.pause(0.8)
        assert app.follower.readings == frozen and app.follower.snapshot.jobs == ()
        assert "PAUSED" in header(app)
        assert service_node.local.service.subscribers == 0, "a paused dashboard still follows the readings"
        await pilot.press("p")
        await until_pilot(pilot, lambda: any(j.run_id == "while-paused" for j in app.follower.snapshot.jobs), "resume")


async def test_the_grid_has_four_columns_at_120_and_fewer_when_narrow(service_node):
    app = service_node.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await polled(pilot, app)
        grid = app.query_one(CardGrid)
        assert grid.columns == 4
        await pilot.resize_terminal(70, 40)
        await pilot.pause()
        assert grid.columns == 2
        await pilot.press("down")
        assert grid.selected == 2, "down moves by one row of the current width"


# -- who is asking -----------------------------------------------------------------------


async def test_the_header_says_who_you_are_and_that_the_node_is_served_in_process(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        you = app.follower.you
        assert (you.user, you.uid, you.operator) == ("root", 0, True)  # the kernel's answer for this process
        lines = header(app).splitlines()
        assert lines[1].strip() == "root · operator │ served in-process (no agent)", lines
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert "root · operator" in header(app), "a short terminal drops who you are"


async def test_someone_who_is_not_an_operator_is_offered_only_their_own_and_hears_the_node_s_rule(service_node):
    """The node's service and rules are real; only the caller is named by hand,
    as no other account can run inside this test (real accounts against a real
    agent are in tests/tui/test_tui_agent.py)."""
    await service_node.place("someone-elses", 1)  # owner "tester"
    as_bob = LocalNode(service_node.local.service, BOB)
    app = Dashboard(as_bob, default_command=("sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        assert "bob │ served in-process" in header(app) and "operator" not in header(app).splitlines()[1]
        assert states(app)[0] == "job" and app.query_one(CardGrid).selected == 0
        assert app.main.check_action("stop", ()) is False, "s offered on someone else's job"
        footer_keys = {b.binding.action for b in app.screen.active_bindings.values() if b.enabled}
        assert "stop" not in footer_keys and "launch" in footer_keys

        app.main.action_stop()  # as if offered anyway: the node decides, and says why not
        await pilot.press("y")
        await until_pilot(
            pilot,
            lambda: app.heard(
                "Not allowed to stop someone-elses: card 0 is held by "
                "someone-elses of tester; only tester or an operator"
            ),
            "the node's refusal",
        )
        assert states(app)[0] == "job"

        await pilot.press("v")
        screen = app.screen
        assert screen.query_one("#owner").value == "bob"
        await fill(pilot, screen, "owner", "alice")
        await pilot.press("enter")
        assert app.screen is screen
        assert "only an operator may reserve for someone else" in str(screen.query_one("#owner-error").render())
        await pilot.press("escape")


async def test_a_key_not_offered_says_why_in_the_node_s_own_words(service_node):
    """s and d pressed on someone else's job by an account that does not operate
    the node: neither is in the footer, neither asks anything, and each says in
    one line exactly what the node refuses it with; a key with nothing to act on
    says what there is not."""
    await service_node.place("someone-elses", 1)  # owner "tester"
    as_bob = LocalNode(service_node.local.service, BOB)
    with pytest.raises(NotAllowed) as stop:
        await as_bob.stop("someone-elses")
    with pytest.raises(NotAllowed) as drain:
        await as_bob.drain(0, "fan")
    app = Dashboard(as_bob, default_command=("sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        assert app.query_one(CardGrid).selected == 0 and states(app)[0] == "job"
        footer_keys = {b.binding.action for b in app.screen.active_bindings.values() if b.enabled}
        assert not footer_keys & {"stop", "drain", "reclaim"}
        await pilot.press("s")
        await pilot.press("d")
        await pilot.press("r")
        await pilot.pause()
        assert app.screen is app.screen_stack[0], "a question was asked"
        assert app.heard(str(stop.value)), app.said
        assert str(stop.value).startswith("card 0 is held by someone-elses of tester; only tester or an operator")
        assert app.heard(str(drain.value)) and "bob may not drain card 0: only an operator (" in str(drain.value)
        assert app.heard("Nothing to reclaim: no job has exited.")
        said = len(app.said)
        await pilot.press("v")  # offered: it opens its form and says nothing
        assert isinstance(app.screen, ReserveScreen) and len(app.said) == said
        await pilot.press("escape")
        assert states(app)[0] == "job"


@SMALL
async def test_a_queued_launch_the_node_drops_is_said_with_the_node_s_reason(service_node, tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\nsleep 60\n")
    script.chmod(0o755)
    await service_node.place("holder", 2)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await enqueue(app.main, LaunchRequest(cards=1, command=(str(script),), run_id="goes-missing"))
        await until_pilot(pilot, lambda: "goes-missing" in queued(app), "it to be queued")
        script.unlink()  # by the time there is room, its command is gone
        await service_node.allocator.stop("holder")
        dropped = "Queued launch dropped: queued launch goes-missing left the queue: "
        await until_pilot(pilot, lambda: app.heard(dropped), "the reason, from the node's log")
        assert str(script) in next(m for m, _ in app.said if "goes-missing left the queue" in m)
        assert "goes-missing" not in queued(app)
