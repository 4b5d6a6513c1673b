"""The pure model: occupancy arithmetic, its plain-words explanation, and the pick."""

import pytest

from tpnode_tui import GpuOccupancy, NoCapacity, pick_gpus
from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.facts import CardFacts, ProcessFacts, SliceFacts
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.validation import check_run_id


def test_busy_is_the_union_of_jobs_external_and_unhealthy():
    occ = GpuOccupancy(total=8, by_job={0: "a", 1: "a"}, external=frozenset({3}), unhealthy={5: "ecc"})
    assert occ.busy == {0, 1, 3, 5}
    assert occ.free == [2, 4, 6, 7]


def test_explain_names_every_kind_of_holder_in_plain_words():
    occ = GpuOccupancy(
        total=8, by_job={0: "a", 1: "b"}, external=frozenset({3, 4}), unhealthy={6: "row remapping pending"}
    )
    text = occ.explain()
    assert text.startswith("8 cards total, 3 free")
    assert "2 held by platform jobs" in text
    assert "2 held by processes outside the platform (cards 3,4)" in text
    assert "1 unhealthy (card 6: row remapping pending)" in text
    assert "free count may be too high" not in text
    one = GpuOccupancy(total=8, external=frozenset({5})).explain()
    assert "1 held by processes outside the platform (card 5)" in one, one


def test_explain_counts_reservations_as_reservations_not_as_platform_jobs():
    occ = GpuOccupancy(total=8, by_job={0: "train", 2: "rsv-a", 3: "rsv-b"}, reserved=frozenset({2, 3}))
    assert occ.explain() == "8 cards total, 5 free; 1 held by a platform job; 2 held by reservations"
    alone = GpuOccupancy(total=8, by_job={3: "rsv-alice"}, reserved=frozenset({3})).explain()
    assert alone == "8 cards total, 7 free; 1 held by a reservation", alone


def test_explain_says_the_free_count_may_be_too_high_when_blind():
    occ = GpuOccupancy(total=4, external_probe_ok=False)
    assert occ.free == [0, 1, 2, 3]
    assert "cannot probe use from outside the platform, so the free count may be too high" in occ.explain()


def test_pick_prefers_a_consecutive_window():
    assert pick_gpus([0, 3, 4, 5, 7], 3) == [3, 4, 5]
    assert pick_gpus([7, 1, 2], 2) == [1, 2]


def test_pick_falls_back_to_order_when_no_window_exists():
    assert pick_gpus([0, 3, 5, 7], 3) == [0, 3, 5]


def test_pick_raises_no_capacity_when_short_and_nothing_for_zero():
    with pytest.raises(NoCapacity, match="need 3, available 2"):
        pick_gpus([1, 2], 3)
    assert pick_gpus([1, 2], 0) == []


def test_in_use_by_process_or_by_memory():
    assert CardFacts(0, memory_used_mib=1, processes=(ProcessFacts(10),)).in_use(512)
    assert CardFacts(0, memory_used_mib=30000, processes=()).in_use(512)
    assert CardFacts(0, memory_used_mib=512, processes=None).in_use(512)
    assert not CardFacts(0, memory_used_mib=511, processes=()).in_use(512)
    assert not CardFacts(0, memory_used_mib=None, processes=None).in_use(512)


def test_a_mig_card_is_in_use_when_any_slice_is_by_either_signal():
    idle = SliceFacts(0, memory_used_mib=13, processes=())
    working = SliceFacts(1, memory_used_mib=13, processes=(ProcessFacts(4242),))
    filled = SliceFacts(2, memory_used_mib=9013, processes=())
    unread = SliceFacts(3, processes=None)
    # the card's own list could not be read (NVML answers it only to root in MIG mode)
    card = CardFacts(0, memory_used_mib=100, processes=None, mig_mode=True, slices=(idle, working))
    assert card.in_use(512)
    assert CardFacts(0, memory_used_mib=None, processes=(), mig_mode=True, slices=(idle, filled)).in_use(512)
    assert not CardFacts(0, memory_used_mib=100, processes=(), mig_mode=True, slices=(idle, unread)).in_use(512)
    # the card's memory used counts what MIG itself sets aside, and still counts
    assert CardFacts(0, memory_used_mib=912, processes=(), mig_mode=True, slices=(idle,)).in_use(512)
    assert (working.in_use(512), filled.in_use(512), idle.in_use(512), unread.in_use(512)) == (True, True, False, False)


@pytest.mark.parametrize("bad", ["", " ", "a b", "x;rm", "$(id)", "-lead", "a" * 64, "é", "a\nb", "../x"])
def test_run_ids_outside_the_documented_pattern_are_refused(bad):
    with pytest.raises(BadRequest, match="is not valid"):
        check_run_id(bad)


def test_valid_run_ids_pass():
    for good in ("a", "run-1130-101010-ab12", "exp_3.1", "A" * 63):
        assert check_run_id(good) == good


def test_a_job_is_asked_for_by_its_run_id_or_else_its_name():
    labelled = JobState(name="tpn-train", run_id="train", gpus=(0,), status="running")
    by_hand = JobState(name="someones-container", run_id="", gpus=(1,), status="running")
    assert (labelled.key, by_hand.key) == ("train", "someones-container")


def test_what_a_job_holds_is_said_in_a_few_words():
    from tpnode_tui.model.jobs import SliceRef, holding_words

    mig = SliceRef(1, "MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9", "1g.18gb")
    assert holding_words((0, 1)) == "cards 0,1" and holding_words(()) == "no cards"
    assert holding_words((), (mig,)) == "slice 1g.18gb of card 1"
    assert holding_words((0,), (mig,)) == "card 0 and slice 1g.18gb of card 1"
    assert holding_words((), (SliceRef(2, "MIG-abc"),)) == "slice MIG-abc of card 2"


def test_two_jobs_overlap_on_a_card_a_slice_or_a_slice_of_a_card_the_other_holds_whole():
    from tpnode_tui.model.jobs import JobState, SliceRef, claims_overlap

    def job(gpus=(), *slices):
        return JobState(name="x", run_id="x", gpus=tuple(gpus), status="running", slices=slices)

    a, b = SliceRef(1, "MIG-a"), SliceRef(1, "MIG-b")
    assert claims_overlap(job([0]), job([0])) and not claims_overlap(job([0]), job([1]))
    assert claims_overlap(job((), a), job((), a)) and not claims_overlap(job((), a), job((), b))
    assert claims_overlap(job([1]), job((), b)) and claims_overlap(job((), b), job([1]))
    assert not claims_overlap(job([0]), job((), b))


@pytest.mark.parametrize("profile", ["1g.18gb", "1c.3g.71gb", "1g.5gb+me", "7g.141gb"])
def test_nvidias_profile_names_are_profiles(profile):
    from tpnode_tui.model.validation import check_profile

    assert check_profile(profile) == profile


@pytest.mark.parametrize("profile", ["", " 1g.18gb", "1g,18gb", "1g:18gb", "-1g", "x" * 41, "1g\x1b"])
def test_anything_else_is_refused_saying_what_a_profile_looks_like(profile):
    from tpnode_tui.model.errors import BadRequest
    from tpnode_tui.model.validation import check_profile

    with pytest.raises(BadRequest, match="is not a MIG profile: give a MIG profile as nvidia-smi -L names it"):
        check_profile(profile)


def test_a_card_not_handed_out_whole_for_mig_is_busy_and_explain_says_why_and_what_slices_are_free():
    from tpnode_tui.model.occupancy import SliceState

    slices = (
        SliceState(0, 0, "job", profile="1g.18gb", run_id="nb"),
        SliceState(0, 1, "free", profile="1g.18gb"),
        SliceState(0, 2, "free", profile="1g.18gb"),
        SliceState(0, 3, "free", profile="2g.35gb"),
    )
    occ = GpuOccupancy(
        total=3, mig={0: "split into 4 MIG slices: see them", 2: "its MIG mode cannot be read"}, slices=slices
    )
    assert occ.busy == {0, 2} and occ.free == [1]
    assert [s.index for s in occ.free_slices] == [1, 2, 3]
    assert occ.explain() == (
        "3 cards total, 1 free; card 0 in MIG mode: 4 slices, 3 free (1g.18gb x2, 2g.35gb); "
        "1 not handed out whole (card 2: its MIG mode cannot be read)"
    )
