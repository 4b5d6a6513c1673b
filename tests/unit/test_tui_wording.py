"""What tiles and the detail pane say about a card, case by case (pure rendering, no app)."""

from __future__ import annotations

import io
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from tpnode_tui.fleet.record import FleetCard, NodeRow
from tpnode_tui.model.facts import CardFacts, ProcessFacts
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.occupancy import GpuOccupancy
from tpnode_tui.model.usage import UsageFigures, UsageReport, UsageRow
from tpnode_tui.model.views import CardView, Drain, HolderInfo
from tpnode_tui.probes.health import unseen_problem
from tpnode_tui.text.badges import BADGES, SYMBOLS, symbol
from tpnode_tui.text.render import card_ranges, card_summary, cards_words, show_command, unseen_use
from tpnode_tui.tui.fleet.wording import strip
from tpnode_tui.tui.screens.dialogs.help import help_text
from tpnode_tui.tui.widgets.tiles import grid_columns
from tpnode_tui.tui.wording.card import describe_card
from tpnode_tui.tui.wording.cells import fit
from tpnode_tui.tui.wording.tiles import moves_with_time, render_line, render_tile
from tpnode_tui.tui.wording.usage import bar, parts, span_lines

NOW = 1_700_000_000.0


def facts(index=0, **kw) -> CardFacts:
    base = dict(
        name="NVIDIA H200",
        uuid=f"GPU-{index}",
        pci_bus_id="00000000:18:00.0",
        memory_total_mib=143771,
        memory_used_mib=1,
        utilization_pct=0,
        temperature_c=31,
        power_w=75.0,
    )
    base.update(kw)
    return CardFacts(index=index, **base)


def test_memory_in_use_with_no_process_at_all_is_said_the_same_way_everywhere():
    card = CardView(3, "external", facts(3, memory_used_mib=30922, processes=()))
    text = describe_card(card, NOW, mem_busy_mib=512).plain
    assert unseen_use(30922, long=True) in text
    assert "30.2 GiB of memory in use, no process seen: something this machine cannot see" in text
    assert card_summary(card) == unseen_use() == "in use, no process seen"  # the CLI's status table
    tile = render_tile(card, 24, NOW, False).plain  # the narrowest tile at 120 columns
    assert unseen_use() in tile and "30.2/140.4 GiB" in tile and "outside the platform" in tile


def test_a_holder_from_another_pid_namespace_is_listed_not_hidden():
    holder = HolderInfo(pid=3999999, used_memory_mib=30720, visible=False)
    card = CardView(5, "external", facts(5, processes=(ProcessFacts(3999999, 30720),)), holders=(holder,))
    text = describe_card(card, NOW, mem_busy_mib=512).plain
    assert "a process this machine cannot see (pid 3999999 from another PID namespace): 30.0 GiB in use" in text


def test_a_visible_holder_is_named_with_user_command_and_container():
    holder = HolderInfo(
        pid=4242, used_memory_mib=18432, visible=True, user="bob", command="python train.py", container="f" * 64
    )
    card = CardView(2, "external", facts(2, processes=(ProcessFacts(4242, 18432),)), holders=(holder,))
    text = describe_card(card, NOW, mem_busy_mib=512).plain
    assert "pid 4242 (bob) in container ffffffffffff: python train.py: 18.0 GiB in use" in text


def test_a_job_on_an_unhealthy_card_keeps_its_job_and_carries_the_warning():
    job = JobState(
        name="j",
        run_id="train-7",
        gpus=(1,),
        status="running",
        owner="ann",
        command=("python", "train.py"),
        started_at=NOW - 125,
    )
    card = CardView(1, "job", facts(1), run_id="train-7", job=job, warning="uncorrected ECC errors (2)")
    tile = render_tile(card, 25, NOW, False).plain
    assert "JOB" in tile and "train-7 (ann) ! unhealthy" in tile and "! uncorrected ECC" in tile
    text = describe_card(card, NOW, 512).plain
    assert "owner ann" in text and "python train.py" in text and "uncorrected ECC errors (2)" in text
    assert "2m05s ago" in text


def test_the_detail_pane_says_how_a_cards_last_check_ended_what_kept_it_out_and_what_was_done():
    from tpnode_tui.model.checks import FAILED, MET, NOT_MET, PASSED, CardCheck, CommandRun, Finding

    drain = Drain(4, "failed its check: PCIe link x8, below its maximum width x16", "check", NOW - 600, "check")
    failed = CardCheck(
        4,
        "GPU-4",
        "carol",
        NOW - 700,
        NOW - 600,
        "boot-a",
        FAILED,
        (
            Finding("answers", MET, "the card answers by its uuid GPU-4"),
            Finding("pcie", NOT_MET, "PCIe link x8, below its maximum width x16"),
            Finding("command", NOT_MET, "burn GPU-4 ended with exit code 3 after 1m40s; it said: page fault"),
        ),
        CommandRun("burn GPU-4", 3, 100.0, tail=("page fault",)),
        "drained",
    )
    text = describe_card(CardView(4, "drained", facts(4), drain=drain, check=failed), NOW, 512, returns=True).plain
    assert "by the node, " in text and "for a failed check; it stays out of service until a check passes" in text
    assert "check   failed at " in text and "(10m00s ago), by carol; drained" in text
    assert "pcie: PCIe link x8, below its maximum width x16" in text and "answers:" not in text
    assert "its command said: page fault" in text
    passed = CardCheck(4, "GPU-4", "carol", NOW - 70, NOW - 60, "boot-b", PASSED, (), None, "returned to service")
    text = describe_card(CardView(4, "free", facts(4), check=passed), NOW, 512).plain
    assert "passed at " in text and "by carol; returned to service" in text


def _until(drain: Drain, check=None, returns=None, boot=None) -> str:
    """The detail pane's words on a drained card, on one line."""
    view = CardView(drain.card, "drained", facts(drain.card), drain=drain, check=check)
    return " ".join(describe_card(view, NOW, 512, returns=returns, boot=boot).plain.split())


def test_the_detail_pane_says_until_when_a_card_stays_drained_as_this_node_lifts_it():
    """Only what lifts the drain on this node: an operator's drain is lifted by an operator
    only; a node's by a check only where TUNEPLANE_RETURN_AFTER_CHECK is on; one whose cure is
    a reboot only after a reboot and a check passed since (core/checkup.py stays_drained)."""
    from tpnode_tui.model.checks import PASSED, CardCheck

    operator = Drain(4, "fan failing", "ana", NOW - 60, "operator", boot="boot-a")
    text = _until(operator, returns=True)
    assert (
        "by ana, an operator, at " in text
        and "(1m00s ago); it stays out of service until an operator undrains it" in text
    )
    assert "check" not in text, "an operator's drain is never lifted by a check"

    xid = Drain(4, "XID 48: double-bit ECC error", "xid", NOW - 60, "xid", 48, boot="boot-a")
    assert "on XID 48, at " in _until(xid, returns=True)
    assert "it stays out of service until a check passes, or an operator undrains it" in _until(xid, returns=True)
    off = _until(xid, returns=False)
    assert "it stays out of service until an operator undrains it: a check that passes does not return it, as " in off
    assert "TUNEPLANE_RETURN_AFTER_CHECK is off" in off and "until a check passes" not in off
    older = _until(xid)  # an older agent does not say: the words name both, and which setting decides
    assert "until an operator undrains it, or a check passes where the node returns a checked card" in older

    lost = Drain(
        4, "XID 79: GPU has fallen off the bus; reboot the node", "xid", NOW - 60, "xid", 79, boot="boot-a", reboot=True
    )
    before = _until(lost, returns=True, boot="boot-a")
    assert (
        "it stays out of service until the node has rebooted and a check has passed since, which returns it; "
        "undrain refuses before then unless --force" in before
    )
    assert "or an operator undrains it" not in before, "undrain without --force refuses before a reboot"
    assert "has passed since, and an operator undrains it; undrain refuses" in _until(
        lost, returns=False, boot="boot-a"
    )
    assert "until the node has rebooted and a check has passed since; undrain refuses" in _until(lost, boot="boot-a")
    assert "until the node has rebooted" in _until(lost, returns=True), "this boot unknown: not said to be rebooted"

    after = _until(lost, returns=True, boot="boot-b")
    assert "the node has rebooted since; it stays out of service until a check passes, which returns it; " in after
    assert "undrain refuses before then unless --force" in after
    assert "until a check passes, and an operator undrains it; undrain" in _until(lost, returns=False, boot="boot-b")
    failed_before = CardCheck(4, "GPU-4", "ana", NOW - 50, NOW - 40, "boot-a", PASSED, (), None, "")
    assert "rebooted since; it stays out of service until a check passes" in _until(
        lost, failed_before, returns=False, boot="boot-b"
    ), "a check passed in the boot it was drained in does not count"
    passed = CardCheck(4, "GPU-4", "ana", NOW - 20, NOW - 10, "boot-b", PASSED, (), None, "")
    assert (
        "the node has rebooted and a check has passed since: it stays out of service until an operator undrains it"
        in _until(lost, passed, returns=False, boot="boot-b")
    )


def test_fields_a_driver_does_not_give_show_as_na():
    card = CardView(0, "free", CardFacts(index=0))
    tile = render_tile(card, 25, NOW, False).plain
    assert "util N/A  N/A°C  N/A W" in tile and "mem N/A" in tile
    text = describe_card(card, NOW, 512).plain
    assert "uuid N/A" in text and "PCI N/A" in text


def test_text_is_cut_to_terminal_cells_not_characters():
    assert fit("python train.py", 40) == "python train.py"
    assert fit("python train.py", 8) == "python …"
    assert fit("anything", 0) == ""
    for width in range(1, 12):
        cut = fit("训练训练训练训练", width)
        assert Text(cut).cell_len <= width and cut.endswith("…"), (width, cut)


def test_a_tile_whose_holder_has_a_wide_name_keeps_every_line_inside_it():
    holder = HolderInfo(
        pid=4242,
        used_memory_mib=30720,
        visible=True,
        user="训练用户训练用户",
        command="训练训练训练训练训练.py --epochs 3",
    )
    card = CardView(
        2, "external", facts(2, memory_used_mib=30720, processes=(ProcessFacts(4242, 30720),)), holders=(holder,)
    )
    for line in render_tile(card, 24, NOW, False).split():
        assert line.cell_len <= 24, f"{line.plain!r} is {line.cell_len} cells wide"


def test_an_idle_mark_never_wraps_the_tile_s_head_off_its_last_line():
    """A wrapped head would push the last line (here an intruder's name) out of the tile."""
    job = JobState(name="rsv-alice", run_id="rsv-alice", gpus=(1,), status="running", kind="reservation", owner="alice")
    card = CardView(
        1,
        "reservation",
        facts(1),
        run_id="rsv-alice",
        job=job,
        warning="bob (pid 4242, python train.py, 30.0 GiB) is using card 1",
    )
    for width in (24, 22, 20):  # 24: the narrowest tile the grid makes
        tile = render_tile(card, width, NOW, False, idle_since=NOW - 12 * 3600 - 5 * 60)
        lines = tile.split()
        assert all(line.cell_len <= width for line in lines), [line.plain for line in lines]
        assert len(lines) == len(render_tile(card, width, NOW, False).split()), "one head line, idle or not"
    assert "idle 12h05m" in render_tile(card, 30, NOW, False, idle_since=NOW - 12 * 3600 - 5 * 60).split()[0].plain
    assert render_tile(card, 20, NOW, False, idle_since=NOW - 12 * 3600).split()[0].plain.endswith(" idle"), (
        "short of room, the mark keeps its word and drops the time"
    )


def test_a_reservation_the_node_releases_counts_down_on_its_tile_in_the_room_there_is():
    job = JobState(name="rsv-a", run_id="rsv-a", gpus=(1,), status="running", kind="reservation", owner="alice")
    card = CardView(1, "reservation", facts(1), run_id="rsv-a", job=job)
    heads = {
        width: render_tile(card, width, NOW, False, NOW - 7200, releases_at=NOW + 725).split()[0].plain
        for width in (30, 24, 19, 14)
    }
    assert heads[30].endswith(" releases in 12m") and heads[24].endswith(" frees 12m") and heads[19].endswith(" frees")
    assert "idle" not in heads[30], "the countdown is what matters, not how long it sat"
    assert heads[14] == "1   RESERVED ", "no room: no mark, never a wrapped head"
    for width, head in heads.items():
        assert len(head) <= width
    assert render_tile(card, 30, NOW, False, releases_at=NOW - 1).split()[0].plain.endswith(" releasing")
    assert "releases" not in render_tile(card, 30, NOW, True, releases_at=NOW + 725).plain, "stale: unknown now"
    detail = describe_card(card, NOW, 512, releases_at=NOW + 725).plain
    assert "  release by the node at " in detail
    assert "(in 12m05s), left unused, unless alice uses it or extends it (+)" in detail
    assert "release" not in describe_card(card, NOW, 512).plain


def test_a_job_idle_held_is_marked_on_its_tile_and_in_its_detail_and_keeps_running():
    job = JobState(name="train", run_id="train", gpus=(2,), status="running", owner="bob")
    card = CardView(2, "job", facts(2, memory_used_mib=40_000), run_id="train", job=job)
    assert render_tile(card, 30, NOW, False, held_since=NOW - 7500).split()[0].plain == "2   JOB  idle-held 2h05m"
    assert render_tile(card, 18, NOW, False, held_since=NOW - 7500).split()[0].plain == "2   JOB  idle-held"
    detail = describe_card(card, NOW, 512, held_since=NOW - 7500).plain
    assert "  idle    idle-held: every card of it at 0 % with memory held since" in detail
    assert "(2h05m); it keeps running" in detail


def test_the_jobs_table_says_idle_held_and_the_countdown_in_the_status():
    from tpnode_tui.tui.wording.jobs import table_rows

    jobs = (
        JobState(name="train", run_id="train", gpus=(2,), status="running", owner="bob"),
        JobState(name="rsv-a", run_id="rsv-a", gpus=(1,), status="running", kind="reservation", owner="alice"),
        JobState(name="rsv-b", run_id="rsv-b", gpus=(3,), status="running", kind="reservation", owner="alice"),
    )
    rows, _ = table_rows(
        jobs, (), NOW, {"rsv-a": NOW - 7200, "rsv-b": NOW - 2700}, {"rsv-a": NOW + 725}, {"train": NOW - 3900}
    )
    status = {key: cells[2].plain for key, cells in rows.items()}
    assert status == {
        "job:train": "running, idle-held 1h05m",
        "job:rsv-a": "running, releases in 12m",
        "job:rsv-b": "running, idle 45m",
    }


def test_a_stale_tile_never_says_free():
    tile = render_tile(CardView(0, "free", facts()), 25, NOW, stale=True).plain
    assert "FREE" not in tile and "?" in tile and "unknown" in tile


def test_commands_are_shown_on_one_line_and_readable():
    assert show_command(("python", "-c", "import os\nprint(1)")) == 'python -c "import os\\nprint(1)"'
    assert show_command(("echo", "it's")) == 'echo "it\'s"'
    assert "\n" not in show_command(("sh", "-c", 'echo "a"\necho b'))


def test_grid_columns_follow_the_terminal_width():
    assert [grid_columns(w) for w in (200, 120, 80, 60, 40)] == [4, 4, 2, 2, 1]
    assert [grid_columns(w, compact=True) for w in (200, 120, 78, 60)] == [4, 3, 2, 1], "a line per card"


def test_a_card_on_one_line_says_its_state_its_holder_and_its_use_within_its_width():
    holder = HolderInfo(pid=4242, used_memory_mib=18432, visible=True, user="训练用户", command="python x.py")
    busy = facts(2, utilization_pct=97, processes=(ProcessFacts(4242, 18432),))
    for card in (CardView(2, "external", busy, holders=(holder,)), CardView(4, "free", facts(4))):
        for width in (24, 36, 60):
            line = render_line(card, width, NOW, False)
            assert line.cell_len <= width and "\n" not in line.plain, (width, line.plain)
    assert render_line(CardView(4, "free", facts(4)), 36, NOW, False).plain == "4   FREE  nothing holds it        0%"
    intruder = HolderInfo(pid=4242, used_memory_mib=18432, visible=True, user="mallory", belongs="intruder")
    rsv = JobState(name="rsv-a-long-name", run_id="rsv-a-long-name", gpus=(3,), status="running", kind="reservation")
    held = CardView(3, "reservation", busy, run_id=rsv.run_id, job=rsv, holders=(intruder,))
    assert render_line(held, 36, NOW, False).plain.startswith("3   RESERVED  ! intruder rsv-a-"), "first, never cut"
    stale = render_line(CardView(2, "external", busy, holders=(holder,)), 36, NOW, True).plain
    assert stale.startswith("2   ?  was external") and "97%" not in stale


def test_the_detail_pane_wraps_a_fact_under_its_column_and_never_splits_one():
    card = CardView(0, "free", facts(0, uuid="GPU-3f1c2b7e-9a41-4c2d-8e5f-0a1b2c3d4e5f"))
    lines = describe_card(card, NOW, 512, width=75).plain.splitlines()  # the pane's at 80 columns
    assert all(len(line) <= 75 for line in lines), lines
    at = next(n for n, line in enumerate(lines) if line.startswith("  card "))
    assert lines[at].endswith("· uuid GPU-3f1c2b7e-9a41-4c2d-8e5f-0a1b2c3d4e5f ·"), lines
    assert lines[at + 1] == " " * 10 + "PCI 00000000:18:00.0", lines
    assert describe_card(card, NOW, 512).plain.count("\n") < len(lines) - 1, "width 0 wraps nothing"


def test_each_state_has_a_mark_of_its_own_where_its_word_has_no_room():
    assert len(set(SYMBOLS.values())) == len(SYMBOLS) and set(SYMBOLS) >= set(BADGES)
    assert symbol("free") != symbol("drained") and symbol("nonsense") == "·"
    cards = tuple(FleetCard(i, state) for i, state in enumerate(("free", "drained", "job")))
    node = NodeRow(name="n", status="up", last_seen=NOW, seen_exactly=True, total=3, cards=cards)
    assert strip(node).plain == "○⊘●"


def help_words(**kwargs) -> str:
    console = Console(width=100, file=io.StringIO(), record=True)
    console.print(help_text(**kwargs))
    return " ".join(console.export_text().split())


def test_the_usage_view_shows_an_intruder_s_use_apart_and_only_where_there_was_one():
    bob = UsageFigures(held_card_hours=8, idle_card_hours=8, intruded_card_hours=6, intruder_peak_memory_mib=30_000)
    report = UsageReport(NOW - 86400, NOW, "user", (UsageRow(bob, user="bob", uid=2),), bob, True, 90)
    lines = [line.plain for line in span_lines("Last 24 hours", report, 100)]
    assert "intruded" in lines[1] and "6.00" in lines[2]
    assert lines[-1].strip() == (
        "intruded: someone else's process was on a held card for 6.00 card-hours, using up to 29.3 GiB; "
        "not counted as its holder's use"
    )
    clean = replace(report, rows=(UsageRow(UsageFigures(held_card_hours=8), user="bob", uid=2),), total=UsageFigures(8))
    assert not any("intruded" in line.plain for line in span_lines("Last 24 hours", clean, 100))


def test_the_help_says_what_happens_to_a_launch_while_cards_are_unverified():
    text = help_words(demo=True, readonly=False)
    assert "Launches wait until the probe works again (one queued with l then starts by itself)" in text
    assert "TUNEPLANE_ALLOW_UNVERIFIED=true" in text
    assert "one waiting for the allocation lock is abandoned" in text


def test_the_help_says_whether_quitting_drops_launches_by_where_the_node_is_served():
    here = help_words(demo=False, readonly=False, agent=False)
    assert (
        "its launches not started yet, queued or waiting for the lock, are dropped: it asks first, naming them"
    ) in here
    agent = help_words(demo=False, readonly=False, agent=True)
    assert (
        "The node's agent keeps the queue: queued launches start without this dashboard, so quitting does not ask"
    ) in agent
    assert "are dropped: it asks first" not in agent
    for text in (here, agent):
        assert "+ extend the selected reservation" in text
        assert "an operator may act on anyone's" in text and "the exports (env) that point CUDA" in text


# -- lists of cards ------------------------------------------------------------------


def test_card_lists_are_summarised_as_ranges():
    assert card_ranges([]) == ""
    assert card_ranges([4]) == "4"
    assert card_ranges([0, 1]) == "0,1", "two neighbours are no shorter as a range"
    assert card_ranges(range(255)) == "0-254"
    assert card_ranges([0, 1, 2, 3, 7, 9, 10, 11, 12]) == "0-3,7,9-12"
    assert card_ranges([12, 3, 1, 2, 2]) == "1-3,12", "in order, each card once"
    assert cards_words([5]) == "card 5"
    assert cards_words(range(255)) == "cards 0-254"
    assert cards_words(()) == "no cards" and cards_words(3) == "3 cards"


def expand(ranges: str) -> list[int]:
    cards: list[int] = []
    for part in filter(None, ranges.split(",")):
        first, _, last = part.partition("-")
        cards += range(int(first), int(last or first) + 1)
    return cards


@given(st.sets(st.integers(min_value=0, max_value=300)))
def test_a_card_range_names_exactly_the_cards_it_was_given(cards):
    shown = card_ranges(cards)
    assert expand(shown) == sorted(cards)
    assert len(shown) <= len(",".join(map(str, sorted(cards)))), "never longer than the plain list"


def test_the_summary_of_a_large_node_names_its_cards_as_ranges():
    occ = GpuOccupancy(
        total=256,
        by_job={255: "a"},
        external=frozenset(range(245)),
        unhealthy={i: "row remapping pending" for i in range(245, 254)} | {254: "GPU lost"},
    )
    text = occ.explain()
    assert "245 held by processes outside the platform (cards 0-244)" in text, text
    assert "10 unhealthy (cards 245-253: row remapping pending; card 254: GPU lost)" in text, text
    assert len(text) < 200, text


def test_cards_whose_use_cannot_be_read_are_named_as_ranges():
    assert "cards 0-199, so" in unseen_problem(list(range(200)))
    assert "card 3, so" in unseen_problem([3])


# ── the usage view's bars (tui/wording/usage.py) ─────────────────────────────


def usage(rows, everyone=True, total=None) -> UsageReport:
    made = tuple(UsageRow(f, user=user, uid=n) for n, (user, f) in enumerate(rows))
    if total is None:
        total = UsageFigures(
            *(sum(getattr(r.figures, k) for r in made) for k in ("held_card_hours", "used_card_hours"))
        )
    return UsageReport(NOW - 86400, NOW, "user", made, total, everyone, 90)


def test_a_bar_is_as_long_as_what_was_held_split_into_used_held_and_idle():
    # half the scale: half the room; of it, a half used, a fifth idle, the rest held
    assert parts(UsageFigures(held_card_hours=10, used_card_hours=5, idle_card_hours=2), 20, 40) == (10, 6, 4)
    assert parts(UsageFigures(held_card_hours=20, used_card_hours=20), 20, 40) == (40, 0, 0)
    assert parts(UsageFigures(held_card_hours=0.001), 100, 40) == (0, 1, 0)  # held at all: one column
    assert parts(UsageFigures(), 100, 40) == parts(UsageFigures(held_card_hours=5), 0, 40) == (0, 0, 0)
    # rounding never makes the parts longer than what was held, nor the bar than its room
    assert parts(UsageFigures(held_card_hours=1, used_card_hours=0.6, idle_card_hours=0.6), 1, 3) == (2, 0, 1)
    assert parts(UsageFigures(held_card_hours=50), 20, 10) == (0, 10, 0)
    drawn = bar(UsageFigures(held_card_hours=10, used_card_hours=5, idle_card_hours=2), 20, 40)
    assert drawn.plain == "█" * 10 + "▒" * 6 + "░" * 4 + " " * 20


@given(
    held=st.floats(0, 1e4),
    used=st.floats(0, 1),
    idle=st.floats(0, 1),
    scale=st.floats(0, 1e4),
    width=st.integers(0, 200),
)
def test_a_bar_never_runs_past_its_room_whatever_the_figures(held, used, idle, scale, width):
    figures = UsageFigures(held_card_hours=held, used_card_hours=held * used, idle_card_hours=held * idle * (1 - used))
    assert sum(parts(figures, max(scale, held), width)) <= width
    assert len(bar(figures, max(scale, held), width)) == width


def test_each_span_has_a_bar_per_account_and_the_total_in_one_line_each():
    lines = span_lines(
        "Last 24 hours",
        usage([("alice", UsageFigures(4, 1, 2, jobs=1)), ("a-very-long-account-name", UsageFigures(2, 2))]),
        100,
    )
    plain = [line.plain for line in lines]
    assert plain[0].startswith("Last 24 hours   ") and plain[1].split() == ["held", "used", "idle", "jobs", "resv."]
    assert (
        plain[2].split()[0] == "alice" and plain[3].split()[0] == "a-very-long-acc…" and plain[4].split()[0] == "total"
    )
    assert all(len(p) <= 100 and line.no_wrap for p, line in zip(plain, lines))
    assert plain[4].split()[-5:] == ["6.00", "3.00", "0.00", "0", "0"]
    # the total's bar is the longest, and each account's is in proportion to it
    drawn = [sum(p.count(mark) for mark in "█▒░") for p in plain[2:5]]
    assert drawn[2] == 100 - 2 - 16 - 2 - 39 and drawn[0] == round(drawn[2] * 4 / 6) and drawn[1] == round(drawn[2] / 3)


def test_a_span_with_nothing_of_the_caller_s_says_so_and_slices_get_a_column():
    mine = span_lines("Last 7 days", usage([], everyone=False, total=UsageFigures(held_card_hours=3)), 90)
    assert [line.plain.strip() for line in mine][2:4] == [
        "nothing of yours was held in this span",
        mine[3].plain.strip(),
    ]
    assert mine[3].plain.split()[0] == "total"
    sliced = span_lines("Last 7 days", usage([("bob", UsageFigures(held_slice_hours=2))]), 90)
    assert sliced[1].plain.split() == ["held", "used", "idle", "slices", "jobs", "resv."]
    assert "2.00" in sliced[2].plain and "█" not in sliced[2].plain  # a slice is no card: no bar


def test_a_tile_that_does_not_move_with_time_words_the_same_an_hour_later():
    """The grid words a tile again on an idle poll only when moves_with_time says its words can change."""
    job = JobState(name="j", run_id="r", gpus=(1,), status="running", owner="ann", started_at=NOW - 60)
    drain = Drain(card=4, reason="XID 79", by="xid", at=NOW - 300, source="xid", xid=79)
    still = [
        CardView(0, "free", facts(0)),
        CardView(1, "external", facts(1, memory_used_mib=30922, processes=())),
        CardView(2, "unhealthy", facts(2), reason="uncorrected ECC errors (2)"),
        CardView(3, "free", CardFacts(index=3)),
    ]
    for card in still:
        assert not moves_with_time(card)
        for stale in (False, True):
            assert render_tile(card, 26, NOW, stale) == render_tile(card, 26, NOW + 3600, stale)
    moving = [
        (CardView(1, "job", facts(1), run_id="r", job=job), {}),
        (CardView(4, "drained", facts(4), drain=drain), {}),
        (CardView(1, "reservation", facts(1), run_id="r", job=job), {"idle_since": NOW - 600}),
        (CardView(2, "job", facts(2), run_id="r", job=job), {"held_since": NOW - 600}),
    ]
    for card, marks in moving:
        assert moves_with_time(card, **marks)
        assert render_tile(card, 30, NOW, False, **marks) != render_tile(card, 30, NOW + 3600, False, **marks)
    assert moves_with_time(CardView(0, "free", facts(0)), releases_at=NOW + 60)


def test_the_dashboard_s_reclaim_question_says_how_each_ended_as_reclaim_does():
    from dataclasses import replace

    from tpnode_tui.cli.output import removed_line
    from tpnode_tui.tui.wording.questions import reclaim_question

    ended = JobState(name="n", run_id="rsv-a", gpus=(0,), status="exited", kind="reservation", exit_code=143)
    stopped = replace(ended, note="stopped")
    own = replace(ended, run_id="job-b", kind="job", exit_code=3)
    killed = replace(stopped, note="stopped; killed by SIGKILL (it ignored SIGTERM)")
    question = reclaim_question([stopped, own, killed])
    assert "  rsv-a  (reservation, exited, stopped)" in question
    assert "  job-b  (job, exited, exit code 3)" in question
    assert "  rsv-a  (reservation, exited): stopped; killed by SIGKILL (it ignored SIGTERM)" in question
    assert "143" not in question
    assert removed_line(stopped) == "removed rsv-a (reservation, stopped)"
