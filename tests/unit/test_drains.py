"""Drained cards: never handed out, kept in the state dir, refused when unreadable.

The allocator here has the in-memory runtime and probe of tests/helpers/fakes.py, the
real flock lock and the real drain file; the service's drain and undrain
rules (operators only, refused while the card reports a problem) are in
tests/unit/test_triage_service.py.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import replace

import pytest

from helpers.fakes import StaticProbe
from tpnode_tui import NoCapacity
from tpnode_tui.model.errors import RuntimeUnavailable
from tpnode_tui.model.jobs import JobSpec
from tpnode_tui.model.views import Drain
from tpnode_tui.port.wire.snapshot import snapshot_from_json, snapshot_to_json
from tpnode_tui.state.drains import DrainStore


@pytest.fixture
def allocator(make_allocator):
    return make_allocator(probe=StaticProbe(cards=4), lock_retry_ms=10)


def drain(card: int, reason: str = "fan replaced tomorrow", source: str = "operator", xid=None) -> Drain:
    return Drain(card=card, reason=reason, by="root", at=time.time(), source=source, xid=xid)


async def test_a_drained_card_is_never_handed_out_and_counts_as_busy(allocator):
    allocator.drains.drain(drain(0))
    occ = await allocator.occupancy()
    assert occ.drained == {0: "fan replaced tomorrow"} and 0 in occ.busy
    assert occ.free == [1, 2, 3]
    assert "1 drained (card 0)" in occ.explain()
    launched = await allocator.launch(JobSpec(run_id="j1", cards=3, command=("t",)))
    assert launched.gpus == (1, 2, 3)
    with pytest.raises(NoCapacity, match="1 drained"):
        await allocator.launch(JobSpec(run_id="j2", cards=1, command=("t",)))
    snap = await allocator.snapshot()
    card = snap.cards[0]
    assert (card.state, card.reason, card.drain.by, card.drain.source) == (
        "drained",
        "fan replaced tomorrow",
        "root",
        "operator",
    )


async def test_a_job_on_a_card_drained_under_it_keeps_it_until_it_ends(allocator):
    await allocator.launch(JobSpec(run_id="j1", cards=1, command=("t",)))
    allocator.drains.drain(drain(0, "XID 48: double bit ECC error; reset the GPU", "xid", 48))
    snap = await allocator.snapshot()
    card = snap.cards[0]
    assert card.state == "job" and card.run_id == "j1" and card.drain.xid == 48
    assert "drained: XID 48" in card.warning and "not handed out again when j1 ends" in card.warning
    assert snap.occupancy.drained == {}  # a held card is not deducted twice
    await allocator.stop("j1")
    card = (await allocator.snapshot()).cards[0]
    assert card.state == "drained" and card.reason.startswith("XID 48")
    assert 0 not in (await allocator.occupancy()).free


async def test_drains_survive_a_new_allocator_and_are_kept_0600(allocator, make_allocator):
    allocator.drains.drain(drain(2))
    other = make_allocator(probe=StaticProbe(cards=4), settings=allocator.settings)
    assert (await other.occupancy()).drained == {2: "fan replaced tomorrow"}
    assert stat.S_IMODE(os.stat(allocator.drains.path).st_mode) == 0o600


async def test_a_second_drain_keeps_the_first_reason_and_undrain_returns_it(allocator):
    first, new = allocator.drains.drain(drain(1, "XID 79: GPU has fallen off the bus; reboot the node", "xid", 79))
    kept, again = allocator.drains.drain(drain(1, "operator says so"))
    assert new and not again and kept == first
    assert allocator.drains.undrain(1) == first
    assert allocator.drains.undrain(1) is None
    assert (await allocator.occupancy()).free == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "",
        json.dumps({"version": 1, "cards": {"x": {"reason": "r", "by": "b", "at": 1}}}),
        json.dumps({"version": 1, "cards": {"1": {"reason": "r", "by": "b", "at": 1, "source": "cosmic rays"}}}),
        json.dumps({"version": 9, "cards": {}}),
    ],
)
async def test_a_corrupt_drain_file_is_refused_and_then_no_card_is_handed_out(allocator, text):
    allocator.drains.store.ensure_dir()
    allocator.drains.path.write_text(text)
    with pytest.raises(RuntimeUnavailable, match="drain file"):
        await allocator.occupancy()
    with pytest.raises(RuntimeUnavailable, match="every card taken out of service would be handed out"):
        await allocator.launch(JobSpec(run_id="j1", cards=1, command=("t",)))
    with pytest.raises(RuntimeUnavailable):
        allocator.drains.drain(drain(0))
    assert allocator.drains.path.read_text() == text  # left untouched for repair
    assert allocator.runtime.jobs == {}


async def test_drains_travel_in_the_snapshot_document(allocator):
    await allocator.launch(JobSpec(run_id="j1", cards=1, command=("t",)))
    allocator.drains.drain(drain(0, "XID 48: double bit ECC error; reset the GPU", "xid", 48))
    allocator.drains.drain(drain(3))
    snap = await allocator.snapshot()
    doc = json.loads(json.dumps(snapshot_to_json(snap)))
    assert doc["drained"] == {"3": "fan replaced tomorrow"}
    assert doc["cards"][3]["state"] == "drained" and doc["cards"][3]["drain"]["source"] == "operator"
    assert doc["cards"][0]["drain"]["xid"] == 48
    assert snapshot_from_json(doc) == snap


async def test_a_drained_card_that_is_also_unhealthy_is_drained_with_the_problem_as_warning(allocator):
    allocator.probe.set_card(1, health=("GPU is lost (fell off the bus; needs a reset or reboot)",))
    allocator.drains.drain(drain(1, "XID 79: GPU has fallen off the bus; reboot the node", "xid", 79))
    snap = await allocator.snapshot()
    card = snap.cards[1]
    assert card.state == "drained" and "GPU is lost" in card.warning
    assert snap.occupancy.unhealthy == {} and snap.occupancy.drained.keys() == {1}
    assert "1 unhealthy" not in snap.explain


def test_a_drain_file_from_another_store_reads_the_same(tmp_path):
    a, b = DrainStore(tmp_path), DrainStore(tmp_path)
    a.drain(replace(drain(5), at=1000.0))
    assert b.read() == {5: Drain(5, "fan replaced tomorrow", "root", 1000.0, "operator", None)}
