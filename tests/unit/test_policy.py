"""Who may do what on a shared node: the rules, each on its own.

The identities here are built by hand because the rules are pure: what the
kernel says about a real caller is tested with real accounts in
tests/system/test_agent_accounts.py.
"""

from __future__ import annotations

import grp

import pytest

from helpers.callers import ALICE, BOB, ROOT
from tpnode_tui.core.policy import CardLimits, Policy
from tpnode_tui.host.identity import Caller, Operators
from tpnode_tui.model.errors import NotAllowed
from tpnode_tui.model.jobs import JobState


def job(run_id, owner="alice", uid=5001, gpus=(3,), status="running", kind="reservation"):
    return JobState(name=run_id, run_id=run_id, gpus=gpus, status=status, kind=kind, owner=owner, uid=uid)


def policy(**limits) -> Policy:
    return Policy(operators=Operators("tpn-no-such-group"), limits=CardLimits(**limits))


def test_the_owner_and_operators_may_stop_a_job_and_nobody_else():
    p = policy()
    p.check_may(ALICE, job("rsv-7"), "stop", cards=(3,))
    p.check_may(ROOT, job("rsv-7"), "stop", cards=(3,))
    with pytest.raises(NotAllowed) as refused:
        p.check_may(BOB, job("rsv-7"), "stop", cards=(3,))
    assert str(refused.value) == (
        "card 3 is held by rsv-7 of alice; only alice or an operator may stop it; "
        "the operators here: root, as there is no group tpn-no-such-group on this node"
    )


def test_a_refusal_names_every_card_the_job_holds_in_ranges():
    held = job("rsv-alice", gpus=(0, 1, 2, 3, 7))
    with pytest.raises(NotAllowed) as refused:
        policy().check_may(BOB, held, "stop", cards=held.gpus)
    assert str(refused.value).startswith("cards 0-3,7 are held by rsv-alice of alice; only alice or an operator")
    assert "(" not in str(refused.value)


def test_ownership_is_by_uid_where_recorded_so_a_namesake_is_not_the_owner():
    impostor = Caller(uid=6000, gid=6000, user="alice")  # another account with the same name
    with pytest.raises(NotAllowed):
        policy().check_may(impostor, job("rsv-7"), "extend")
    policy().check_may(impostor, job("hand", uid=None), "extend")  # no uid: the name is all there is


def test_a_job_with_no_recorded_owner_is_for_operators_only():
    with pytest.raises(NotAllowed, match="has no recorded owner; only an operator"):
        policy().check_may(ALICE, job("hand-made", owner="", uid=None), "reclaim")


def test_naming_another_owner_is_for_operators_only():
    p = policy()
    assert p.owner_for(ALICE, "") == "alice"
    assert p.owner_for(ALICE, "alice") == "alice"
    assert p.owner_for(ROOT, "alice") == "alice"
    with pytest.raises(NotAllowed, match="only an operator .* may name another owner"):
        p.owner_for(BOB, "alice")


def test_a_quota_counts_the_callers_live_cards_and_says_what_they_hold():
    p = policy(default=2)
    jobs = [
        job("rsv-7", gpus=(1,)),
        job("train-3", gpus=(2,), kind="job"),
        job("old", gpus=(4, 5), status="exited"),
        job("bobs", owner="bob", uid=5002, gpus=(6, 7)),
    ]
    with pytest.raises(NotAllowed) as refused:
        p.check_quota(ALICE, jobs, 1)
    assert str(refused.value).startswith(
        "you hold 2 cards (rsv-7, train-3) and ask for 1 card; the limit for alice is 2 cards"
    )
    p.check_quota(BOB, jobs, 0)
    with pytest.raises(NotAllowed, match="you hold 2 cards"):
        p.check_quota(BOB, jobs, 1)
    p.check_quota(ROOT, jobs, 64)  # operators are not limited


def test_an_accounts_own_limit_wins_over_its_groups_and_the_largest_group_counts():
    limits = CardLimits(default=1, per_account={"alice": 4, "@students": 2, "@staff": 3})
    assert limits.limit_for(ALICE, ["students"]) == 4
    assert limits.limit_for(BOB, ["students", "staff"]) == 3
    assert limits.limit_for(BOB, []) == 1
    assert limits.limit_for(ROOT, []) is None
    assert CardLimits().limit_for(BOB, []) is None


def test_images_outside_the_allow_list_are_refused_with_the_list():
    p = Policy(images=("busybox:*", "nvcr.io/nvidia/*"))
    p.check_image("nvcr.io/nvidia/pytorch:24.01-py3")
    p.check_image(None)  # the process runtime runs no image
    with pytest.raises(NotAllowed, match=r"'evil:latest' is not allowed .* busybox:\*, nvcr.io/nvidia/\*"):
        p.check_image("evil:latest")
    Policy().check_image("anything:at-all")


def test_operators_are_root_and_the_members_of_the_group_and_a_missing_group_is_nobody():
    assert Operators("tpn-no-such-group").includes(0, 0, ())
    assert not Operators("tpn-no-such-group").includes(5001, 5001, ())
    root_group = grp.getgrgid(0).gr_name
    assert Operators(root_group).includes(5001, 5001, (0,))
    assert Operators(root_group).includes(5001, 0, ())
    assert not Operators(root_group).includes(5001, 5001, (5001,))


def test_cancelling_a_queued_launch_is_for_its_owner_or_an_operator():
    p = policy()
    p.check_cancel(ALICE, "t1", "alice", 5001)
    p.check_cancel(ROOT, "t1", "alice", 5001)
    with pytest.raises(NotAllowed, match="t1 was queued by alice; only alice or an operator"):
        p.check_cancel(BOB, "t1", "alice", 5001)


def test_a_request_larger_than_the_callers_limit_is_refused_as_never_able_to_run():
    p = policy(default=2)
    p.check_quota_ever(ALICE, 2)
    with pytest.raises(NotAllowed, match="alice may hold at most 2 cards and asks for 3 cards"):
        p.check_quota_ever(ALICE, 3)
    p.check_quota_ever(ROOT, 64)
