"""The NVML probe against an in-memory nvidia-ml-py that raises the real error classes."""

from __future__ import annotations

import asyncio
import sys

import pytest

from helpers.nvml import (
    HW_POWER_BRAKE_SLOWDOWN,
    HW_SLOWDOWN,
    HW_THERMAL_SLOWDOWN,
    SW_POWER_CAP,
    FakeCard,
    FakeNvml,
    FakeSlice,
    NVMLError_DriverNotLoaded,
    NVMLError_FunctionNotFound,
    NVMLError_GpuIsLost,
    NVMLError_LibraryNotFound,
    NVMLError_NoPermission,
    NVMLError_NotSupported,
    NVMLError_Unknown,
    NVMLLibraryMismatchError,
    a100_style,
    consumer_style,
)
from helpers.waiting import until_async
from tpnode_tui.model.facts import ProcessFacts, SliceFacts
from tpnode_tui.probes import health


async def test_reads_every_fact_of_every_card(nvml_probe):
    fake = FakeNvml([FakeCard(), FakeCard(memory_used_mib=30000, utilization_pct=97, power_w=612.5)])
    reading = await nvml_probe(fake).read()

    assert reading.source == "nvml"
    assert (reading.count, reading.external_probe_ok, reading.problem) == (2, True, None)
    first, second = reading.cards
    assert first.index == 0 and second.index == 1
    assert first.uuid == "GPU-1c0f8a1e-0000-4000-8000-000000000000"
    assert second.uuid == "GPU-1c0f8a1e-0000-4000-8000-000000000001"
    assert first.name == "NVIDIA H200"
    assert first.pci_bus_id == "00000000:18:00.0"
    assert (first.memory_total_mib, first.memory_used_mib) == (143771, 1)
    assert (first.temperature_c, first.power_w, first.utilization_pct) == (31, 74.38, 0)
    assert first.processes == () and first.health == ()
    assert (second.memory_used_mib, second.utilization_pct, second.power_w) == (30000, 97, 612.5)
    assert not first.in_use(512) and second.in_use(512)


async def test_each_cards_device_minor_is_read_and_need_not_be_its_index(nvml_probe):
    """The fence allows a job /dev/nvidia<minor>; on some machines minors are not in PCI order."""
    fake = FakeNvml([FakeCard(minor=1), FakeCard(minor=0), FakeCard()])
    reading = await nvml_probe(fake).read()
    assert [c.minor for c in reading.cards] == [1, 0, 2]


@pytest.mark.parametrize("error", [NVMLError_NotSupported, NVMLError_Unknown])
async def test_a_minor_the_driver_will_not_give_is_unknown_never_the_index(nvml_probe, error):
    card = FakeCard()
    card.errors["minor"] = error
    reading = await nvml_probe(FakeNvml([FakeCard(), card])).read()
    assert [c.minor for c in reading.cards] == [0, None]
    assert reading.cards[1].memory_used_mib == 1 and reading.external_probe_ok
    if error is NVMLError_NotSupported:
        assert reading.problem is None
    else:
        assert reading.problem == "card 1: NVML could not read the device minor (Unknown Error)"


async def test_a_minor_no_card_file_can_have_is_unknown(nvml_probe):
    reading = await nvml_probe(FakeNvml([FakeCard(minor=255)])).read()
    assert reading.cards[0].minor is None


async def test_processes_in_mib_and_unknown_memory_kept_unknown(nvml_probe):
    fake = FakeNvml([FakeCard(processes=[(4242, 30000), (777, None)])])
    (card,) = (await nvml_probe(fake).read()).cards
    assert card.processes == (ProcessFacts(4242, 30000), ProcessFacts(777, None))
    assert card.in_use(512)


@pytest.mark.parametrize(
    "signals, reason",
    [
        ({"retired_pages_pending": True}, health.RETIRED_PAGES_PENDING),
        ({"ecc_uncorrected": 3}, "3 uncorrected ECC errors"),
        ({"row_remap_pending": True}, health.ROW_REMAP_PENDING),
        ({"row_remap_failure": True}, health.ROW_REMAP_FAILED),
        ({"clocks_reasons": HW_SLOWDOWN}, "hardware slowdown (heat or power)"),
        ({"clocks_reasons": HW_SLOWDOWN | HW_THERMAL_SLOWDOWN}, "hardware slowdown (thermal)"),
        ({"clocks_reasons": HW_POWER_BRAKE_SLOWDOWN}, "hardware slowdown (power brake)"),
    ],
)
async def test_each_health_signal_makes_only_its_card_unhealthy(nvml_probe, signals, reason):
    fake = FakeNvml([FakeCard(), FakeCard(**signals)])
    reading = await nvml_probe(fake).read()
    assert reading.cards[0].health == ()
    assert reading.cards[1].health == (reason,)
    assert reading.external_probe_ok and reading.problem is None


async def test_software_power_cap_is_normal_not_a_fault(nvml_probe):
    fake = FakeNvml([FakeCard(clocks_reasons=SW_POWER_CAP)])
    assert (await nvml_probe(fake).read()).cards[0].health == ()


async def test_several_faults_are_all_named(nvml_probe):
    fake = FakeNvml([FakeCard(ecc_uncorrected=2, row_remap_pending=True, clocks_reasons=HW_THERMAL_SLOWDOWN)])
    assert (await nvml_probe(fake).read()).cards[0].health == (
        "2 uncorrected ECC errors",
        health.ROW_REMAP_PENDING,
        "hardware slowdown (thermal)",
    )


async def test_a100_style_card_without_retired_pages_is_caught_by_row_remapping(nvml_probe):
    fake = FakeNvml([a100_style(row_remap_pending=True), a100_style()])
    reading = await nvml_probe(fake).read()
    assert reading.cards[0].health == (health.ROW_REMAP_PENDING,)
    assert reading.cards[1].health == ()
    # "not supported" is how that card is, not a problem to report
    assert reading.problem is None


@pytest.mark.parametrize("new_call_error", [NVMLError_NotSupported, NVMLError_FunctionNotFound])
async def test_clock_reasons_fall_back_to_the_deprecated_call(nvml_probe, new_call_error):
    card = FakeCard(clocks_reasons=HW_THERMAL_SLOWDOWN)
    card.errors["clocks_event"] = new_call_error
    fake = FakeNvml([card])
    reading = await nvml_probe(fake).read()
    assert reading.cards[0].health == ("hardware slowdown (thermal)",)
    assert fake.calls["clocks_throttle"] == 1


async def test_clock_reasons_from_a_binding_without_the_new_call(nvml_probe):
    class OldBinding(FakeNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None

    fake = OldBinding([FakeCard(clocks_reasons=HW_SLOWDOWN)])
    assert (await nvml_probe(fake).read()).cards[0].health == ("hardware slowdown (heat or power)",)


async def test_unsupported_temperature_degrades_only_temperature(nvml_probe):
    card = FakeCard(retired_pages_pending=True)
    card.errors["temperature"] = NVMLError_NotSupported
    reading = await nvml_probe(FakeNvml([card])).read()
    (facts,) = reading.cards
    assert facts.temperature_c is None
    assert (facts.memory_used_mib, facts.power_w, facts.name) == (1, 74.38, "NVIDIA H200")
    assert facts.health == (health.RETIRED_PAGES_PENDING,)
    assert reading.external_probe_ok and reading.problem is None


async def test_a_failing_field_is_reported_and_degrades_only_that_field(nvml_probe):
    card = FakeCard()
    card.errors["power"] = NVMLError_Unknown
    reading = await nvml_probe(FakeNvml([card])).read()
    (facts,) = reading.cards
    assert facts.power_w is None and facts.memory_used_mib == 1 and facts.health == ()
    assert reading.external_probe_ok
    assert reading.problem == "card 0: NVML could not read power draw (Unknown Error)"


@pytest.mark.parametrize("error", [NVMLError_Unknown, NVMLError_NotSupported])
async def test_unreadable_memory_makes_the_card_unverified(nvml_probe, error):
    broken = FakeCard()
    broken.errors["memory_v2"] = broken.errors["memory"] = error
    reading = await nvml_probe(FakeNvml([FakeCard(), broken])).read()
    assert reading.cards[1].memory_used_mib is None and reading.cards[1].memory_total_mib is None
    assert reading.cards[1].processes == ()  # the list itself was read
    assert not reading.external_probe_ok
    assert "memory use could not be read on card 1" in reading.problem


async def test_memory_the_driver_reserves_is_not_counted_as_used(nvml_probe):
    fake = FakeNvml([FakeCard(memory_used_mib=1, memory_reserved_mib=912)])
    (card,) = (await nvml_probe(fake).read()).cards
    assert card.memory_used_mib == 1 and not card.in_use(512)


async def test_memory_info_version_1_where_version_2_is_missing(nvml_probe):
    card = FakeCard(memory_used_mib=1, memory_reserved_mib=600)
    card.errors["memory_v2"] = NVMLError_FunctionNotFound
    reading = await nvml_probe(FakeNvml([card])).read()
    assert reading.cards[0].memory_used_mib == 601  # all version 1 can say
    assert reading.problem is None


async def test_a_binding_newer_than_the_driver_degrades_only_the_process_list(nvml_probe):
    card = FakeCard()
    card.errors["processes"] = NVMLLibraryMismatchError
    reading = await nvml_probe(FakeNvml([card])).read()
    assert reading.cards[0].processes is None and reading.cards[0].memory_used_mib == 1
    assert "card 0: NVML could not read the process list" in reading.problem


async def test_unreadable_process_list_is_unknown_not_empty(nvml_probe):
    card = FakeCard()
    card.errors["processes"] = NVMLError_NoPermission
    reading = await nvml_probe(FakeNvml([card])).read()
    assert reading.cards[0].processes is None
    assert "card 0: NVML could not read the process list" in reading.problem
    assert reading.external_probe_ok  # memory used still shows use from outside


@pytest.mark.parametrize("where", ["handle", "memory_v2", "clocks_event"])
async def test_a_lost_gpu_is_unhealthy_and_still_counted(nvml_probe, where):
    lost = FakeCard(memory_used_mib=0)
    lost.errors[where] = NVMLError_GpuIsLost
    reading = await nvml_probe(FakeNvml([FakeCard(), lost, FakeCard()])).read()
    assert reading.count == 3
    card = reading.cards[1]
    assert card.health == (health.GPU_LOST,)
    assert (card.name, card.memory_used_mib, card.processes) == (None, None, None)
    assert (card.mig_mode, card.slices) == (None, None)  # nothing known of it, whole or split
    assert reading.cards[2].health == () and reading.cards[2].memory_used_mib == 1
    # a lost card is not handed out anyway, so it does not blind the node
    assert reading.external_probe_ok


async def test_a_card_nvml_cannot_open_is_not_offered(nvml_probe):
    card = FakeCard()
    card.errors["handle"] = NVMLError_NoPermission
    (facts,) = (await nvml_probe(FakeNvml([card])).read()).cards
    assert facts.health == ("NVML cannot open this card (Insufficient Permissions)",)
    assert (facts.mig_mode, facts.slices) == (None, None)


@pytest.mark.parametrize(
    "error, problem",
    [
        (NVMLError_LibraryNotFound, "NVML: library not found (is the NVIDIA driver installed?)"),
        (NVMLError_DriverNotLoaded, "NVML: driver not loaded"),
        (NVMLError_Unknown, "NVML could not start: Unknown Error"),
    ],
)
async def test_init_failure_is_blind_with_the_reason(nvml_probe, error, problem):
    reading = await nvml_probe(FakeNvml(init_error=error)).read()
    assert reading.problem.startswith(problem)
    assert (reading.cards, reading.count, reading.external_probe_ok) == ((), None, False)


async def test_a_failed_init_is_not_cached_and_a_good_one_is(nvml_probe):
    fake = FakeNvml(init_error=NVMLError_DriverNotLoaded, init_failures=1)
    probe = nvml_probe(fake)
    assert not (await probe.read()).external_probe_ok
    assert (await probe.read()).problem is None
    assert (await probe.read()).count == 2
    assert fake.calls["init"] == 2


async def test_init_once_per_process_across_probes(nvml_probe):
    fake = FakeNvml()
    for probe in (nvml_probe(fake), nvml_probe(fake)):
        assert (await probe.read()).problem is None
    assert fake.calls["init"] == 1


async def test_a_lost_driver_is_initialised_again(nvml_probe):
    fake = FakeNvml(count_error=NVMLError_DriverNotLoaded)
    probe = nvml_probe(fake)
    reading = await probe.read()
    assert reading.problem == "NVML could not count the cards (Driver Not Loaded)"
    assert not reading.external_probe_ok
    fake.count_error = None
    assert (await probe.read()).count == 2
    assert fake.calls["init"] == 2


#: the identity calls counted (the PCI bus id is asked by the topology read too)
IDENTITY = ("uuid", "name", "minor")


async def test_a_cards_identity_is_read_once_per_initialisation_and_its_use_every_time(nvml_probe):
    """Who uses a card is asked at every read; what names it, once: NVML numbers the cards when initialised."""
    fake = FakeNvml([FakeCard(), FakeCard()])
    probe = nvml_probe(fake)
    first = await probe.read()
    fake.cards[1].memory_used_mib = 30000
    fake.cards[1].processes = [(4242, 29000)]
    second = await probe.read()
    assert [fake.calls[f] for f in IDENTITY] == [2, 2, 2]
    assert fake.calls["processes"] == 4 and fake.calls["memory_v2"] == 4
    assert [(c.uuid, c.name, c.pci_bus_id, c.minor) for c in second.cards] == [
        (c.uuid, c.name, c.pci_bus_id, c.minor) for c in first.cards
    ]
    assert second.cards[1].memory_used_mib == 30000 and second.cards[1].in_use(512)


async def test_a_cards_identity_is_read_again_after_nvml_starts_again(nvml_probe):
    fake = FakeNvml([FakeCard(), FakeCard()])
    probe = nvml_probe(fake)
    await probe.read()
    fake.count_error = NVMLError_DriverNotLoaded  # the driver went away: NVML is initialised afresh
    assert not (await probe.read()).external_probe_ok
    fake.count_error = None
    fake.cards[0].uuid = "GPU-swapped"
    assert (await probe.read()).cards[0].uuid == "GPU-swapped"
    assert [fake.calls[f] for f in IDENTITY] == [4, 4, 4]


async def test_an_identity_field_that_failed_is_asked_again(nvml_probe):
    fake = FakeNvml([FakeCard()])
    fake.cards[0].errors["minor"] = NVMLError_Unknown
    probe = nvml_probe(fake)
    assert (await probe.read()).cards[0].minor is None
    del fake.cards[0].errors["minor"]
    assert (await probe.read()).cards[0].minor == 0
    assert (await probe.read()).cards[0].minor == 0
    assert (fake.calls["minor"], fake.calls["uuid"]) == (2, 2)


async def test_a_lost_cards_identity_is_read_again_when_it_comes_back(nvml_probe):
    fake = FakeNvml([FakeCard(), FakeCard()])
    probe = nvml_probe(fake)
    await probe.read()
    fake.cards[1].lost = True
    assert health.GPU_LOST in (await probe.read()).cards[1].health
    fake.cards[1].lost = False
    fake.cards[1].uuid = "GPU-back"
    assert (await probe.read()).cards[1].uuid == "GPU-back"


async def test_a_hung_call_is_blind_and_nothing_queues_behind_it(nvml_probe):
    fake = FakeNvml()
    release = fake.hang("memory_v2")
    probe = nvml_probe(fake, timeout_s=0.2)
    try:
        first = await probe.read()
        assert first.problem == "NVML did not answer within 0.2 s"
        assert (first.cards, first.external_probe_ok) == ((), False)

        second = await probe.read()
        assert "still stuck" in second.problem and not second.external_probe_ok
        assert fake.calls["count"] == 1  # answered at once, no second call queued
    finally:
        release.set()

    async def recovered():
        while (reading := await probe.read()).problem is not None:
            await asyncio.sleep(0.01)
        return reading

    reading = await asyncio.wait_for(recovered(), 5)
    assert reading.count == 2 and reading.external_probe_ok


async def test_a_read_cancelled_while_the_driver_is_busy_leaves_the_probe_answering(nvml_probe):
    """A reader that goes away (a dashboard closing, a request cancelled) is not NVML stuck:
    the call it waited for finishes on the worker, answers nobody, and the next read is a reading."""
    fake = FakeNvml()
    release = fake.hang("memory_v2")
    probe = nvml_probe(fake, timeout_s=5.0)
    reader = asyncio.ensure_future(probe.read())
    try:
        await until_async(lambda: fake.calls["memory_v2"] == 1, "the read to reach the driver")
        queued = asyncio.ensure_future(probe.read())  # behind the busy one on the worker
        await asyncio.sleep(0.05)
        reader.cancel()
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        with pytest.raises(asyncio.CancelledError):
            await queued
    finally:
        release.set()
    reading = await probe.read()
    assert reading.problem is None and reading.count == 2
    assert fake.calls["count"] == 2, "the cancelled read that had not started never ran"


async def test_a_hung_init_is_blind(nvml_probe):
    fake = FakeNvml()
    release = fake.hang("init")
    try:
        reading = await nvml_probe(fake, timeout_s=0.2).read()
    finally:
        release.set()
    assert reading.problem == "NVML did not answer within 0.2 s"
    assert not reading.external_probe_ok


async def test_start_says_whether_nvml_works(nvml_probe):
    assert await nvml_probe(FakeNvml()).start() is None
    problem = await nvml_probe(FakeNvml(init_error=NVMLError_LibraryNotFound)).start()
    assert problem == "NVML: library not found (is the NVIDIA driver installed?)"


async def test_without_nvidia_ml_py_the_reading_is_blind(nvml_probe, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    reading = await nvml_probe(None).read()
    assert "nvidia-ml-py package is not installed" in reading.problem
    assert not reading.external_probe_ok


async def test_real_nvidia_ml_py_without_a_driver_reads_blind(nvml_probe):
    reading = await nvml_probe(None).read()
    if reading.problem is None:
        pytest.skip("this machine has a working NVIDIA driver")
    assert reading.problem.startswith("NVML: ")
    assert (reading.cards, reading.external_probe_ok) == ((), False)


# -- MIG -----------------------------------------------------------------------


def mig_card(**kw) -> FakeCard:
    """A card in MIG mode: a 3g.71gb GPU instance (2) and a 1g.18gb one (9)."""
    return FakeCard(
        mig=True,
        memory_used_mib=1000,
        slices=[
            FakeSlice("3g.71gb", gpu_instance_id=2, memory_total_mib=71424, memory_used_mib=13),
            FakeSlice("1g.18gb", gpu_instance_id=9, memory_used_mib=3013, processes=[(4242, 3000)]),
        ],
        **kw,
    )


async def test_a_card_with_mig_disabled_is_whole(nvml_probe):
    reading = await nvml_probe(FakeNvml([FakeCard()])).read()
    (card,) = reading.cards
    assert (card.mig_mode, card.mig_pending, card.slices, card.utilization_pct) == (False, None, (), 0)
    assert reading.problem is None


@pytest.mark.parametrize("error", [NVMLError_NotSupported, NVMLError_FunctionNotFound])
async def test_a_card_or_driver_without_mig_is_whole_and_that_is_no_problem(nvml_probe, error):
    card = consumer_style()
    card.errors["mig_mode"] = error
    reading = await nvml_probe(FakeNvml([card])).read()
    assert (reading.cards[0].mig_mode, reading.cards[0].slices) == (False, ())
    assert reading.problem is None and reading.external_probe_ok


async def test_mig_enabled_pending_a_reset_says_so_and_the_card_is_still_whole(nvml_probe):
    reading = await nvml_probe(FakeNvml([FakeCard(mig=False, mig_pending=True)])).read()
    (card,) = reading.cards
    assert (card.mig_mode, card.mig_pending, card.slices) == (False, True, ())
    assert card.utilization_pct == 0  # still one card until the reset


async def test_mig_disabled_pending_a_reset_says_so_and_the_slices_are_still_read(nvml_probe):
    (card,) = (await nvml_probe(FakeNvml([mig_card(mig_pending=False)])).read()).cards
    assert (card.mig_mode, card.mig_pending, len(card.slices)) == (True, False, 2)


async def test_a_mig_mode_that_cannot_be_read_is_unknown_and_said(nvml_probe):
    card = FakeCard()
    card.errors["mig_mode"] = NVMLError_Unknown
    reading = await nvml_probe(FakeNvml([card])).read()
    assert (reading.cards[0].mig_mode, reading.cards[0].slices) == (None, None)
    assert reading.problem == "card 0: NVML could not read the MIG mode (Unknown Error)"
    assert reading.cards[0].utilization_pct == 0 and reading.external_probe_ok


async def test_each_mig_device_is_read_from_its_own_handle(nvml_probe):
    fake = FakeNvml([mig_card()])
    reading = await nvml_probe(fake).read()
    (card,) = reading.cards
    assert (card.mig_mode, card.mig_pending, card.memory_used_mib) == (True, None, 1000)
    assert card.slices == (
        SliceFacts(0, "MIG-5a6ef5fb-0000-5000-8000-000000000000", "3g.71gb", 2, 0, 71424, 13, ()),
        SliceFacts(
            1, "MIG-5a6ef5fb-0000-5000-8000-000000000001", "1g.18gb", 9, 0, 16384, 3013, (ProcessFacts(4242, 3000),)
        ),
    )
    assert card.processes == (ProcessFacts(4242, 3000),)
    # utilisation covers no slice in MIG mode: None, and not even asked
    assert card.utilization_pct is None and fake.calls["utilization"] == 0
    assert reading.problem is None and reading.external_probe_ok


async def test_an_empty_slot_is_skipped(nvml_probe):
    card = mig_card()
    card.slices.insert(1, None)
    reading = await nvml_probe(FakeNvml([card])).read()
    assert [s.index for s in reading.cards[0].slices] == [0, 2]
    assert reading.cards[0].slices[1].profile == "1g.18gb" and reading.problem is None


async def test_a_slot_nvml_cannot_open_is_kept_with_nothing_known(nvml_probe):
    card = mig_card()
    card.slices[1].errors["handle"] = NVMLError_Unknown
    reading = await nvml_probe(FakeNvml([card])).read()
    first, second = reading.cards[0].slices
    assert first.profile == "3g.71gb"
    assert second == SliceFacts(1, processes=None)
    assert reading.problem == "card 0: NVML could not open MIG device 1 (Unknown Error)"


@pytest.mark.parametrize("where", ["handle", "uuid", "memory_v2", "processes"])
async def test_a_gpu_found_lost_through_a_mig_device_is_a_lost_card(nvml_probe, where):
    card = mig_card()
    card.slices[1].errors[where] = NVMLError_GpuIsLost
    reading = await nvml_probe(FakeNvml([card, FakeCard()])).read()
    assert reading.cards[0].health == (health.GPU_LOST,)
    assert (reading.cards[0].mig_mode, reading.cards[0].slices, reading.cards[0].processes) == (None, None, None)
    assert reading.cards[1].health == () and reading.cards[1].memory_used_mib == 1


async def test_a_failing_mig_device_field_degrades_only_that_field(nvml_probe):
    card = mig_card()
    card.slices[0].errors["memory_v2"] = card.slices[0].errors["memory"] = NVMLError_Unknown
    card.slices[1].errors["name"] = NVMLError_NotSupported
    reading = await nvml_probe(FakeNvml([card])).read()
    first, second = reading.cards[0].slices
    assert (first.memory_total_mib, first.memory_used_mib, first.profile, first.gpu_instance_id) == (
        None,
        None,
        "3g.71gb",
        2,
    )
    assert (second.profile, second.memory_used_mib, second.uuid) == (
        None,
        3013,
        "MIG-5a6ef5fb-0000-5000-8000-000000000001",
    )
    assert reading.problem == "card 0: NVML could not read MIG device 0's memory use (Unknown Error)"


@pytest.mark.parametrize("error", [NVMLError_NotSupported, NVMLError_NoPermission])
async def test_a_slice_that_cannot_list_its_processes_gets_the_cards_by_instance_ids(nvml_probe, error):
    card = mig_card()
    card.slices[1].errors["processes"] = error
    (facts,) = (await nvml_probe(FakeNvml([card])).read()).cards
    assert facts.slices[1].processes == (ProcessFacts(4242, 3000),)  # from the card's list, by GI 9 / CI 0
    assert facts.slices[0].processes == ()


async def test_a_slice_whose_processes_cannot_be_told_any_way_is_unknown(nvml_probe):
    card = mig_card()
    card.slices[1].errors["processes"] = card.errors["processes"] = NVMLError_NoPermission
    reading = await nvml_probe(FakeNvml([card])).read()
    (facts,) = reading.cards
    assert facts.slices[1].processes is None and facts.slices[0].processes == ()
    assert facts.processes is None  # one slice unread: the card's list is not complete
    assert facts.in_use(512)  # its memory still says so
    assert reading.problem == "card 0: NVML could not read MIG device 1's processes (Insufficient Permissions)"


async def test_without_the_cards_own_list_the_slices_lists_are_the_cards(nvml_probe):
    """In MIG mode NVML answers the card's own list only to a privileged caller."""
    card = mig_card()
    card.errors["processes"] = NVMLError_NoPermission
    reading = await nvml_probe(FakeNvml([card])).read()
    assert reading.cards[0].processes == (ProcessFacts(4242, 3000),)
    assert reading.problem is None  # refused by design, and nothing is missing (a whole card's is said)


async def test_a_process_whose_instances_match_no_slice_stays_on_the_card(nvml_probe):
    card = mig_card(processes=[(777, 500, 5, 0), (778, None)])
    (facts,) = (await nvml_probe(FakeNvml([card])).read()).cards
    assert facts.processes == (ProcessFacts(4242, 3000), ProcessFacts(777, 500), ProcessFacts(778, None))
    assert [s.processes for s in facts.slices] == [(), (ProcessFacts(4242, 3000),)]


async def test_a_mig_card_whose_device_count_cannot_be_read_has_unknown_slices(nvml_probe):
    card = mig_card()
    card.errors["max_mig"] = NVMLError_Unknown
    reading = await nvml_probe(FakeNvml([card])).read()
    assert reading.cards[0].slices is None
    assert reading.cards[0].processes == (ProcessFacts(4242, 3000),)  # the card's own list still stands
    assert reading.problem == "card 0: NVML could not read the MIG device count (Unknown Error)"


async def test_a_mig_card_with_no_devices_made_yet_has_none(nvml_probe):
    (card,) = (await nvml_probe(FakeNvml([FakeCard(mig=True)])).read()).cards
    assert (card.mig_mode, card.slices, card.processes) == (True, (), ())


async def test_a_mig_card_without_a_whole_card_memory_figure_is_seen_through_its_slices(nvml_probe):
    """Some drivers give no whole-card memory in MIG mode; each slice's is still read."""
    card, unread = mig_card(), mig_card()
    card.errors["memory_v2"] = card.errors["memory"] = NVMLError_NotSupported
    unread.errors["memory_v2"] = unread.errors["memory"] = NVMLError_NotSupported
    unread.slices[1].errors["memory_v2"] = unread.slices[1].errors["memory"] = NVMLError_NotSupported
    reading = await nvml_probe(FakeNvml([card, unread])).read()
    assert reading.cards[0].memory_used_mib is None and reading.cards[0].in_use(512)  # its slice 1 holds 3013 MiB
    assert not reading.external_probe_ok
    assert reading.problem.startswith("memory use could not be read on card 1, so use from outside")
