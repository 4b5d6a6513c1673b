"""Triage from the dashboard: drain, undrain, evict, the node's log and the cards' history.

Over the real pieces, as tests/tui/test_tui_actions.py: the node's service and
allocator served in the test's process, the simulated probe reading a scene
file the test rewrites (which processes the driver lists on which card, and
the card's health), real processes, and the flock lock. The person at the
dashboard is this process's account (root: an operator), except where a
test names someone else.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from dataclasses import replace

import psutil
import pytest
from rich.console import Console
from textual.renderables.sparkline import Sparkline as SparklineRenderable

from helpers.callers import BOB
from helpers.dashboard import SIZE, Dashboard, DashboardNode, fill, polled, states, tile_text
from helpers.waiting import until_pilot
from tpnode_tui.model.errors import NotAllowed
from tpnode_tui.model.snapshot import Sample
from tpnode_tui.model.views import HOLDER, INTRUDER, UNKNOWN, HolderInfo
from tpnode_tui.node.local import LocalNode
from tpnode_tui.port.types.refusals import AgentUnavailable
from tpnode_tui.port.types.reservations import ReserveRequest
from tpnode_tui.tui.follow.history import SLICES, Recent, columns
from tpnode_tui.tui.follow.log import EVENTS_KEPT
from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen
from tpnode_tui.tui.screens.dialogs.drain import DrainScreen
from tpnode_tui.tui.widgets.events import EventsPane
from tpnode_tui.tui.widgets.sparks import FixedSparkline, padded, summary
from tpnode_tui.tui.widgets.tiles import CardGrid
from tpnode_tui.tui.wording.card import holder_text
from tpnode_tui.tui.wording.sparks import BARS, squeeze

#: records that it got SIGTERM, and goes on: it needs SIGKILL to end
STUBBORN = (
    "import pathlib, signal, sys, time\n"
    "marker = pathlib.Path(sys.argv[1])\n"
    "signal.signal(signal.SIGTERM, lambda *_: marker.write_text('TERM'))\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    time.sleep(60)\n"
)


#: the node as the dashboard serves one without an agent (helpers/dashboard.py), evicting with a short grace
pytestmark = pytest.mark.service_node(dashboard=True, settings={"triage_evict_grace_s": "0.5"})


def on_card(node: DashboardNode, index: int, *pids: int) -> None:
    node.edit(
        index,
        processes=[{"pid": pid, "used_memory_mib": 4096} for pid in pids],
        memory_used_mib=4096 * len(pids) + 512 if pids else 1,
    )


async def select(pilot, app: Dashboard, index: int) -> None:
    app.query_one(CardGrid).select(index)
    await pilot.pause()


def detail(app: Dashboard) -> str:
    return str(app.query_one("#detail-text").render())


def dialog(app: Dashboard) -> str:
    return str(app.screen.query_one(".dialog-body").render())


def footer_actions(app: Dashboard) -> set[str]:
    return {b.binding.action for b in app.screen.active_bindings.values() if b.enabled}


# -- drain and undrain ------------------------------------------------------------


async def test_drain_asks_why_and_the_card_says_reason_who_and_when(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await select(pilot, app, 1)
        await pilot.press("d")
        screen = app.screen
        assert isinstance(screen, DrainScreen)
        await pilot.press("enter")  # no reason: refused next to the field, nothing drained
        assert app.screen is screen and "say why" in str(screen.query_one("#reason-error").render())
        await fill(pilot, screen, "reason", "fan failing, RMA 4411")
        await pilot.press("enter")
        await until_pilot(pilot, lambda: states(app)[1] == "drained", "card 1 drained")
        assert app.heard("Drained: Card 1 is out of service: fan failing, RMA 4411")
        assert "DRAINED" in tile_text(app, 1) and "fan failing" in tile_text(app, 1)
        assert "by root" in tile_text(app, 1)
        text = detail(app)
        assert "fan failing, RMA 4411" in text and "by root, an operator, at " in text, text
        assert app.main.check_action("drain", ()) is False and app.main.check_action("undrain", ()) is True
        assert app.main.check_action("evict", ()) is False, "evict is offered only where a process is listed"
        assert app.query_one("#card-1").has_class("state-drained")
        await polled(pilot, app)
        assert states(app)[1] == "drained", "a drained card must stay out of service"


async def test_undrain_is_refused_in_the_node_s_words_while_the_card_reports_a_problem(service_node):
    await service_node.local.drain(2, "row remapping: reset in the maintenance window")
    service_node.edit(2, health={"row_remap_pending": True})
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await select(pilot, app, 2)
        assert states(app)[2] == "drained"
        await pilot.press("u")
        assert isinstance(app.screen, ConfirmScreen)
        assert "row remapping: reset in the maintenance window" in dialog(app)
        await pilot.press("y")
        await until_pilot(
            pilot,
            lambda: app.heard("Card 2 stays drained: card 2 stays drained: it still reports row remapping pending"),
            "the node's refusal",
        )
        await polled(pilot, app)
        assert states(app)[2] == "drained"

        service_node.edit(2, health={})
        await polled(pilot, app, 2)
        await pilot.press("u")
        await until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.press("y")
        await until_pilot(pilot, lambda: states(app)[2] == "free", "card 2 back in service")
        assert app.heard("Undrained: Card 2 is back in service (it was drained by root: row remapping")


# -- check ------------------------------------------------------------------------------


async def test_t_checks_the_selected_card_through_the_node_and_shows_each_finding(service_node):
    """The same locked path as tpnode-tui check: the node checks the card in its own
    process, keeps the result as the card's last check, and the dashboard says it."""
    await service_node.local.drain(1, "fan failing")
    service_node.edit(2, processes=[{"pid": 4242, "used_memory_mib": 4096}], memory_used_mib=4608)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await select(pilot, app, 1)
        assert app.main.check_action("check", ()) is True and "check" in footer_actions(app)
        await pilot.press("t")
        await until_pilot(pilot, lambda: app.heard("Card 1 passed its check"), "the check's result")
        assert app.heard("ok  answers: the card answers by its uuid ")
        assert app.heard("The node: it stays drained: root drained it, and only an operator undrains it")
        await polled(pilot, app)
        assert "check passed at " in " ".join(detail(app).split()), detail(app)
        assert states(app)[1] == "drained"
        [entry] = [e for e in await app.node.events() if e.get("kind") == "check"]
        assert entry["cards"] == [1] and entry["user"] == "root"

        await select(pilot, app, 2)  # a process of no job on it: the card fails, and the node drains it
        await pilot.press("t")
        await until_pilot(pilot, lambda: app.heard("Card 2 failed its check"), "the failed check")
        assert app.heard("failed  processes: processes on it: pid 4242") and app.heard("The node: drained.")
        await until_pilot(pilot, lambda: states(app)[2] == "drained", "card 2 drained by its check")
        assert "for a failed check; it stays out of service until an operator undrains it" in " ".join(
            detail(app).split()
        )


async def test_t_on_a_card_a_job_holds_says_why_in_the_node_s_words_and_someone_else_is_refused(service_node):
    launched = await service_node.local.reserve(ReserveRequest(cards=1, duration_s=600, run_id="rsv-held"))
    [held] = launched.gpus
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await select(pilot, app, held)
        assert app.main.check_action("check", ()) is False and "check" not in footer_actions(app)
        await pilot.press("t")
        await pilot.pause()
        assert app.heard(f"card {held} is held by rsv-held of root: a check would disturb it")
    app = Dashboard(LocalNode(service_node.local.service, BOB), default_command=("sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await select(pilot, app, 0)
        assert app.main.check_action("check", ()) is False and "check" not in footer_actions(app)
        await pilot.press("t")
        await pilot.pause()
        assert app.heard("bob may not check card 0: only an operator (")
        assert not [e for e in await app.node.events() if e.get("kind") == "check"]


# -- evict ------------------------------------------------------------------------------


async def test_evict_lists_the_pid_first_then_sigterm_and_a_second_question_before_sigkill(service_node, tmp_path):
    marker = tmp_path / "got-sigterm"
    service_node.state.mkdir()  # where the node keeps its log (the first launch would make it)
    stubborn = subprocess.Popen([sys.executable, "-c", STUBBORN, str(marker)], stdout=subprocess.PIPE, text=True)
    try:
        assert stubborn.stdout.readline().strip() == "ready"
        on_card(service_node, 2, stubborn.pid)
        app = service_node.app()
        async with app.run_test(size=SIZE) as pilot:
            await polled(pilot, app, 2)
            await select(pilot, app, 2)
            assert app.follower.snapshot.cards[2].state == "external"
            await pilot.press("k")
            await until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the dry run's list")
            asked = dialog(app)
            assert f"pid {stubborn.pid} · root" in asked and "card 2, external" in asked, asked
            assert "would be sent SIGTERM" in asked
            assert not marker.exists(), "the dry run signalled the process"

            await pilot.press("y")
            await until_pilot(
                pilot,
                lambda: (
                    isinstance(app.screen, ConfirmScreen)
                    and "Kill what is left on card 2?" in str(app.screen.query_one(".dialog-title").render())
                ),
                "the SIGKILL question",
            )
            assert marker.read_text() == "TERM"
            assert stubborn.poll() is None, "only SIGTERM was sent so far"
            assert "did not end within 0.5 s of SIGTERM" in dialog(app)

            await pilot.press("y")
            await until_pilot(pilot, lambda: stubborn.poll() is not None, "the process to be killed")
            assert stubborn.returncode == -signal.SIGKILL
            await until_pilot(pilot, lambda: app.heard("killed with SIGKILL"), "the outcome")
            assert app.heard(f"pid {stubborn.pid} (root, ")
            logged = [e for e in await service_node.local.events(card=2) if e["kind"] == "evict"]
            assert [e["outcome"] for e in logged] == ["running", "killed"], logged
    finally:
        if stubborn.poll() is None:
            stubborn.kill()
        stubborn.wait()


async def test_k_pressed_again_while_the_dry_run_is_out_asks_once(service_node, monkeypatch):
    """Through an agent a dry run takes a moment; a second press must not stack a second question."""
    squatter = subprocess.Popen(["sleep", "300"])
    try:
        on_card(service_node, 1, squatter.pid)
        app = service_node.app()
        dry_runs: list[int] = []
        evict = service_node.local.evict

        async def slow(card, pid=None, **kw):
            if kw.get("dry_run"):
                dry_runs.append(card)
                await asyncio.sleep(0.5)
            return await evict(card, pid, **kw)

        monkeypatch.setattr(service_node.local, "evict", slow)
        async with app.run_test(size=SIZE) as pilot:
            await polled(pilot, app, 2)
            await select(pilot, app, 1)
            await pilot.press("k")
            await pilot.pause(0.1)
            assert app.main.check_action("evict", ()) is False, "not offered while its question is on its way"
            await pilot.press("k")
            await until_pilot(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
            await pilot.pause(0.7)
            assert len(app.screen_stack) == 2 and dry_runs == [1], (app.screen_stack, dry_runs)
            await pilot.press("n")
            await pilot.pause()
            assert app.main.check_action("evict", ()) is True, "offered again once answered"
        assert squatter.poll() is None, "the answer was no"
    finally:
        squatter.kill()
        squatter.wait()


async def test_the_log_pane_says_it_follows_again_after_a_reconnect_even_before_anything_is_written(
    service_node, monkeypatch
):
    follow = service_node.local.follow_events
    calls: list[int] = []
    problem_read = asyncio.Event()

    async def flaky(card=None, since_s=None, opened=None):
        calls.append(1)
        if len(calls) == 1:
            raise AgentUnavailable("no agent answers at /run/tpnode-tui/agent.sock (it went away)")
        # the retry is held until the test has read the problem: on a loaded machine
        # the 0.2 s it would otherwise stay on screen can pass between two looks
        await problem_read.wait()
        async for entry in follow(card=card, since_s=None, opened=opened):  # a quiet log: nothing in the hour
            yield entry

    monkeypatch.setattr(service_node.local, "follow_events", flaky)
    app = service_node.app(reconnect_s=(0.2, 0.2))
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await pilot.press("e")
        await until_pilot(pilot, lambda: "it went away" in pane_text(app), "the problem while it lasts")
        problem_read.set()
        await until_pilot(pilot, lambda: len(calls) >= 2 and "it went away" not in pane_text(app), "following again")
        await service_node.local.drain(2, "after the reconnect")
        await until_pilot(pilot, lambda: "after the reconnect" in pane_text(app), "a new entry")


async def test_evict_says_in_the_node_s_words_why_nothing_on_a_card_can_be_signalled(service_node):
    unseen = 3_999_999
    while psutil.pid_exists(unseen):
        unseen -= 1
    job = await service_node.place("mine", 1)  # card 0, the test's own platform job
    on_card(service_node, 0, job.job.pid)
    on_card(service_node, 3, 1, unseen)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app, 2)
        await pilot.press("k")
        await until_pilot(pilot, lambda: app.heard("Nothing to evict on card 0"), "the refusal for card 0")
        assert app.heard(
            f"pid {job.job.pid} is part of platform job mine on card 0; end the job with: tpnode-tui stop mine"
        )
        await select(pilot, app, 3)
        await pilot.press("k")
        await until_pilot(pilot, lambda: app.heard("Nothing to evict on card 3"), "the refusal for card 3")
        assert app.heard("pid 1 is the system's init process; it is never evicted")
        assert app.heard(f"pid {unseen} cannot be looked at from this machine")
        assert not isinstance(app.screen, ConfirmScreen), "nothing to confirm"
        assert psutil.Process(job.job.pid).is_running()


def test_each_process_is_marked_whose_it_is_and_a_container_is_named_by_name_and_image():
    squatter = HolderInfo(
        pid=4242,
        used_memory_mib=30720,
        visible=True,
        user="bob",
        uid=1002,
        command="python nb.py",
        container="f" * 64,
        container_name="bob-notebook",
        container_image="jupyter/base:2024",
        belongs=INTRUDER,
    )
    text = holder_text(squatter).plain
    assert text.startswith("intruder") and "in container bob-notebook (jupyter/base:2024)" in text, text
    assert holder_text(replace(squatter, belongs=HOLDER)).plain.startswith("holder")
    unseen = HolderInfo(pid=3999999, used_memory_mib=1024, visible=False, belongs=UNKNOWN)
    assert holder_text(unseen).plain.startswith("unknown") and "cannot see" in holder_text(unseen).plain


# -- who is offered what ------------------------------------------------------------------


async def test_someone_who_is_not_an_operator_is_offered_no_drain_undrain_or_evict(service_node):
    await service_node.local.drain(1, "fan failing")
    on_card(service_node, 2, 1)
    app = Dashboard(LocalNode(service_node.local.service, BOB), default_command=("sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app, 2)
        for index in (0, 1, 2):
            await select(pilot, app, index)
            for action in ("drain", "undrain", "evict"):
                assert app.main.check_action(action, ()) is False, (index, action)
            assert not footer_actions(app) & {"drain", "undrain", "evict"}
            await pilot.press("d", "u", "k")
            assert app.screen is app.screen_stack[0], "a dialog opened for someone who may not"
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert not titles & {"Drain the selected card", "Undrain the selected card", "Evict from the selected card"}

        await select(pilot, app, 0)
        for action in (app.main.action_drain, app.main.action_undrain, app.main.action_evict):
            action()  # as if offered anyway (a palette entry kept from before): no question is asked
            await pilot.pause()
            assert app.screen is app.screen_stack[0], action.__name__
        assert app.heard("bob may not drain a card: only an operator (")
        assert app.heard("bob may not evict processes: only an operator (")
        assert app.heard("bob may not undrain card 1: only an operator ("), "the key pressed on card 1, drained"
        # and the node refuses by itself, in its words, whatever a client offers
        with pytest.raises(NotAllowed, match="bob may not drain card 0: only an operator"):
            await app.node.drain(0, "mine now")
        assert states(app)[0] == "free"


# -- the node's log -------------------------------------------------------------------------


def pane_text(app: Dashboard) -> str:
    """What the events pane was given to show, as plain text at its width."""
    shown = app.query_one("#events-text")
    console = Console(width=shown.size.width or 100, color_system=None, file=open("/dev/null", "w"))
    with console.capture() as capture:
        console.print(shown.content)
    return capture.get()


async def test_the_events_pane_follows_the_log_newest_first_and_keeps_to_the_selected_card(service_node):
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await service_node.local.drain(3, "first")
        await pilot.press("e")
        pane = app.query_one(EventsPane)
        assert pane.display and not app.query_one("#jobs").display, "the log takes the jobs table's place"
        await until_pilot(pilot, lambda: "card 3 drained by root: first" in pane_text(app), "the hour so far")

        await service_node.local.drain(1, "second \x1b[2J [/] [@click=quit]")  # another account's words, escaped
        await until_pilot(pilot, lambda: "second" in pane_text(app), "a new entry as it is written")
        text = pane_text(app)
        assert text.index("second") < text.index("first"), "newest first"
        assert "\\x1b[2J [/] [@click=quit]" in text and "\x1b" not in text

        await select(pilot, app, 3)
        await pilot.press("f")
        await until_pilot(
            pilot,
            lambda: app.node_log.card == 3 and "first" in pane_text(app) and "second" not in pane_text(app),
            "card 3's entries only",
        )
        assert "card 3 only" in str(pane.border_title)
        await select(pilot, app, 1)  # kept to one card: the selected one
        await until_pilot(pilot, lambda: "second" in pane_text(app) and "first" not in pane_text(app), "card 1's")
        await pilot.press("f")
        await until_pilot(pilot, lambda: "first" in pane_text(app) and "second" in pane_text(app), "every card again")

        rounds = EVENTS_KEPT // 2 + 5  # a busy log (two entries a round): the pane keeps the newest only
        for n in range(rounds):
            await service_node.local.undrain(3)
            await service_node.local.drain(3, f"again {n}")
        await until_pilot(pilot, lambda: f"again {rounds - 1}" in pane_text(app), "the newest entry")
        assert len(app.node_log.entries) == EVENTS_KEPT

        await pilot.press("e")
        assert not pane.display and app.query_one("#jobs").display
        assert len(app.node_log.entries) == 0, "nothing is kept while the pane is closed"


# -- history --------------------------------------------------------------------------------


def drawn(values: list, top: float, width: int) -> str:
    """What Textual's Sparkline draws for ``values`` on the 0..top scale."""
    renderable = SparklineRenderable(padded(values, top), width=width, summary_function=summary)
    console = Console(width=width, color_system=None, file=open("/dev/null", "w"))
    with console.capture() as capture:
        console.print(renderable, end="")
    return capture.get()


def test_an_idle_card_s_sparkline_stays_low_and_a_busy_one_s_high_on_a_fixed_scale():
    """Scaled to the data's own range, 1-3 % would fill the line as 10-100 % does."""
    assert set(drawn([1.0, 2.0, 3.0, 2.0], 100.0, 4)) == {BARS[0]}
    assert drawn([100.0, 95.0, 100.0, 98.0], 100.0, 4) == (BARS[7] + BARS[6]) * 2
    assert drawn([None, 50.0, None, 100.0], 100.0, 4) == f" {BARS[3]} {BARS[-1]}", "a gap is blank"
    assert drawn([70000.0, 140000.0], 140000.0, 2) == BARS[3] + BARS[-1], "memory against the card's total"


def test_a_column_too_few_for_both_bounds_plots_nothing_rather_than_a_full_bar():
    """Scaled to its own range, a single 1 % would draw as a full bar."""
    assert padded([1.0], 100.0) == [] and padded([], 100.0) == []
    assert drawn([1.0, 1.0], 100.0, 2) == BARS[0] * 2


def test_columns_are_slices_of_time_and_a_silence_is_a_gap():
    now = 1000.0
    samples = [Sample(now - 100 + t, 0.0, 50.0, None, None, None) for t in range(0, 40)]  # then silence
    samples += [Sample(now - 10 + t, 0.0, 90.0, None, None, None) for t in range(0, 10)]
    cols = columns(samples, "utilization_pct", 10, now, 100.0)
    assert cols[:7] == [50.0] * 7, "a sample stands for up to 30 s after it"
    assert cols[7:9] == [None, None], "then nothing was read: a gap"
    assert cols[9] == 90.0


def test_a_fetched_hour_is_kept_as_a_fixed_number_of_slices_and_drawn_at_any_width():
    now = 10_000.0
    hour = [Sample(now - 3600 + 10 * n, 10.0, 20.0, 1000.0, None, None) for n in range(330)]
    hour += [Sample(now - 300 + 0.2 * n, 0.0, 80.0, 2000.0, None, None) for n in range(1500)]  # 0.2 s polls
    recent = Recent.of(hour, now)
    assert len(recent.utilization_pct) == len(recent.memory_used_mib) == SLICES, "however many samples"
    assert recent.span == 3600.0
    assert squeeze(recent.utilization_pct, 12) == [20.0] * 11 + [80.0]
    assert squeeze([1.0, None, 3.0, None], 2) == [1.0, 3.0] and squeeze([None, None], 1) == [None]


async def test_history_is_fetched_when_the_selection_changes_not_every_poll(service_node, monkeypatch):
    asked: list[object] = []
    history = service_node.local.history

    async def counted(card=None):
        asked.append(card)
        return await history(card)

    monkeypatch.setattr(service_node.local, "history", counted)
    service_node.edit(1, utilization_pct=90)
    app = service_node.app()
    async with app.run_test(size=SIZE) as pilot:
        await polled(pilot, app)
        await until_pilot(pilot, lambda: app.history.fetches >= 1, "the first fetch")
        assert asked[0] is None, "the tiles' lines: every card, once"
        await polled(pilot, app, 8)
        assert len(asked) <= 2, f"fetched {len(asked)} times in 9 polls: {asked}"
        await select(pilot, app, 1)
        await until_pilot(pilot, lambda: 1 in asked, "card 1's history when it is selected")
        await until_pilot(
            pilot,
            lambda: app.query_one("#spark-utilization_pct", FixedSparkline).values[-1] == 90.0,
            "card 1's utilisation on its line",
        )
        assert "0-100 %" in str(app.query_one("#spark-utilization_pct-caption").render())
        assert any(bar in tile_text(app, 1) for bar in BARS), tile_text(app, 1)
