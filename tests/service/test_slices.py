"""MIG slices are what a job gets on a card in MIG mode.

Each slice is in exactly one state, a free one is picked under the same lock
and checks as cards, the job is pointed at its MIG device by uuid, and a card
in MIG mode (or whose MIG mode is unknown) is never handed out whole. Against
the simulated probe (cards split as tests/captures/h200-mig's H200 is), the
real process runtime with real processes, and the real flock lock; the docker
runtime's labels and device requests are in test_runtime_docker.py, the
snapshot document's slices in tests/unit/test_wire.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import psutil
import pytest

from helpers.allocators import build_allocator
from helpers.callers import BOB, ROOT
from helpers.load import kill_process_jobs
from helpers.services import write_scene
from helpers.waiting import until_async
from tpnode_tui import GpuAllocator
from tpnode_tui.config.settings import load_settings
from tpnode_tui.core.policy import CardLimits, Policy
from tpnode_tui.host.identity import Operators
from tpnode_tui.model.errors import BadRequest, Conflict, JobNotFound, NeverFits, NoCapacity, NotAllowed
from tpnode_tui.model.jobs import JobSpec
from tpnode_tui.model.views import EXTERNAL, HOLDER, INTRUDER, Drain
from tpnode_tui.port.types.operators import EvictRequest
from tpnode_tui.probes import SimulatedProbe
from tpnode_tui.runtimes.process import ProcessRuntime
from tpnode_tui.service import NodeService
from tpnode_tui.text.render import card_summary, env_lines, slice_name, slice_summary

#: the H200's five MIG devices: profile, GPU instance, compute instance, MiB total
#: (the first two are compute instances of one 3g.71gb GPU instance)
LAYOUT = [
    ("1c.3g.71gb", 2, 0, 71424),
    ("2c.3g.71gb", 2, 1, 71424),
    ("2g.35gb", 3, 0, 33280),
    ("1g.18gb", 9, 0, 16384),
    ("1g.18gb", 10, 0, 16384),
]
IDLE_MIB = 13
#: pids that exist on no machine: processes the driver lists that this one cannot see
UNSEEN, UNSEEN_2 = 3_999_901, 3_999_902


def uuid(card: int, n: int) -> str:
    return f"MIG-{card:08x}-7c3d-5e8f-9a0b-{n:012x}"


class MigNode:
    """A simulated node whose cards in ``mig`` are split as the H200 is and the rest
    whole, with the real process runtime and lock; a test puts processes on a
    slice, or on a MIG card outside any slice, and changes the scene as it needs.
    Not a ServiceNode (conftest's make_node): the rules here are the allocator's,
    and a test races allocators of its own over one scene and state dir."""

    def __init__(self, tmp_path: Path, cards: int = 2, mig: tuple[int, ...] = (0,), **settings) -> None:
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.scene = tmp_path / "node.json"
        self.state = tmp_path / "state"
        self.cards = [self.split(i) if i in mig else {"memory_used_mib": 1, "processes": []} for i in range(cards)]
        self.blind = False
        self.write()
        self.settings = load_settings({}, state_dir=str(self.state), lock_retry_ms=10, **settings)
        self.allocator = self.make_allocator()

    def make_allocator(self, lock_dir: Optional[Path] = None, runtime=None) -> GpuAllocator:
        settings = (
            self.settings
            if lock_dir is None
            else replace(self.settings, state=replace(self.settings.state, dir=lock_dir))
        )
        return build_allocator(
            settings, runtime or ProcessRuntime(self.state, stop_timeout_s=2), SimulatedProbe(self.scene)
        )

    @staticmethod
    def split(card: int, layout=LAYOUT) -> dict:
        return {
            "mig": True,
            "memory_used_mib": 1024,
            "utilization_pct": None,
            "processes": [],
            "slices": [
                {
                    "profile": p,
                    "uuid": uuid(card, n),
                    "gpu_instance_id": gi,
                    "compute_instance_id": ci,
                    "memory_total_mib": mib,
                    "memory_used_mib": IDLE_MIB,
                    "processes": [],
                }
                for n, (p, gi, ci, mib) in enumerate(layout)
            ],
        }

    def slice(self, card: int, n: int) -> dict:
        return self.cards[card]["slices"][n]

    def put(self, card: int, n: int, pid: int, mib: int = 4096) -> None:
        """``pid`` on slice ``n`` of ``card``; the slices of its GPU instance read its memory alike."""
        target = self.slice(card, n)
        target["processes"].append({"pid": pid, "used_memory_mib": mib})
        used = IDLE_MIB + sum(p["used_memory_mib"] for p in target["processes"])
        for s in self.cards[card]["slices"]:
            if s["gpu_instance_id"] == target["gpu_instance_id"]:
                s["memory_used_mib"] = used
        self.write()

    def put_outside(self, card: int, pid: int) -> None:
        """``pid`` on ``card``, on no slice the driver could tell."""
        self.cards[card]["processes"].append({"pid": pid, "used_memory_mib": 2048})
        self.write()

    def write(self) -> None:
        write_scene(self.scene, self.cards, blind=self.blind)

    async def snapshot(self):
        return await self.allocator.snapshot()

    async def launch(
        self,
        run_id: str,
        profile: Optional[str] = "1g.18gb",
        *command: str,
        cards: int = 1,
        owner: str = "ana",
        allocator: Optional[GpuAllocator] = None,
    ):
        spec = JobSpec(run_id=run_id, cards=cards, command=command or ("sleep", "300"), owner=owner, slice=profile)
        return await (allocator or self.allocator).launch(spec)


@pytest.fixture
async def mig_node(tmp_path):
    made: list[MigNode] = []
    allocators: list[GpuAllocator] = []

    def make(**kw) -> MigNode:
        node = MigNode(tmp_path / f"n{len(made)}", **kw)
        made.append(node)
        allocators.append(node.allocator)
        return node

    make.allocators = allocators
    yield make
    for alloc in allocators:
        await alloc.close()
    for node in made:
        kill_process_jobs(node.state)


def sleeper(procs: list, *argv: str) -> int:
    proc = subprocess.Popen(list(argv or ("sleep", "300")), stdin=subprocess.DEVNULL)
    procs.append(proc)
    return proc.pid


def states(card) -> list[str]:
    return [s.state for s in card.slices]


# -- each slice in one state ------------------------------------------------------


async def test_the_h200s_slices_each_have_one_state_and_its_card_is_never_free_whole(mig_node):
    node = mig_node()
    node.put(0, 0, UNSEEN, 20480)  # as in the capture: on the 1c.3g.71gb, and on the first 1g.18gb
    node.put(0, 3, UNSEEN_2, 9000)
    snap = await node.snapshot()
    card = snap.cards[0]
    assert card.state == "mig" and card.reason == "split into 5 MIG slices: see them"
    assert states(card) == ["external", "shared", "free", "external", "free"]
    assert card.slices[1].reason == (
        f"shares GPU instance 2's memory with slice 0 (1c.3g.71gb) of card 0, in use "
        f"(pid {UNSEEN} uses it): not handed out while it is"
    )
    occ = snap.occupancy
    assert occ.free == [1] and occ.mig == {0: "split into 5 MIG slices: see them"} and 0 not in occ.external
    assert [(s.card, s.index, s.profile) for s in occ.free_slices] == [(0, 2, "2g.35gb"), (0, 4, "1g.18gb")]
    assert "; card 0 in MIG mode: 5 slices, 2 free (2g.35gb, 1g.18gb)" in snap.explain
    assert card_summary(card) == "2 of 5 MIG slices free"


async def test_a_squatter_on_a_free_slice_makes_only_that_slice_external(mig_node, spawned):
    node = mig_node()
    squatter = sleeper(spawned)
    node.put(0, 4, squatter)
    snap = await node.snapshot()
    card = snap.cards[0]
    assert card.state == "mig" and states(card) == ["free", "free", "free", "free", "external"]
    [on_slice] = card.slices[4].holders
    assert on_slice.pid == squatter and on_slice.belongs == EXTERNAL and on_slice.visible
    assert [(h.pid, h.belongs) for h in card.holders] == [(squatter, EXTERNAL)]
    assert snap.cards[1].state == "free" and snap.occupancy.external == frozenset()
    launched = await node.launch("nb")  # the other 1g.18gb is still free
    assert launched.slices[0].uuid == uuid(0, 3)


async def test_compute_instances_sharing_a_gpu_instance_are_not_offered_while_one_is_held_or_used(mig_node):
    node = mig_node()
    held = await node.launch("big", "2c.3g.71gb")
    assert [s.uuid for s in held.slices] == [uuid(0, 1)]
    snap = await node.snapshot()
    first = snap.cards[0].slices[0]
    assert first.state == "shared" and "with slice 1 (2c.3g.71gb) of card 0, held by big" in first.reason
    with pytest.raises(NoCapacity, match=r"slice 0 \(1c.3g.71gb\) of card 0 is shared: shares GPU instance 2"):
        await node.launch("small", "1c.3g.71gb")

    # Memory in use on a GPU instance with no process seen belongs to neither
    # compute instance in particular: both are in use.
    other = mig_node()
    for s in other.cards[0]["slices"][:2]:
        s["memory_used_mib"] = 30000
    other.write()
    assert states((await other.snapshot()).cards[0])[:2] == ["external", "external"]


async def test_a_compute_instance_whose_gpu_instance_cannot_be_told_is_not_offered(mig_node):
    node = mig_node()
    for s in node.cards[0]["slices"][:2]:
        del s["gpu_instance_id"]
    node.write()
    card = (await node.snapshot()).cards[0]
    assert states(card)[:3] == ["unverified", "unverified", "free"]
    assert "whose GPU instance cannot be told" in card.slices[0].reason
    with pytest.raises(NoCapacity, match="no 1c.3g.71gb MIG slice is free"):
        await node.launch("x", "1c.3g.71gb")


async def test_a_blind_probe_makes_free_slices_unverified_and_nothing_is_handed_out(mig_node):
    node = mig_node()
    held = await node.launch("before")
    node.blind = True
    node.write()
    card = (await node.snapshot()).cards[0]
    assert states(card) == ["unverified", "unverified", "unverified", "job", "unverified"]
    assert card.slices[0].reason.startswith("use from outside the platform cannot be probed")
    with pytest.raises(NoCapacity, match="no slice can be checked free.*TUNEPLANE_ALLOW_UNVERIFIED"):
        await node.launch("blind")
    assert [j.run_id for j in await node.allocator.runtime.ps()] == [held.job.run_id]

    allowing = mig_node(cards_allow_unverified=True)
    allowing.blind = True
    allowing.write()
    got = await allowing.launch("anyway")
    assert got.slices[0].uuid == uuid(0, 3)
    assert got.warning == (
        "slice 1g.18gb of card 0 handed out unverified: use from outside the platform could not be probed"
    )


async def test_a_process_the_driver_put_on_no_slice_makes_the_cards_free_slices_unverified(mig_node, spawned):
    node = mig_node()
    node.put_outside(0, UNSEEN)
    card = (await node.snapshot()).cards[0]
    assert card.state == "mig" and set(states(card)) == {"unverified"}
    assert card.slices[3].reason == (
        f"pid {UNSEEN} on card 0 is on no MIG device the driver could tell, so it may be on this one"
    )
    with pytest.raises(NoCapacity, match=f"pid {UNSEEN} on card 0 is on no MIG device"):
        await node.launch("nb")


async def test_a_slice_with_no_uuid_or_nothing_readable_is_unhealthy(mig_node):
    node = mig_node()
    node.slice(0, 3)["uuid"] = None
    node.slice(0, 4).update(memory_used_mib=None, processes=None)
    node.write()
    card = (await node.snapshot()).cards[0]
    assert states(card)[3:] == ["unhealthy", "unhealthy"]
    assert card.slices[3].reason == "the driver gave no uuid for MIG device 3, so no job can be pointed at it"
    assert card.slices[4].reason == "nothing about MIG device 4 could be read"
    with pytest.raises(NoCapacity, match="no 1g.18gb MIG slice is free"):
        await node.launch("nb")


async def test_a_drained_or_unhealthy_mig_card_gives_its_state_to_every_slice(mig_node):
    node = mig_node()
    node.allocator.drains.drain(Drain(card=0, reason="fan failing", by="ops", at=time.time()))
    snap = await node.snapshot()
    assert snap.cards[0].state == "drained" and set(states(snap.cards[0])) == {"drained"}
    assert snap.cards[0].slices[3].reason == "fan failing"
    with pytest.raises(NoCapacity, match="is drained: fan failing"):
        await node.launch("nb")

    sick = mig_node()
    sick.cards[0]["health"] = {"row_remap_pending": True}
    sick.write()
    card = (await sick.snapshot()).cards[0]
    assert card.state == "unhealthy" and set(states(card)) == {"unhealthy"}


# -- a MIG card is never handed out whole --------------------------------------------


async def test_cards_never_pick_a_mig_card(mig_node):
    node = mig_node(cards=3, mig=(1,))
    assert (await node.allocator.launch(JobSpec("a", 1, ("sleep", "300")))).gpus == (0,)
    assert (await node.allocator.launch(JobSpec("b", 1, ("sleep", "300")))).gpus == (2,)
    with pytest.raises(NoCapacity, match="need 1 card, but 3 cards total, 0 free"):
        await node.allocator.launch(JobSpec("c", 1, ("sleep", "300")))
    with pytest.raises(
        NeverFits,
        match=r"c needs 3 cards whole and this node has 2 \(card 1 is in MIG mode\): "
        r"ask for fewer cards, or ask for a slice \(launch --slice 1g.18gb\)",
    ):
        await node.allocator.launch(JobSpec("c", 3, ("sleep", "300")))


async def test_on_a_node_of_mig_cards_only_a_whole_card_never_fits_and_the_refusal_says_to_ask_for_a_slice(mig_node):
    node = mig_node(cards=1, mig=(0,))
    with pytest.raises(NeverFits) as refused:
        await node.allocator.launch(JobSpec("whole", 1, ("sleep", "300")))
    assert str(refused.value) == "card 0 is in MIG mode: ask for a slice (launch --slice 1g.18gb)"


@pytest.mark.parametrize(
    "change, says",
    [
        ({"mig": None}, "its MIG mode cannot be read"),
        ({"mig": False, "mig_pending": True}, "split into MIG slices at its next reset"),
    ],
)
async def test_a_card_whose_mig_mode_is_unknown_or_about_to_change_is_never_handed_out_whole(mig_node, change, says):
    node = mig_node(cards=1, mig=())
    node.cards[0].update(change)
    node.write()
    snap = await node.snapshot()
    assert snap.cards[0].state == "mig" and says in snap.cards[0].reason
    assert snap.occupancy.free == []
    with pytest.raises((NoCapacity, NeverFits), match=says):
        await node.allocator.launch(JobSpec("whole", 1, ("sleep", "300")))
    assert await node.allocator.runtime.ps() == []


async def test_a_card_whose_mig_mode_is_unknown_but_in_use_is_external_not_free(mig_node, spawned):
    node = mig_node(cards=1, mig=())
    node.cards[0].update(mig=None, processes=[{"pid": UNSEEN, "used_memory_mib": 4096}], memory_used_mib=4200)
    node.write()
    snap = await node.snapshot()
    assert snap.cards[0].state == "external" and snap.occupancy.free == []


# -- picking a slice ------------------------------------------------------------------


async def test_a_slice_job_gets_a_free_slice_of_its_profile_and_is_pointed_at_it_by_uuid(mig_node):
    node = mig_node()
    command = ("sh", "-c", "echo CUDA=$CUDA_VISIBLE_DEVICES NVIDIA=$NVIDIA_VISIBLE_DEVICES; exec sleep 300")
    launched = await node.launch("nb", "1g.18gb", *command)
    ref = launched.slices[0]
    assert (launched.gpus, ref.card, ref.uuid, ref.profile) == ((), 0, uuid(0, 3), "1g.18gb")
    assert launched.job.slices == launched.slices and launched.job.gpus == ()
    assert launched.holding == "slice 1g.18gb of card 0"
    log = node.state / "logs" / "nb.log"
    await until_async(lambda: log.exists() and "CUDA=" in log.read_text(), "the job's output")
    assert log.read_text().splitlines()[0] == f"CUDA={uuid(0, 3)} NVIDIA={uuid(0, 3)}"
    record = json.loads((node.state / "jobs.json").read_text())["jobs"]["nb"]
    assert (record["gpus"], record["slices"]) == ([], [{"card": 0, "uuid": uuid(0, 3), "profile": "1g.18gb"}])

    snap = await node.snapshot()
    held = snap.cards[0].slices[3]
    assert (held.state, held.run_id, held.job.key) == ("job", "nb", "nb")
    assert snap.occupancy.by_job == {} and snap.cards[1].state == "free"
    assert env_lines(snap, "nb") == [  # what the job itself was given
        f"export CUDA_VISIBLE_DEVICES={uuid(0, 3)}",
        "export CUDA_DEVICE_ORDER=PCI_BUS_ID",
        f"export NVIDIA_VISIBLE_DEVICES={uuid(0, 3)}",
    ]
    second = await node.launch("nb-2")
    assert second.slices[0].uuid == uuid(0, 4)


async def test_a_slice_goes_to_the_mig_card_with_the_fewest_free_slices(mig_node):
    node = mig_node(cards=3, mig=(0, 2))
    node.put(2, 0, UNSEEN)  # card 2 has fewer free slices: packing it keeps card 0 empty
    launched = await node.launch("nb")
    assert (launched.slices[0].card, launched.slices[0].uuid) == (2, uuid(2, 3))
    again = await node.launch("nb-2")
    assert again.slices[0].uuid == uuid(2, 4)
    third = await node.launch("nb-3")
    assert third.slices[0].uuid == uuid(0, 3)


async def test_a_profile_the_node_does_not_have_never_fits_and_the_refusal_names_those_it_has(mig_node):
    node = mig_node()
    with pytest.raises(NeverFits) as refused:
        await node.launch("big", "7g.141gb")
    assert str(refused.value) == (
        "big asks for a 7g.141gb MIG slice, and this node has none: its MIG slices are 1 of 1c.3g.71gb (card 0); "
        "2 of 1g.18gb (card 0); 1 of 2c.3g.71gb (card 0); 1 of 2g.35gb (card 0); ask for one of those, or ask an "
        "operator to make a 7g.141gb instance"
    )
    whole = mig_node(cards=2, mig=())
    with pytest.raises(NeverFits, match="no card of this node is in MIG mode: ask for whole cards"):
        await whole.launch("nb")


@pytest.mark.parametrize("profile", ["1g 18gb", "", "1g.18gb,2g.35gb", "1g:18gb", "x" * 41])
async def test_a_profile_that_is_not_one_is_a_bad_request(mig_node, profile):
    with pytest.raises(BadRequest, match="is not a MIG profile"):
        await mig_node().launch("nb", profile)


async def test_a_slice_job_gets_one_slice(mig_node):
    with pytest.raises(BadRequest, match="a job gets one MIG slice, not 2"):
        await mig_node().launch("nb", "1g.18gb", cards=2)


async def test_with_every_slice_of_a_profile_taken_a_launch_is_told_who_holds_them(mig_node, spawned):
    node = mig_node()
    await node.launch("nb", owner="bob")
    node.put(0, 4, UNSEEN)
    with pytest.raises(NoCapacity) as refused:
        await node.launch("late")
    assert str(refused.value) == (
        "no 1g.18gb MIG slice is free: slice 3 (1g.18gb) of card 0 is held by nb of bob; slice 4 (1g.18gb) of "
        f"card 0 is in use outside the platform (pid {UNSEEN} uses it)"
    )


async def test_a_repeat_of_the_same_profile_gets_the_same_slice_and_anything_else_is_a_conflict(mig_node):
    node = mig_node(cards=2)
    first = await node.launch("nb")
    again = await node.launch("nb")
    assert again.existing and again.slices == first.slices
    with pytest.raises(Conflict, match="it holds a 1g.18gb MIG slice, not a 2g.35gb one"):
        await node.launch("nb", "2g.35gb")
    with pytest.raises(Conflict, match="it holds a 1g.18gb MIG slice, not 1 card"):
        await node.launch("nb", None)
    whole = await node.allocator.launch(JobSpec("whole", 1, ("sleep", "300"), owner="ana"))
    with pytest.raises(Conflict, match="it holds card 1, not a 1g.18gb MIG slice"):
        await node.launch("whole")
    assert whole.gpus == (1,)


async def test_a_slice_reservation_holds_its_slice_until_it_ends(mig_node):
    node = mig_node()
    reserved = await node.allocator.reserve(1, 3600, owner="alice", run_id="rsv-nb", slice="1g.18gb")
    assert reserved.job.kind == "reservation" and reserved.slices[0].uuid == uuid(0, 3)
    snap = await node.snapshot()
    assert snap.cards[0].slices[3].state == "reservation"
    await node.allocator.stop("rsv-nb")  # returns once it has ended
    assert (await node.snapshot()).cards[0].slices[3].state == "free"


# -- never handed out twice ----------------------------------------------------------


class SlowToCreate(ProcessRuntime):
    """The real process runtime, a little slow to make its record: the window in
    which two allocations would both see the last slice free if nothing kept
    them apart."""

    async def create(self, spec, gpus):
        await asyncio.sleep(0.3)
        return await super().create(spec, gpus)


async def test_two_launches_racing_for_the_last_free_slice_never_both_get_it(mig_node):
    node = mig_node()
    await node.launch("first")
    racers = [node.make_allocator(runtime=SlowToCreate(node.state, stop_timeout_s=2)) for _ in range(2)]
    mig_node.allocators.extend(racers)
    outcomes = await asyncio.gather(
        node.launch("a", allocator=racers[0]), node.launch("b", allocator=racers[1]), return_exceptions=True
    )
    placed = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, NoCapacity)]
    assert len(placed) == 1 and len(refused) == 1, outcomes
    assert "no 1g.18gb MIG slice is free" in str(refused[0])
    live = [j for j in await node.allocator.runtime.ps() if j.live]
    assert sorted(s.uuid for j in live for s in j.slices) == [uuid(0, 3), uuid(0, 4)]


async def test_with_the_lock_lost_a_slice_is_still_never_handed_out_twice(mig_node, tmp_path):
    """Two allocators whose locks do not see each other (as after a lost lease)
    both pick the last free 1g.18gb slice; the later lease token withdraws before its
    command runs."""
    node = mig_node()
    await node.launch("first")
    racers = [
        node.make_allocator(lock_dir=tmp_path / f"lock-{n}", runtime=SlowToCreate(node.state, stop_timeout_s=2))
        for n in range(2)
    ]
    mig_node.allocators.extend(racers)
    marks = [tmp_path / f"ran-{n}" for n in range(2)]
    outcomes = await asyncio.gather(
        *(
            node.launch(f"r{n}", "1g.18gb", "sh", "-c", f"touch {marks[n]}; exec sleep 300", allocator=racers[n])
            for n in range(2)
        ),
        return_exceptions=True,
    )
    placed = [o for o in outcomes if not isinstance(o, BaseException)]
    backed_off = [o for o in outcomes if isinstance(o, NoCapacity)]
    assert len(placed) == 1 and len(backed_off) == 1, outcomes
    assert "its MIG slice was taken meanwhile by" in str(backed_off[0])
    assert "(slice 1g.18gb of card 0)" in str(backed_off[0])
    live = [j for j in await node.allocator.runtime.ps() if j.live]
    assert sorted(s.uuid for j in live for s in j.slices) == [uuid(0, 3), uuid(0, 4)]
    winner = placed[0].job.run_id
    await until_async(lambda: marks[int(winner[1])].exists(), "the placed job's command")
    await asyncio.sleep(0.5)
    assert not marks[1 - int(winner[1])].exists(), "the withdrawn job's command ran"


# -- a slice that is no longer there ---------------------------------------------------


async def test_a_slice_held_by_a_job_whose_uuid_vanished_is_still_held_and_said(mig_node):
    node = mig_node(cards=1)
    await node.launch("nb", owner="bob")
    gone = node.slice(0, 3)
    gone["uuid"] = "MIG-remade0-0000-5000-8000-000000000003"  # destroyed and made again under another uuid
    node.write()
    snap = await node.snapshot()
    [job] = [j for j in snap.jobs if j.key == "nb"]
    assert any(
        f"holds MIG device {uuid(0, 3)} (1g.18gb) of card 0, which the driver no longer reports" in p
        for p in job.problems
    ), job.problems
    card = snap.cards[0]
    assert card.state == "mig" and f"nb holds MIG device {uuid(0, 3)} (1g.18gb)" in card.warning
    assert states(card) == ["unverified"] * 5
    assert "no slice of card 0 is handed out until it is found again or nb ends (tpnode-tui stop nb)" in (
        card.slices[4].reason
    )
    with pytest.raises(NoCapacity, match="no slice of card 0 is handed out"):
        await node.launch("late")

    # MIG turned off under it: the card is whole now, and still the job's.
    node.cards[0] = {"memory_used_mib": 1, "processes": []}
    node.write()
    snap = await node.snapshot()
    assert snap.cards[0].state == "job" and snap.cards[0].run_id == "nb"
    assert "card 0 is not in MIG mode" in snap.cards[0].warning
    with pytest.raises(NoCapacity):
        await node.allocator.launch(JobSpec("whole", 1, ("sleep", "300")))


# -- whose a process on a slice is ------------------------------------------------------


async def test_a_process_on_a_slice_belongs_to_that_slices_holder_and_elsewhere_it_is_a_squatter(
    mig_node, accounts, spawned
):
    alice, bob = accounts.alice, accounts.bob
    node = mig_node()
    launched = await node.allocator.launch(
        JobSpec("nb", 1, ("sleep", "301"), owner=alice.name, uid=alice.uid, slice="1g.18gb")
    )
    supervisor = launched.job.pid
    worker = await until_async(
        lambda: next((c.pid for c in psutil.Process(supervisor).children(recursive=True)), None), "the job's command"
    )
    intruder = bob.spawn(["sleep", "300"], env=bob.env())
    spawned.append(intruder)
    node.put(0, 3, worker)  # its own slice
    node.put(0, 3, intruder.pid, 8192)  # bob, on alice's slice
    node.put(0, 2, worker, 1024)  # the job's process on a slice it was not given
    snap = await node.snapshot()
    card = snap.cards[0]
    own, other = card.slices[3], card.slices[2]
    assert {h.pid: h.belongs for h in own.holders} == {worker: HOLDER, intruder.pid: INTRUDER}
    assert own.intruders == (intruder.pid,) and snap.intruder_cards == (0,)
    assert own.warning == (
        f"{bob.name} (pid {intruder.pid}, sleep 300, 8.0 GiB) is using slice 3 (1g.18gb) of "
        f"card 0, held by nb of {alice.name}"
    )
    assert card.warning == own.warning
    [elsewhere] = other.holders
    assert other.state == "external" and elsewhere.belongs == EXTERNAL and elsewhere.job_elsewhere == "nb"
    # On the card's own list a process on two slices is shown as the worse of the two.
    assert {h.pid: h.belongs for h in card.holders} == {worker: EXTERNAL, intruder.pid: INTRUDER}


async def test_evict_signals_the_squatter_on_a_free_slice_and_leaves_the_slice_jobs_alone(mig_node, spawned):
    node = mig_node()
    service = NodeService(node.allocator, Policy(Operators("tpn-no-such-group")), interval=0.05, evict_grace_s=1.0)
    try:
        launched = await node.launch("nb")
        worker = await until_async(
            lambda: next((c.pid for c in psutil.Process(launched.job.pid).children()), None), "the job's command"
        )
        squatter = subprocess.Popen(["sleep", "300"])
        spawned.append(squatter)
        node.put(0, 3, worker)
        node.put(0, 4, squatter.pid)
        dry = await service.evict(ROOT, EvictRequest(0, dry_run=True))
        assert [e.pid for e in dry.processes] == [squatter.pid]
        with pytest.raises(
            Conflict,
            match=f"pid {worker} is part of platform job nb on slice 3 \\(1g.18gb\\) of "
            "card 0; end the job with: tpnode-tui stop nb",
        ):
            await service.evict(ROOT, EvictRequest(0, worker))
        done = await service.evict(ROOT, EvictRequest(0))
        assert [(e.pid, e.outcome) for e in done.processes] == [(squatter.pid, "ended")]
        assert squatter.poll() is not None and psutil.pid_exists(worker)
    finally:
        await service.close()


async def test_a_slice_counts_as_a_card_towards_a_card_limit(mig_node):
    node = mig_node()
    await node.launch("nb", owner="bob")
    jobs = await node.allocator.runtime.ps()
    policy = Policy(limits=CardLimits(default=1))
    with pytest.raises(NotAllowed, match="you hold 1 card \\(nb, a MIG slice counting as one card\\)"):
        policy.check_quota(BOB, jobs, 1)


async def test_stopping_a_slice_job_frees_its_slice(mig_node):
    node = mig_node()
    await node.launch("nb")
    await node.allocator.stop("nb")  # returns once it has ended
    assert states((await node.snapshot()).cards[0])[3] == "free"
    with pytest.raises(JobNotFound):
        await node.allocator.stop("nb")


async def test_a_slice_on_a_card_the_node_lacks_is_said_and_its_job_still_listed(mig_node, spawned):
    """A record written by hand (or by a node with more cards) naming a slice of card 9."""
    from tpnode_tui.model.jobs import SliceRef
    from tpnode_tui.runtimes.jobprocs import process_stat
    from tpnode_tui.runtimes.liveness import boot_id, pid_namespace
    from tpnode_tui.runtimes.statefile import JobRecord, StateFile

    node = mig_node()
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    spawned.append(proc)
    record = JobRecord(
        name="by-hand",
        run_id="by-hand",
        gpus=(),
        kind="job",
        owner="ana",
        command=("sleep", "300"),
        started_at=time.time(),
        expires_at=None,
        pid=proc.pid,
        pid_start_ticks=process_stat(proc.pid).ticks,
        boot_id=boot_id(),
        log="/dev/null",
        pid_ns=pid_namespace(),
        slices=(SliceRef(9, uuid(9, 0), "1g.18gb"),),
    )
    with StateFile(node.state).transaction() as jobs:
        jobs["by-hand"] = record
    snap = await node.snapshot()
    [job] = [j for j in snap.jobs if j.key == "by-hand"]
    assert job.live and any("names card 9, which this node does not have" in p for p in job.problems)
    assert states(snap.cards[0]) == ["free"] * 5


async def test_each_slice_is_named_and_summed_up_in_a_few_words_as_a_card_is(mig_node, spawned):
    node = mig_node()
    await node.launch("nb", owner="bob")
    squatter = sleeper(spawned)
    node.put(0, 0, squatter)
    node.put(0, 2, UNSEEN)
    card = (await node.snapshot()).cards[0]
    words = [(slice_name(0, v.index), v.facts.profile, v.state, slice_summary(v)) for v in card.slices]
    assert words == [
        ("0:0", "1c.3g.71gb", "external", f"pid {squatter} root sleep"),
        (
            "0:1",
            "2c.3g.71gb",
            "shared",
            f"shares GPU instance 2's memory with slice 0 (1c.3g.71gb) of card 0, in use "
            f"(pid {squatter} uses it): not handed out while it is",
        ),
        ("0:2", "2g.35gb", "external", f"pid {UNSEEN} (not visible here)"),
        ("0:3", "1g.18gb", "job", "nb (bob)"),
        ("0:4", "1g.18gb", "free", ""),
    ]
