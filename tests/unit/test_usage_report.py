"""The usage report apart from the ledger's file: its span's words, who sees which rows, its JSON and its text.

:func:`~tpnode_tui.state.usage.build_report` is a pure function of the holds
read from the ledger, so its rules are shown here on holds written by hand;
tests/test_usage_ledger.py shows the same report made from readings.
"""

from __future__ import annotations

import json
import time

import pytest

from helpers.callers import ALICE, BOB, ROOT
from tpnode_tui.config.values import parse_when, usage_span
from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.jobs import SliceRef
from tpnode_tui.model.usage import UsageFigures, UsageReport, UsageRow
from tpnode_tui.port.usage import usage_from_json, usage_to_json
from tpnode_tui.port.wire.reader import WireError
from tpnode_tui.state.usage import HoldUsage, UnitUsage, build_report, within
from tpnode_tui.text.usage import usage_lines

NOW = 1_780_000_200.0
H = 3600.0


def local(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%d %H:%M"))


# ── --since and --until ───────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("7d", NOW - 7 * 86400),
        ("12h", NOW - 12 * H),
        ("1h30m", NOW - 1.5 * H),
        (" 90m ", NOW - 1.5 * H),
        ("2026-12-01", local("2026-12-01 00:00")),  # local midnight
        ("2026-12-01 14:00", local("2026-12-01 14:00")),
        ("2026-12-01T14:00", local("2026-12-01 14:00")),
    ],
)
def test_since_and_until_take_a_duration_ago_or_a_local_date(text, want):
    assert parse_when(text, NOW) == want


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("yesterday", "neither a date such as 2026-12-01"),
        ("2026-13-01", "neither a date"),
        ("7 days", "neither a date"),
        ("", "neither a date"),
        ("400d", "at most a year"),  # settings' own words for a duration out of range
        ("7dd", "not understood"),
        ("3600", "3600 has no unit: 3600m or 3600s?"),  # as every duration typed on the command line
    ],
)
def test_a_time_that_is_not_one_is_refused_in_one_line(text, says):
    with pytest.raises(BadRequest, match=says) as refused:
        parse_when(text, NOW)
    assert "\n" not in str(refused.value)


def test_the_span_is_the_last_week_by_default_and_must_run_forwards():
    assert usage_span(None, None, NOW) == (NOW - 7 * 86400, NOW)
    assert usage_span("1d", None, NOW) == (NOW - 86400, NOW)
    assert usage_span(None, "1d", NOW) == (NOW - 8 * 86400, NOW - 86400)
    with pytest.raises(BadRequest, match="is not before --until"):
        usage_span("1d", "2d", NOW)


# ── the report's rules ────────────────────────────────────────────────────


def hold(run_id, caller, cards=(), start=NOW - 10 * H, end=None, kind="job", units=(), slices=()):
    return HoldUsage(
        run_id=run_id,
        kind=kind,
        user=caller.user,
        uid=caller.uid,
        cards=tuple(cards),
        slices=tuple(slices),
        started=start,
        ended=end,
        units=tuple(units),
    )


def unit(card, seconds=0.0, used=0.0, idle=0.0, peak=None, piece=""):
    return UnitUsage(card, piece, seconds, used, idle, peak)


HOLDS = [
    hold(
        "a", ALICE, [0, 1], NOW - 10 * H, NOW - 6 * H, units=[unit(0, 4 * H, 2 * H, 0, 100), unit(1, 4 * H, H, H, 200)]
    ),
    hold("b", BOB, [2], NOW - 8 * H, None, kind="reservation", units=[unit(2, 8 * H, 0, 8 * H, 0)]),
    hold("c", ALICE, [2], NOW - 20 * H, NOW - 9 * H, units=[unit(2, H, H, 0, 300)]),
]


def test_held_time_is_cut_to_the_span_and_an_open_hold_runs_to_now():
    report = build_report(HOLDS, NOW - 10 * H, NOW + 5 * H, "user", ROOT, NOW, 90)
    got = {r.user: r.figures for r in report.rows}
    # a: its 4 hours on 2 cards; c: its last hour; b: from its start to now, not to the span's end
    assert got["alice"].held_card_hours == 2 * 4 + 1
    assert got["bob"].held_card_hours == 8
    # used and idle are what its minutes inside the span said (read_usage cuts those)
    assert (got["alice"].used_card_hours, got["alice"].idle_card_hours) == (4, 1)
    assert got["alice"].peak_memory_mib == 300 and got["bob"].peak_memory_mib == 0
    assert (got["alice"].jobs, got["alice"].reservations, got["bob"].jobs, got["bob"].reservations) == (2, 0, 0, 1)
    assert report.total == UsageFigures(
        held_card_hours=17,
        used_card_hours=4,
        idle_card_hours=9,
        peak_memory_mib=300,
        jobs=2,
        reservations=1,
    )


def test_rows_are_the_callers_own_unless_an_operator_asks():
    for by in ("user", "card", "job"):
        everyone = build_report(HOLDS, NOW - 24 * H, NOW, by, ROOT, NOW, 90)
        own = build_report(HOLDS, NOW - 24 * H, NOW, by, BOB, NOW, 90)
        assert everyone.everyone and not own.everyone
        assert own.total == everyone.total  # the node's total, whoever asks
        assert len(own.rows) == 1
        if by != "card":  # everyone's row of card 2 is alice's use of it and bob's together
            assert own.rows[0] in everyone.rows
    by_card = build_report(HOLDS, NOW - 24 * H, NOW, "card", ALICE, NOW, 90)
    # alice's own use of card 2 only, not bob's reservation of it
    assert {r.card: r.figures.held_card_hours for r in by_card.rows} == {0: 4, 1: 4, 2: 11}


def test_a_hold_with_no_uid_is_its_owners_by_name():
    nameless = HoldUsage("n", "job", "bob", None, (3,), (), NOW - H, None)
    assert [r.run_id for r in build_report([nameless], NOW - 2 * H, NOW, "job", BOB, NOW, 90).rows] == ["n"]
    assert build_report([nameless], NOW - 2 * H, NOW, "job", ALICE, NOW, 90).rows == ()


def test_slices_are_counted_apart_from_cards():
    ref = SliceRef(1, "MIG-x", "1g.18gb")
    sliced = hold("s", ALICE, slices=[ref], start=NOW - 2 * H, units=[unit(1, 2 * H, 0, H, 5000, piece="MIG-x")])
    report = build_report([sliced], NOW - 4 * H, NOW, "card", ROOT, NOW, 90)
    [row] = report.rows
    assert (row.card, row.figures.held_card_hours, row.figures.held_slice_hours) == (1, 0, 2)
    assert row.figures.idle_slice_hours == 1 and row.figures.used_card_hours == 0


def test_an_unknown_grouping_is_refused():
    with pytest.raises(BadRequest, match="--by 'account' is not one of user, card, job"):
        build_report([], NOW - H, NOW, "account", ROOT, NOW, 90)


# ── JSON ──────────────────────────────────────────────────────────────────


def test_json_has_the_issues_shape_and_reads_back():
    ref = SliceRef(1, "MIG-x", "1g.18gb")
    holds = [*HOLDS, hold("s", BOB, slices=[ref], start=NOW - 2 * H, units=[unit(1, 2 * H, 0, 0, 7, piece="MIG-x")])]
    for by, names in (
        ("user", {"user", "uid"}),
        ("card", {"card"}),
        ("job", {"run_id", "kind", "user", "uid", "cards", "slices", "start", "end"}),
    ):
        report = build_report(holds, NOW - 24 * H, NOW, by, ROOT, NOW, 90)
        doc = json.loads(json.dumps(usage_to_json(report)))
        assert set(doc) == {"since", "until", "by", "everyone", "kept_days", "rows", "total"}
        figures = {
            "held_card_hours",
            "used_card_hours",
            "idle_card_hours",
            "held_slice_hours",
            "idle_slice_hours",
            "peak_memory_mib",
            "intruded_card_hours",
            "intruder_peak_memory_mib",
            "jobs",
            "reservations",
        }
        assert all(set(row) == names | figures for row in doc["rows"])
        assert set(doc["total"]) == figures
        assert usage_from_json(doc) == report
    jobs = usage_to_json(build_report(holds, NOW - 24 * H, NOW, "job", ROOT, NOW, 90))
    assert jobs["rows"][-1]["slices"] == [{"card": 1, "uuid": "MIG-x", "profile": "1g.18gb"}]


def test_an_answer_holds_at_most_a_page_of_rows_the_latest_jobs_and_says_how_many_were_left_out():
    many = [hold(f"j{n}", ALICE, [n % 4], NOW - (100 - n) * H, NOW - (99.5 - n) * H) for n in range(100)]
    whole = build_report(many, NOW - 200 * H, NOW, "job", ALICE, NOW, 90)
    cut = within(whole, 30)
    assert [r.run_id for r in cut.rows] == [f"j{n}" for n in range(70, 100)] and cut.left_out == 70
    assert cut.total == whole.total and cut.total.jobs == 100  # the total counts every row
    doc = json.loads(json.dumps(usage_to_json(cut)))
    assert doc["left_out"] == 70 and usage_from_json(doc) == cut
    assert "left_out" not in usage_to_json(whole)  # the plain shape, where nothing was left out
    assert within(whole, 100) is whole
    lines = usage_lines(cut)
    assert "70 earlier jobs and reservations of this span are left out (the total counts them)" in lines[-2]
    # by account: the accounts that held most are kept
    accounts = within(build_report(HOLDS, NOW - 24 * H, NOW, "user", ROOT, NOW, 90), 1)
    assert [r.user for r in accounts.rows] == ["alice"] and accounts.left_out == 1


def test_json_that_is_not_a_report_is_refused_by_name():
    doc = usage_to_json(build_report(HOLDS, NOW - 24 * H, NOW, "user", ROOT, NOW, 90))
    with pytest.raises(WireError, match=r"usage.rows\[0\] has unknown fields \['card'\]"):
        usage_from_json({**doc, "rows": [{**doc["rows"][0], "card": 3}]})
    with pytest.raises(WireError, match="usage.total has no 'jobs'"):
        usage_from_json({**doc, "total": {k: v for k, v in doc["total"].items() if k != "jobs"}})
    with pytest.raises(WireError, match="usage.by is"):
        usage_from_json({**doc, "by": "account"})


# ── text ──────────────────────────────────────────────────────────────────


def test_the_text_says_the_span_and_lays_out_every_row_and_the_total():
    report = build_report(HOLDS, NOW - 24 * H, NOW, "user", ALICE, NOW, 90)
    lines = usage_lines(report)
    since = time.strftime("%Y-%m-%d %H:%M", time.localtime(NOW - 24 * H))
    assert lines[0].startswith(f"usage of this node's cards from {since} to ") and lines[0].endswith("by account")
    assert lines[1] == "your own rows, and the whole node's total (an operator sees every account's)"
    assert lines[2].split() == ["USER", "UID", "HELD", "USED", "IDLE", "PEAK", "MEMORY", "JOBS", "RESERVATIONS"]
    assert lines[3].split() == ["alice", "5001", "19.00", "4.00", "1.00", "300", "MiB", "2", "0"]
    assert lines[4].split() == ["total", "27.00", "4.00", "9.00", "300", "MiB", "2", "1"]
    assert lines[-1].startswith("in card-hours. used: held time weighted by utilisation while the holder was")
    # numbers are right-aligned under their heading
    assert lines[2].index("HELD") + len("HELD") == lines[3].index("19.00") + len("19.00")


def test_the_text_shows_an_intruder_s_use_apart_from_the_holder_s_and_only_where_there_was_one():
    squatted = UnitUsage(2, "", 8 * H, 0, 8 * H, 0, intruded_s=6 * H, intruder_peak_mib=30_000)
    holds = [*HOLDS[:1], hold("b", BOB, [2], NOW - 8 * H, None, kind="reservation", units=[squatted])]
    lines = usage_lines(build_report(holds, NOW - 24 * H, NOW, "user", ROOT, NOW, 90))
    assert "PEAK MEMORY  INTRUDED  INTRUDERS' PEAK  JOBS" in lines[1], lines[1]
    bob = next(line.split() for line in lines if line.startswith("bob"))
    assert bob[2:] == ["8.00", "0.00", "8.00", "0", "MiB", "6.00", "29.3", "GiB", "0", "1"], bob
    alice = next(line.split() for line in lines if line.startswith("alice"))
    assert alice[-4:] == ["0.00", "-", "1", "0"], alice
    assert "intruded: held time with someone else's process on the card" in lines[-1]
    assert "INTRUDED" not in "\n".join(usage_lines(build_report(HOLDS, NOW - 24 * H, NOW, "user", ROOT, NOW, 90)))


def test_the_text_of_slices_jobs_and_an_empty_span():
    ref = SliceRef(1, "MIG-x", "1g.18gb")
    sliced = hold("s", BOB, slices=[ref], start=NOW - 2 * H, units=[unit(1, 2 * H, 0, H, 7, piece="MIG-x")])
    lines = usage_lines(build_report([sliced, *HOLDS], NOW - 24 * H, NOW, "job", ROOT, NOW, 90))
    assert "SLICES HELD" in lines[1] and "SLICES IDLE" in lines[1] and "JOBS" not in lines[1]
    assert any(line.split()[:4] == ["s", "job", "bob", "1:1g.18gb"] and "still held" in line for line in lines)
    assert "(MIG slices: slice-hours)" in lines[-1]
    empty = usage_lines(build_report([], NOW - H, NOW, "card", BOB, NOW, 90))
    assert "nothing of yours was held in this span" in empty


def test_the_text_escapes_names_that_the_json_keeps():
    evil = "evil\x1b[2J\u202e\ud800"
    report = UsageReport(
        since=NOW - H,
        until=NOW,
        by="job",
        rows=(
            UsageRow(
                UsageFigures(held_card_hours=1),
                user=evil,
                uid=9,
                run_id=f"run-{evil}",
                kind="job",
                cards=(0,),
                start=NOW - H,
            ),
        ),
        total=UsageFigures(held_card_hours=1),
        everyone=True,
        kept_days=90,
    )
    text = "\n".join(usage_lines(report))
    assert "\x1b" not in text and "\u202e" not in text and "\ud800" not in text
    assert "run-evil\\x1b[2J\\u202e\\ud800" in text
    assert usage_to_json(report)["rows"][0]["run_id"] == f"run-{evil}"
