"""Each rule the allocator keeps (one lock, never a shared card, unknown is not
none, no second copy of the truth), as its own test.

The runtime and probe here are in-memory stand-ins (tests/helpers/fakes.py) so each
rule is shown with nothing else moving; the lock is the real flock lock.
The same rules run against real runtimes in tests/system/test_integration_docker.py.
"""

import asyncio
import time
from dataclasses import replace

import pytest

from helpers.fakes import MemoryRuntime, StaticProbe, idle_cards
from tpnode_tui import GpuAllocator, NeverFits, NoCapacity
from tpnode_tui.allocator.picking import device_grant
from tpnode_tui.allocator.repeats import request_differences
from tpnode_tui.config.settings import load_settings
from tpnode_tui.locks import make_lock
from tpnode_tui.model.errors import BadRequest, ConfigError, Conflict, JobNotFound
from tpnode_tui.model.facts import CardFacts, ProbeReading, ProcessFacts, SliceFacts
from tpnode_tui.model.jobs import DeviceGrant, JobSpec, JobState, SliceMinors, SliceRef


@pytest.fixture
def settings(tmp_path):
    return load_settings({}, state_dir=str(tmp_path / "state"))


def job(run_id, gpus, status="running", kind="job"):
    return JobState(name=f"tpn-{run_id}", run_id=run_id, gpus=tuple(gpus), status=status, kind=kind)


# -- probe results: unknown is not none ------------------------------------------


async def test_blind_probe_is_visible_not_free(make_allocator):
    probe = StaticProbe(
        ProbeReading("smi", (), count=None, external_probe_ok=False, problem="nvidia-smi: not found on PATH")
    )
    alloc = make_allocator(probe=probe, cards_count=4)
    occ = await alloc.occupancy()
    assert occ.external_probe_ok is False
    assert "free count may be too high" in occ.explain()
    snap = await alloc.snapshot()
    assert [c.state for c in snap.cards] == ["unverified"] * 4
    assert snap.cards[0].reason == "nvidia-smi: not found on PATH"


async def test_unverified_cards_are_not_handed_out_unless_allowed(make_allocator):
    blind = ProbeReading("smi", (), count=None, external_probe_ok=False, problem="nvidia-smi: not found on PATH")
    with pytest.raises(NoCapacity, match="until the probe works again.*TUNEPLANE_ALLOW_UNVERIFIED"):
        await make_allocator(probe=StaticProbe(blind), cards_count=4).launch(JobSpec("r", 1, ("x",)))
    got = await make_allocator(probe=StaticProbe(blind), cards_count=4, cards_allow_unverified=True).launch(
        JobSpec("r", 1, ("x",))
    )
    assert got.gpus == (0,) and "card 0 handed out unverified" in got.warning


async def test_a_probe_that_sees_no_card_under_a_configured_count_frees_nothing(make_allocator):
    empty = StaticProbe(ProbeReading("nvml", (), count=0))  # no devices passed into a container
    occ = await make_allocator(probe=empty, cards_count=4).occupancy()
    assert occ.free == [] and set(occ.unhealthy) == {0, 1, 2, 3}
    assert "not reported by the driver" in occ.unhealthy[0]


async def test_a_card_the_driver_does_not_report_is_not_free_even_while_blind(make_allocator):
    blind = ProbeReading("smi", idle_cards(6), count=6, external_probe_ok=False, problem="blind")
    occ = await make_allocator(probe=StaticProbe(blind), cards_count=8, cards_allow_unverified=True).occupancy()
    assert occ.free == [0, 1, 2, 3, 4, 5] and set(occ.unhealthy) == {6, 7}


async def test_a_launch_stopped_before_it_started_is_not_reported_as_launched(make_allocator):
    class StoppedMeanwhile(MemoryRuntime):
        async def start(self, name):
            # another shell's `tpnode-tui stop` in the create->start window: the
            # job ends with no exit code of its own, as a killed gated supervisor does
            self.jobs[name] = replace(self.jobs[name], status="exited", exit_code=None)
            return self.jobs[name]

    runtime = StoppedMeanwhile()
    with pytest.raises(Conflict, match="stopped before it started"):
        await make_allocator(runtime=runtime).launch(JobSpec("r", 1, ("x",)))


async def test_a_request_the_runtime_can_never_run_is_refused_before_capacity_is_checked(make_allocator):
    class Picky(MemoryRuntime):
        async def check(self, spec):
            raise BadRequest("no such image")

    runtime = Picky()
    runtime.add(job("full", range(8)))
    with pytest.raises(BadRequest, match="no such image"):  # not NoCapacity: waiting cannot help
        await make_allocator(runtime=runtime).launch(JobSpec("r", 1, ("x",)))


async def test_a_card_nothing_can_be_read_about_is_never_free_even_with_health_checks_off(make_allocator):
    probe = StaticProbe()
    probe.set_card(1, memory_used_mib=None, processes=None, health=("GPU is lost",))
    occ = await make_allocator(probe=probe, cards_check_health=False).occupancy()
    assert 1 not in occ.free and occ.unhealthy == {1: "GPU is lost"}


async def test_two_jobs_on_one_card_are_shown_as_such_not_hidden(make_allocator):
    runtime = MemoryRuntime()
    runtime.add(job("a", [0, 1]))
    runtime.add(job("b", [1]))
    snap = await make_allocator(runtime=runtime).snapshot()
    assert snap.cards[1].warning == "claimed by 2 jobs at once: a, b"
    assert snap.cards[0].warning is None


async def test_retrying_a_run_id_created_but_never_started_is_refused(make_allocator):
    runtime = MemoryRuntime()
    runtime.add(job("r", [0], status="created"))
    with pytest.raises(Conflict, match="created but not started.*stop and reclaim it"):
        await make_allocator(runtime=runtime).launch(JobSpec("r", 1, ("x",)))


async def test_external_use_by_process_or_memory_counts_as_held(make_allocator):
    probe = StaticProbe()
    probe.set_card(2, processes=(ProcessFacts(4242, 30000),), memory_used_mib=30500)
    probe.set_card(5, memory_used_mib=20000, processes=())  # host pid invisible from a container
    alloc = make_allocator(probe=probe)
    occ = await alloc.occupancy()
    assert occ.external == {2, 5}
    assert 2 not in occ.free and 5 not in occ.free


async def test_external_excludes_cards_platform_jobs_hold(make_allocator):
    runtime = MemoryRuntime()
    runtime.add(job("a", [0, 1]))
    probe = StaticProbe()
    probe.set_card(0, processes=(ProcessFacts(10, 9000),), memory_used_mib=9000)
    alloc = make_allocator(runtime=runtime, probe=probe)
    occ = await alloc.occupancy()
    assert occ.by_job == {0: "a", 1: "a"} and occ.external == frozenset()


async def test_turning_off_the_external_check_ignores_use_from_outside(make_allocator):
    probe = StaticProbe()
    probe.set_card(3, memory_used_mib=90000)
    occ = await make_allocator(probe=probe, cards_check_external=False).occupancy()
    assert 3 in occ.free and occ.external_probe_ok


# -- a run id asked for again ----------------------------------------------------


def test_a_container_is_the_same_request_whatever_its_entrypoint_and_tag():
    running = JobState(
        name="tpn-t",
        run_id="t",
        gpus=(0, 1),
        status="running",
        image="pytorch/pytorch:latest",
        command=("/opt/entrypoint.sh", "python", "train.py"),
    )
    same = JobSpec("t", 2, ("python", "train.py"), image="pytorch/pytorch")
    assert request_differences(same, running) == []
    assert request_differences(replace(same, command=()), running) == []  # the image's own command
    assert request_differences(replace(same, image="pytorch/pytorch:2.4"), running) == [
        "its image is pytorch/pytorch:latest, not pytorch/pytorch:2.4"
    ]
    assert request_differences(replace(same, command=("python", "eval.py")), running) == [
        "its command is /opt/entrypoint.sh python train.py, not python eval.py"
    ]


def test_a_process_job_is_the_same_request_only_with_the_same_command():
    running = JobState(name="t", run_id="t", gpus=(3,), status="running", command=("sleep", "60"))
    assert request_differences(JobSpec("t", 1, ("sleep", "60")), running) == []
    assert request_differences(JobSpec("t", 1, ("60",)), running) == ["its command is sleep 60, not 60"]


def test_a_reservation_asked_again_is_the_same_within_a_tenth_of_its_length_or_a_minute():
    now = time.time()
    held = JobState(name="r", run_id="r", gpus=(0,), status="running", kind="reservation", expires_at=now + 7200)
    asked = JobSpec("r", 1, kind="reservation")
    assert request_differences(replace(asked, expires_at=now + 7200 + 600), held) == []
    assert request_differences(replace(asked, expires_at=now + 7200 + 900), held) == ["it ends in 2h00m, not 2h15m"]
    assert request_differences(replace(asked, expires_at=now + 45), held) == ["it ends in 2h00m, not 45s"]


# -- card count and series: a failure is not cached ------------------------------


async def test_failed_card_count_is_not_cached(make_allocator):
    probe = StaticProbe(
        ProbeReading("nvml", (), count=None, external_probe_ok=False, problem="NVML: driver not loaded")
    )
    alloc = make_allocator(probe=probe)
    assert (await alloc.occupancy()).total == 0
    probe.reading = ProbeReading("nvml", idle_cards(8), count=8)
    assert (await alloc.occupancy()).total == 8
    probe.reading = ProbeReading("nvml", (), count=None, external_probe_ok=False, problem="NVML: timeout")
    assert (await alloc.occupancy()).total == 8  # a real count, once found, is kept


async def test_a_card_that_comes_back_is_counted_again(make_allocator):
    probe = StaticProbe(ProbeReading("nvml", idle_cards(7), count=7))  # card 7 is away (a reset)
    alloc = make_allocator(probe=probe)
    assert (await alloc.occupancy()).total == 7
    probe.reading = ProbeReading("nvml", idle_cards(8), count=8)  # ... and back
    assert (await alloc.occupancy()).total == 8
    assert (await alloc.occupancy()).free == list(range(8))


async def test_a_card_that_vanishes_stays_counted_and_shown_with_what_holds_it(make_allocator):
    runtime = MemoryRuntime()
    probe = StaticProbe(cards=8)
    alloc = make_allocator(runtime=runtime, probe=probe)
    runtime.add(job("last", [7]))
    assert (await alloc.occupancy()).total == 8
    probe.reading = ProbeReading("nvml", idle_cards(7), count=7)  # the driver now reports 7 cards
    snap = await alloc.snapshot()
    assert snap.occupancy.total == 8
    seven = snap.cards[7]
    assert (seven.state, seven.run_id) == ("job", "last")
    assert seven.warning == "not reported by the driver (nvml)"
    runtime.jobs["tpn-last"] = job("last", [7], status="exited")
    snap = await alloc.snapshot()  # nothing holds it now: unhealthy, still counted, never offered
    assert snap.occupancy.total == 8 and snap.cards[7].state == "unhealthy"
    assert "not reported by the driver" in snap.cards[7].reason
    assert 7 not in snap.occupancy.free


async def test_a_configured_count_wins_over_what_the_driver_reports(make_allocator):
    probe = StaticProbe(cards=8)
    alloc = make_allocator(probe=probe, cards_count=2)
    assert (await alloc.occupancy()).total == 2


async def test_unresolved_series_is_not_cached(make_allocator):
    probe = StaticProbe(ProbeReading("nvml", (), count=None, external_probe_ok=False))
    alloc = make_allocator(probe=probe)
    assert (await alloc.snapshot()).series == ""
    probe.reading = ProbeReading("nvml", idle_cards(8), count=8)
    assert (await alloc.snapshot()).series == "NVIDIA H200"  # as status and the dashboard name the cards


async def test_configured_profile_answers_first_without_the_drivers_card_name(make_allocator):
    probe = StaticProbe()
    seen = []

    def resolver(profile, name):
        seen.append((profile, name))
        return {"h200-sxm": "h200"}.get(profile, "")

    alloc = make_allocator(probe=probe, series_resolver=resolver, cards_profile="h200-sxm")
    assert (await alloc.snapshot()).series == "h200"
    assert (await alloc.snapshot()).series == "h200"
    assert seen == [("h200-sxm", "")]  # asked once, never with the driver's name


# -- picking ----------------------------------------------------------------------


async def test_consecutive_cards_are_picked_first(make_allocator):
    runtime = MemoryRuntime()
    runtime.add(job("a", [0]))
    runtime.add(job("b", [2]))
    alloc = make_allocator(runtime=runtime)
    assert (await alloc.launch(JobSpec("c", 3, ("x",)))).gpus == (3, 4, 5)


async def test_never_fits_is_not_no_capacity(make_allocator):
    alloc = make_allocator()
    with pytest.raises(NeverFits, match="no amount of waiting"):
        await alloc.launch(JobSpec("big", 9, ("x",)))
    assert not issubclass(NeverFits, NoCapacity)  # a retry loop must not keep it waiting


async def test_not_yet_is_no_capacity_with_the_explanation(make_allocator):
    runtime = MemoryRuntime()
    runtime.add(job("a", range(6)))
    probe = StaticProbe()
    probe.set_card(7, health=("row remapping pending, which needs a GPU reset",))
    alloc = make_allocator(runtime=runtime, probe=probe)
    with pytest.raises(NoCapacity) as err:
        await alloc.launch(JobSpec("b", 2, ("x",)))
    assert "need 2 cards, but 8 cards total, 1 free" in str(err.value)
    assert "card 7: row remapping pending" in str(err.value)


async def test_blind_node_with_no_count_waits_rather_than_never_fits(make_allocator):
    probe = StaticProbe(
        ProbeReading("none", (), count=None, external_probe_ok=False, problem="NVML: library not found")
    )
    with pytest.raises(NoCapacity):
        await make_allocator(probe=probe).launch(JobSpec("x", 1, ("x",)))


async def test_same_run_id_gets_its_cards_back(make_allocator):
    runtime = MemoryRuntime()
    alloc = make_allocator(runtime=runtime)
    first = await alloc.launch(JobSpec("r1", 2, ("train",)))
    again = await alloc.launch(JobSpec("r1", 2, ("train",)))
    assert again.existing and again.gpus == first.gpus
    assert len(runtime.jobs) == 1


async def test_a_run_id_of_an_unreclaimed_exited_job_is_refused(make_allocator):
    runtime = MemoryRuntime()
    runtime.add(job("r1", [0], status="exited"))
    with pytest.raises(Conflict, match="reclaim it"):
        await make_allocator(runtime=runtime).launch(JobSpec("r1", 1, ("x",)))


async def test_only_live_jobs_hold_cards(make_allocator):
    runtime = MemoryRuntime()
    for status, cards in (("running", [0]), ("created", [1]), ("paused", [2]), ("exited", [3]), ("dead", [4])):
        runtime.add(job(f"j-{status}", cards, status=status))
    occ = await make_allocator(runtime=runtime).occupancy()
    assert sorted(occ.by_job) == [0, 1, 2]


async def test_a_job_index_out_of_range_is_not_a_card(make_allocator):
    runtime = MemoryRuntime()
    runtime.add(job("a", [1, 99]))
    occ = await make_allocator(runtime=runtime).occupancy()
    assert occ.by_job == {1: "a"} and occ.total == 8


async def test_a_card_the_driver_stops_reporting_is_never_free(make_allocator):
    probe = StaticProbe(ProbeReading("nvml", idle_cards(8)[:6], count=6))
    occ = await make_allocator(probe=probe, cards_count=8).occupancy()
    assert set(occ.unhealthy) == {6, 7} and 6 not in occ.free


# -- health -----------------------------------------------------------------------


async def test_unhealthy_cards_are_not_handed_out(make_allocator):
    probe = StaticProbe()
    probe.set_card(0, health=("2 uncorrected ECC errors",))
    alloc = make_allocator(probe=probe)
    assert (await alloc.launch(JobSpec("a", 1, ("x",)))).gpus == (1,)


async def test_unhealthy_is_not_deducted_twice_but_still_shown(make_allocator):
    runtime = MemoryRuntime()
    runtime.add(job("a", [0]))
    probe = StaticProbe()
    probe.set_card(0, health=("hardware slowdown (thermal)",))
    alloc = make_allocator(runtime=runtime, probe=probe)
    occ = await alloc.occupancy()
    assert occ.unhealthy == {} and occ.by_job == {0: "a"}
    assert len(occ.free) == 7
    card = (await alloc.snapshot()).cards[0]
    assert card.state == "job" and card.warning == "hardware slowdown (thermal)"


async def test_turning_off_the_health_check_hands_out_unhealthy_cards(make_allocator):
    probe = StaticProbe()
    probe.set_card(0, health=("2 uncorrected ECC errors",))
    assert (await make_allocator(probe=probe, cards_check_health=False).launch(JobSpec("a", 1, ("x",)))).gpus == (0,)


# -- the lock covers read, pick and create ----------------------------------------


async def test_lock_covers_the_create_so_concurrent_launches_never_share(make_allocator):
    # the delay: the window in which a lock that did not cover the create would fail
    alloc = make_allocator(runtime=MemoryRuntime(create_delay=0.05))
    results = await asyncio.gather(*(alloc.launch(JobSpec(f"r{i}", 2, ("x",))) for i in range(4)))
    cards = [c for r in results for c in r.gpus]
    assert sorted(cards) == list(range(8))


async def test_launches_racing_in_one_process_never_share_a_card(make_allocator):
    runtime = MemoryRuntime(create_delay=0.05)
    alloc = make_allocator(runtime=runtime)
    outcomes = await asyncio.gather(
        *(alloc.launch(JobSpec(f"r{i}", 3, ("x",))) for i in range(4)), return_exceptions=True
    )
    placed = [o for o in outcomes if not isinstance(o, Exception)]
    refused = [o for o in outcomes if isinstance(o, NoCapacity)]
    assert len(placed) == 2 and len(refused) == 2
    held = [c for o in placed for c in o.gpus]
    assert len(held) == len(set(held)) == 6


async def test_launch_creates_under_the_lock_and_starts_after_releasing_it(make_allocator):
    events = []

    class Watching(MemoryRuntime):
        async def create(self, spec, gpus):
            events.append(("create", alloc.lock.locked()))
            return await super().create(spec, gpus)

        async def start(self, name):
            events.append(("start", alloc.lock.locked()))
            return await super().start(name)

    alloc = make_allocator(runtime=Watching())
    await alloc.launch(JobSpec("r", 1, ("x",)))
    assert events == [("create", True), ("start", False)]


async def test_a_lost_lock_never_starts_two_jobs_on_one_card(make_allocator, tmp_path):
    """Two allocators whose locks do not see each other (as after a lost lease)
    pick the same cards; the later lease token backs off before starting."""
    runtime = MemoryRuntime(create_delay=0.1)
    # separate flocks: no mutual exclusion
    allocs = [make_allocator(runtime, state_dir=tmp_path / name) for name in ("a", "b")]
    outcomes = await asyncio.gather(
        allocs[0].launch(JobSpec("ra", 8, ("x",))), allocs[1].launch(JobSpec("rb", 8, ("x",))), return_exceptions=True
    )
    placed = [o for o in outcomes if not isinstance(o, Exception)]
    backed_off = [o for o in outcomes if isinstance(o, NoCapacity)]
    assert len(placed) == 1 and len(backed_off) == 1, outcomes
    assert "taken meanwhile" in str(backed_off[0])
    live = [j for j in runtime.jobs.values() if j.live]
    assert len(live) == 1 and runtime.started == [live[0].name]
    for a in allocs:
        await a.close()


async def test_an_earlier_job_that_missed_our_record_keeps_its_cards(make_allocator):
    """The later job checked before ours existed and started; ours must go."""
    runtime = MemoryRuntime()
    alloc = make_allocator(runtime=runtime)

    class LaterStarted(MemoryRuntime):
        async def create(self, spec, gpus):
            job_ = await super().create(spec, gpus)
            self.add(replace(job("later", gpus), lease_token=spec.lease_token + 1))
            return job_

    alloc.runtime = LaterStarted()
    with pytest.raises(NoCapacity, match="later"):
        await alloc.launch(JobSpec("r", 2, ("x",)))
    assert list(alloc.runtime.jobs) == ["tpn-later"] and alloc.runtime.started == []


async def test_a_job_placed_by_hand_on_our_cards_meanwhile_makes_us_back_off(make_allocator):
    class Intruded(MemoryRuntime):
        async def create(self, spec, gpus):
            job_ = await super().create(spec, gpus)
            self.add(job("by-hand", gpus))  # a container labelled by hand, no lease token
            return job_

    runtime = Intruded()
    with pytest.raises(NoCapacity, match="by-hand"):
        await make_allocator(runtime=runtime).launch(JobSpec("r", 2, ("x",)))
    assert list(runtime.jobs) == ["tpn-by-hand"] and runtime.started == []


# -- ending jobs ------------------------------------------------------------------


async def test_release_never_removes_a_running_job(make_allocator):
    runtime = MemoryRuntime()
    runtime.add(job("a", [0]))
    alloc = make_allocator(runtime=runtime)
    assert await alloc.release("a") == []
    assert "tpn-a" in runtime.jobs
    runtime.add(job("a", [0], status="exited"))
    assert [j.run_id for j in await alloc.release("a")] == ["a"]
    assert runtime.jobs == {}


async def test_reclaim_removes_only_exited_jobs_and_explains_a_running_one(make_allocator):
    runtime = MemoryRuntime()
    runtime.add(job("live", [0]))
    runtime.add(job("done", [1], status="exited"))
    runtime.add(job("also-done", [2], status="dead"))
    alloc = make_allocator(runtime=runtime)
    with pytest.raises(Conflict, match="still running; stop it first"):
        await alloc.reclaim("live")
    with pytest.raises(JobNotFound):
        await alloc.reclaim("nope")
    removed = await alloc.reclaim()
    assert sorted(j.run_id for j in removed) == ["also-done", "done"]
    assert list(runtime.jobs) == ["tpn-live"]


async def test_stop_stops_only_a_live_job_by_run_id(make_allocator):
    runtime = MemoryRuntime()
    runtime.add(job("a", [0, 1]))
    alloc = make_allocator(runtime=runtime)
    stopped = await alloc.stop("a")
    assert stopped.gpus == (0, 1)
    assert runtime.jobs["tpn-a"].status == "exited"
    assert (await alloc.occupancy()).free == list(range(8))
    with pytest.raises(JobNotFound):
        await alloc.stop("a")


async def test_reservation_is_a_job_of_kind_reservation_with_an_expiry(make_allocator):
    runtime = MemoryRuntime()
    alloc = make_allocator(runtime=runtime)
    got = await alloc.reserve(2, 3600, owner="alice")
    assert got.job.kind == "reservation" and got.job.owner == "alice"
    assert got.job.expires_at is not None and got.gpus == (0, 1)
    snap = await alloc.snapshot()
    assert [c.state for c in snap.cards[:3]] == ["reservation", "reservation", "free"]
    assert snap.occupancy.reserved == {0, 1} and "2 held by reservations" in snap.explain


async def test_waiting_for_the_lock_does_not_shorten_a_reservation(make_allocator, settings):
    alloc = make_allocator()
    other = make_lock(settings)
    async with other.hold():
        pending = asyncio.create_task(alloc.reserve(1, 3600, owner="ana"))
        await asyncio.sleep(0.5)  # the reservation waits for the lock meanwhile
        picked_after = time.time()
    got = await pending
    assert got.job.expires_at >= picked_after + 3600
    await other.close()


@pytest.mark.parametrize("cards", [0, -1])
async def test_launch_refuses_no_cards(make_allocator, cards):
    with pytest.raises(BadRequest, match="at least 1 card"):
        await make_allocator().launch(JobSpec("r", cards, ("x",)))


def test_an_allocator_refuses_a_lock_that_does_not_span_processes(settings):
    # by hand: the lock is the test's own, which no allocator of the tests' would be given
    class InProcessOnly:
        cross_process = False

    with pytest.raises(ConfigError, match="no cross-process lock"):
        GpuAllocator(MemoryRuntime(), StaticProbe(), settings, InProcessOnly())


# -- what a job was granted, in device numbers (for its fence) -------------------

MIG_UUID = "MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9"


def _reading_with_minors() -> ProbeReading:
    split = CardFacts(
        3,
        minor=3,
        mig_mode=True,
        slices=(
            SliceFacts(0, uuid=MIG_UUID, profile="1g.18gb", gpu_instance_id=9, compute_instance_id=0),
            SliceFacts(1, uuid="MIG-00000000-0000-5000-8000-000000000001", profile="1g.18gb"),
        ),
    )
    cards = (CardFacts(0, minor=1), CardFacts(1, minor=0), CardFacts(2, minor=None), split)
    return ProbeReading("static", cards, count=4)


def test_the_grant_is_the_readings_device_numbers_and_one_not_read_is_never_guessed():
    reading = _reading_with_minors()
    assert device_grant(reading, [0, 1], ()) == DeviceGrant(cards=(1, 0))  # minors, not indices
    assert device_grant(reading, (), (SliceRef(3, MIG_UUID, "1g.18gb"),)) == DeviceGrant(slices=(SliceMinors(3, 9, 0),))
    unread = device_grant(reading, [1, 2], ())
    assert unread.cards == (0,) and unread.unknown == "the static probe did not read card 2's device minor"
    no_ids = device_grant(reading, (), (SliceRef(3, "MIG-00000000-0000-5000-8000-000000000001", "1g.18gb"),))
    assert no_ids.unknown == (
        "the static probe did not read the GPU and compute instance ids of slice 1g.18gb of card 3"
    )
    assert device_grant(reading, [7], ()).unknown == "the static probe did not read card 7's device minor"


async def test_a_launch_records_what_it_got_in_the_numbers_of_the_reading_it_was_picked_from(make_allocator):
    class Recording(MemoryRuntime):
        def __init__(self):
            super().__init__()
            self.specs = []

        async def create(self, spec, gpus):
            self.specs.append(spec)
            return await super().create(spec, gpus)

    runtime = Recording()
    probe = StaticProbe(cards=2)
    probe.set_card(0, minor=1)
    probe.set_card(1, minor=0)
    allocator = make_allocator(runtime, probe)
    launched = await allocator.launch(JobSpec("g", 2, ("true",)))
    assert launched.gpus == (0, 1)
    assert runtime.specs[0].granted == DeviceGrant(cards=(1, 0))
