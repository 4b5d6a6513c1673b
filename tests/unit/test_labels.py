"""Reading and writing the tuneplane.* labels: never raise, never lose a card."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.jobs import JobSpec, SliceRef
from tpnode_tui.runtimes.labels import (
    EXPIRES,
    GPUS,
    KIND,
    OWNER,
    RUN_ID,
    SLICES,
    job_labels,
    parse_expires,
    parse_gpus_label,
    parse_kind,
    parse_labels,
    parse_slices_label,
)


def test_good_labels_read_back_sorted_and_without_problems():
    assert parse_gpus_label("0,1") == ((0, 1), ())
    assert parse_gpus_label(" 3 , 1 ") == ((1, 3), ())


def test_bad_entries_are_reported_and_the_good_ones_kept():
    gpus, problems = parse_gpus_label("0,x,99,-1")
    # 99 is beyond any 8-card node, but only the allocator knows the card count:
    # a card a label names is never dropped here.
    assert gpus == (0, 99)
    assert len(problems) == 2
    assert "'x'" in problems[0] and "not a card index" in problems[0]
    assert "'-1'" in problems[1]


@pytest.mark.parametrize("text", ["", "   ", ","])
def test_a_label_that_names_no_card_says_so(text):
    gpus, problems = parse_gpus_label(text)
    assert gpus == ()
    assert problems, "an empty label must not read as a clean 'no cards'"


def test_lookalike_numbers_are_not_card_indices():
    # int() accepts all of these; a typo must not become a real card.
    gpus, problems = parse_gpus_label("+1,1_0,١,0x1,2.0")
    assert gpus == ()
    assert len(problems) == 5


def test_duplicates_and_empty_entries_are_reported():
    gpus, problems = parse_gpus_label("2,,2")
    assert gpus == (2,)
    assert any("empty entry" in p for p in problems)
    assert any("more than once" in p for p in problems)


def test_huge_labels_are_answered_briefly():
    gpus, problems = parse_gpus_label("9" * 10_000)
    assert gpus == () and len(problems) == 1
    assert len(problems[0]) < 200
    gpus, problems = parse_gpus_label("0" * 10_000 + "1")
    assert gpus == (1,) and problems == ()
    gpus, problems = parse_gpus_label("x," * 5_000 + "4")
    assert gpus == (4,)
    assert len(problems) <= 5 and "more problems" in problems[-1]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.from_regex(r"[0-9, x-]{0,40}", fullmatch=True))
def test_parser_never_raises_and_only_returns_numbers_in_the_text(text):
    gpus, problems = parse_gpus_label(text)
    assert all(isinstance(p, str) and p for p in problems)
    numbers_in_text = {int(n) for n in re.findall(r"[0-9]+", text)}
    for index in gpus:
        assert type(index) is int and index >= 0
        assert index in numbers_in_text
    assert list(gpus) == sorted(set(gpus))
    assert gpus or problems, "no cards and no problem would read as 'holds nothing'"


def test_expiry():
    assert parse_expires(None) == (None, ())
    assert parse_expires("1700000000") == (1700000000.0, ())
    assert parse_expires("1700000000.250") == (1700000000.25, ())
    for bad in ("inf", "nan", "-5", "tomorrow", "1e9"):
        value, problems = parse_expires(bad)
        assert value is None and problems and EXPIRES in problems[0]


def test_unknown_kind_reads_as_a_job_with_a_problem():
    assert parse_kind(None) == ("job", ())
    assert parse_kind("Reservation") == ("reservation", ())
    kind, problems = parse_kind("lease")
    assert kind == "job" and "'lease'" in problems[0]


def test_hand_made_labels_use_the_container_name_as_run_id():
    facts = parse_labels({GPUS: "3"}, default_run_id="squatter")
    assert (facts.run_id, facts.gpus, facts.kind, facts.problems) == ("squatter", (3,), "job", ())


def test_problems_from_every_label_are_collected():
    facts = parse_labels({GPUS: "0,x", KIND: "reservation", RUN_ID: "has space"}, default_run_id="c")
    assert facts.gpus == (0,) and facts.kind == "reservation"
    text = " | ".join(facts.problems)
    assert "'x'" in text and "run id" in text and EXPIRES in text


def test_written_labels_read_back_the_same():
    spec = JobSpec("r-1", 2, kind="reservation", owner="ann", expires_at=1700000000.5)
    labels = job_labels(spec, [4, 5])
    assert labels[GPUS] == "4,5" and labels[OWNER] == "ann"
    facts = parse_labels(labels, default_run_id="ignored")
    assert facts == type(facts)(
        run_id="r-1",
        gpus=(4, 5),
        kind="reservation",
        owner="ann",
        expires_at=1700000000.5,
        problems=(),
    )


@pytest.mark.parametrize("expires", [float("inf"), float("nan"), -1.0])
def test_an_expiry_that_could_not_be_read_back_is_refused(expires):
    with pytest.raises(BadRequest, match="unix seconds"):
        job_labels(JobSpec("r", 1, kind="reservation", expires_at=expires), [0])


def test_a_bad_run_id_is_refused_before_anything_is_written():
    with pytest.raises(BadRequest, match="run id"):
        job_labels(JobSpec("no spaces please", 1), [0])


def test_lease_token_label_round_trips_and_a_bad_one_is_a_problem():
    from tpnode_tui.model.jobs import JobSpec
    from tpnode_tui.runtimes.labels import LEASE_TOKEN, job_labels, parse_labels

    labels = job_labels(JobSpec("r1", 1, ("x",), lease_token=1732950000123456), [0])
    assert labels[LEASE_TOKEN] == "1732950000123456"
    assert parse_labels(labels, "tpn-r1").lease_token == 1732950000123456
    bad = parse_labels({**labels, LEASE_TOKEN: "soon"}, "tpn-r1")
    assert bad.lease_token is None and any("not a lease token" in p for p in bad.problems)
    assert parse_labels({"tuneplane.gpus": "0"}, "hand").lease_token is None


def test_the_lease_tokens_label_of_an_earlier_version_is_read_and_never_written():
    """Containers made before the lease token was called so carry it as tuneplane.fence."""
    from tpnode_tui.runtimes.labels import LEASE_TOKEN, OLD_LEASE_TOKEN

    assert (LEASE_TOKEN, OLD_LEASE_TOKEN) == ("tuneplane.lease_token", "tuneplane.fence")
    earlier = {"tuneplane.gpus": "0", "tuneplane.run_id": "r1", OLD_LEASE_TOKEN: "41"}
    assert parse_labels(earlier, "tpn-r1").lease_token == 41
    assert parse_labels({**earlier, LEASE_TOKEN: "42"}, "tpn-r1").lease_token == 42  # the new name first
    bad = parse_labels({**earlier, OLD_LEASE_TOKEN: "soon"}, "tpn-r1")
    assert bad.lease_token is None and bad.problems == ("tuneplane.fence: 'soon' is not a lease token",)
    written = job_labels(JobSpec("r1", 1, ("x",), lease_token=41), [0])
    assert written[LEASE_TOKEN] == "41" and OLD_LEASE_TOKEN not in written


def test_the_owners_uid_round_trips_and_a_label_that_is_not_one_is_a_problem():
    from tpnode_tui.runtimes.labels import UID

    labels = job_labels(JobSpec("r1", 1, ("x",), owner="ann", uid=1001), [0])
    assert labels[UID] == "1001"
    assert parse_labels(labels, "tpn-r1").uid == 1001
    assert UID not in job_labels(JobSpec("r1", 1, ("x",)), [0])
    for bad in ("ann", "-1", "+5", "1e3", "٣", "4294967295", "99999999999999999999"):
        facts = parse_labels({**labels, UID: bad}, "tpn-r1")
        assert facts.uid is None and any(f"{UID}:" in p and "is not a uid" in p for p in facts.problems), bad
    with pytest.raises(BadRequest, match="not a uid"):
        job_labels(JobSpec("r1", 1, ("x",), uid=-3), [0])


MIG_A = "MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9"


def test_a_slice_jobs_labels_name_its_slice_and_no_whole_card():
    spec = JobSpec("nb", 1, ("x",), slice="1g.18gb", slices=(SliceRef(1, MIG_A, "1g.18gb"),))
    labels = job_labels(spec, [])
    assert labels[GPUS] == "" and labels[SLICES] == f"1:{MIG_A}:1g.18gb"
    facts = parse_labels(labels, "tpn-nb")
    assert (facts.gpus, facts.slices, facts.problems) == ((), (SliceRef(1, MIG_A, "1g.18gb"),), ())
    assert SLICES not in job_labels(JobSpec("w", 1, ("x",)), [0])


def test_a_slice_written_by_hand_without_its_profile_reads_and_an_old_uuid_form_too():
    old = "MIG-GPU-8f0d4c2e-31b7-6a5e-92c4-7d1e0b3a5f61/9/0"
    assert parse_slices_label(f"0:{MIG_A}, 3:{old}") == ((SliceRef(0, MIG_A), SliceRef(3, old)), ())
    assert parse_slices_label(None) == parse_slices_label(" ") == ((), ())


@pytest.mark.parametrize(
    "text",
    ["0", f"x:{MIG_A}", "0:GPU-abc", "0:MIG-1:1g 18gb", "-1:MIG-1", "0:MIG-1:1g.18gb:extra", "", "0:MIG-", "0:MIG-a b"],
)
def test_a_slice_that_cannot_be_read_is_a_problem_and_the_rest_is_kept(text):
    slices, problems = parse_slices_label(f"{text},2:{MIG_A}")
    assert slices == (SliceRef(2, MIG_A),)
    assert len(problems) == 1 and SLICES in problems[0] and "is not a MIG slice" in problems[0]


def test_a_slice_listed_twice_is_a_problem():
    slices, problems = parse_slices_label(f"0:{MIG_A},1:{MIG_A}")
    assert slices == (SliceRef(0, MIG_A),) and "listed more than once" in problems[0]


@given(st.text(max_size=200))
@settings(max_examples=300)
def test_the_slices_parser_never_raises(text):
    slices, problems = parse_slices_label(text)
    assert all(isinstance(s, SliceRef) and s.uuid in text for s in slices)


def test_a_slice_that_would_not_read_back_is_never_written():
    for bad in (SliceRef(0, "GPU-not-a-mig-device"), SliceRef(-1, MIG_A), SliceRef(0, MIG_A, "1g,18gb")):
        with pytest.raises(BadRequest, match="MIG slice"):
            job_labels(JobSpec("nb", 1, ("x",), slices=(bad,)), [])
