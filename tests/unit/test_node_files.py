"""The node's own files besides the state file: the log and the agent's queue.

The log never grows without bound and never loses the newest lines to a
crash mid-write; the queue survives its writer and refuses to be read as
empty when it cannot be understood.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace

import pytest

from helpers.callers import ALICE
from tpnode_tui.model.errors import BadRequest, RuntimeUnavailable
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.state.nodelog import LOG_FILE, NodeLog
from tpnode_tui.state.queue import QUEUE_FILE, REJECTED_FILE, FileQueue, MemoryQueue, QueueEntry

#: alice as the agent names her, her groups and pid too: all of it must survive the queue file
ASKER = replace(ALICE, groups=(5001, 27), pid=4242)


def entry(run_id: str, **asked) -> QueueEntry:
    asked.setdefault("cards", 2)
    return QueueEntry(
        LaunchRequest(
            run_id=run_id,
            command=("python", "train.py"),
            env=(("HF_TOKEN", "secret"), ("PATH", "/usr/bin")),
            cwd="/home/alice",
            queue=True,
            **asked,
        ),
        ASKER,
        1000.0,
    )


# ── the log ──────────────────────────────────────────────────────────────────


def test_the_log_is_rotated_at_its_size_and_keeps_a_few_old_files(tmp_path):
    log = NodeLog(tmp_path, max_bytes=2000, keep=3)
    for n in range(400):
        log.append("action", f"entry {n}", n=n)
    sizes = [p.stat().st_size for p in log.files()]
    assert len(sizes) == 4 and all(size <= 2000 for size in sizes), sizes
    kept = [e["n"] for e in log.read()]
    assert kept == sorted(kept) and kept[-1] == 399  # oldest first, the newest kept
    assert 0 not in kept  # the oldest were dropped with the oldest file
    assert stat.S_IMODE((tmp_path / LOG_FILE).stat().st_mode) == 0o600


def test_a_line_cut_short_by_a_crash_is_skipped_and_the_rest_read(tmp_path):
    log = NodeLog(tmp_path)
    log.append("action", "first")
    with open(tmp_path / LOG_FILE, "a") as f:
        f.write('{"time": 12, "kind": "act')  # the writer died here
        f.write("\n")
    log.append("action", "second")
    assert [e["message"] for e in log.read()] == ["first", "second"]


def test_reading_filters_by_time_and_kind(tmp_path):
    log = NodeLog(tmp_path)
    log.append("action", "launched")
    log.append("health", "XID 79")
    assert [e["message"] for e in log.read(kinds={"action"})] == ["launched"]
    assert list(log.read(since=4e9)) == []


def test_a_log_that_cannot_be_written_never_stops_what_it_records(tmp_path, caplog):
    missing = NodeLog(tmp_path / "no" / "such" / "dir")
    assert missing.append("action", "still answered")["message"] == "still answered"
    assert not (tmp_path / "no").exists() and caplog.records == []  # no state dir made, nothing said
    (tmp_path / LOG_FILE).mkdir()  # something in the way of the file itself
    broken = NodeLog(tmp_path)
    for _ in range(3):
        assert broken.append("action", "still answered")["message"] == "still answered"
    assert [r.levelname for r in caplog.records] == ["WARNING"]  # said once


def test_one_accounts_flood_pushes_out_only_its_own_older_entries(tmp_path):
    log = NodeLog(tmp_path, max_bytes=4000, account_max_bytes=2000, keep=2)
    log.append("action", "alice placed a1", account=5001, uid=5001)
    log.append("drain", "card 3 drained by root: fan")
    log.append("action", "root drained card 3", uid=0)
    for n in range(500):  # bob refused, again and again
        log.append("action", f"refused {n}: " + "x" * 100, account=5002, uid=5002)
    kept = [e["message"] for e in log.read()]
    assert {"alice placed a1", "card 3 drained by root: fan", "root drained card 3"} <= set(kept)
    bobs = [m for m in kept if m.startswith("refused")]
    assert bobs[-1].startswith("refused 499") and "refused 0: " + "x" * 100 not in bobs  # only his own went
    assert all(p.stat().st_size <= 2000 for p in log.files([5002]) if p.parent.name == "accounts")
    assert len([p for p in log.files([5002]) if p.parent.name == "accounts"]) == 3  # the file and two rotated
    times = [e["time"] for e in log.read()]
    assert times == sorted(times) and len(set(times)) == len(times)  # merged by time, each once
    assert [e["message"] for e in log.read(accounts=[5001])] == [
        "alice placed a1",
        "card 3 drained by root: fan",
        "root drained card 3",
    ]  # alice's shelf and the node's: none of bob's read for her
    assert stat.S_IMODE((tmp_path / "accounts").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "accounts" / "5002.jsonl").stat().st_mode) == 0o600


def test_a_page_of_the_log_ends_where_the_next_begins(tmp_path):
    log = NodeLog(tmp_path)
    for n in range(10):
        log.append("action", f"entry {n}", account=5001 if n % 2 else None)
    everything = list(log.read())
    newest = list(log.read(before=everything[6]["time"]))
    assert [e["message"] for e in newest] == [f"entry {n}" for n in range(6)]


def test_an_oversized_line_is_read_back_cut_short(tmp_path):
    log = NodeLog(tmp_path)
    with open(tmp_path / LOG_FILE, "w") as f:  # as an older version, or a hand, may have written it
        f.write(json.dumps({"time": 1.0, "kind": "action", "message": "m" * 100_000, "cards": list(range(500))}) + "\n")
    [entry] = log.read()
    assert len(entry["message"]) == 1000 and entry["message"].endswith("…") and len(entry["cards"]) == 64


# ── the agent's queue ────────────────────────────────────────────────────────


def test_a_queued_launch_survives_its_writer_with_everything_it_needs_to_run(tmp_path):
    FileQueue(tmp_path).add(entry("t1"))
    FileQueue(tmp_path).add(entry("t2", cards=1))
    again = FileQueue(tmp_path).entries()  # a new process: nothing kept in memory
    assert [e.run_id for e in again] == ["t1", "t2"]
    assert again[0] == entry("t1")
    assert stat.S_IMODE((tmp_path / QUEUE_FILE).stat().st_mode) == 0o600  # it holds environments


def test_the_queue_keeps_its_order_and_refuses_a_run_id_twice(tmp_path):
    for queue in (FileQueue(tmp_path), MemoryQueue()):
        for run_id in ("a", "b", "c"):
            queue.add(entry(run_id))
        with pytest.raises(BadRequest, match="already queued"):
            queue.add(entry("b"))
        assert queue.remove("b") is not None and queue.remove("b") is None
        assert [e.run_id for e in queue.entries()] == ["a", "c"]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        '{"version": 1}',
        '{"version": 7, "launches": {}}',
        '{"version": 1, "launches": []}',
    ],
)
def test_a_queue_file_that_cannot_be_understood_is_refused_never_read_as_empty(tmp_path, text):
    (tmp_path / QUEUE_FILE).write_text(text)
    queue = FileQueue(tmp_path)
    with pytest.raises(RuntimeUnavailable, match="launch queue .* people's queued launches would be dropped"):
        queue.entries()
    with pytest.raises(RuntimeUnavailable):
        queue.add(entry("t3"))
    assert (tmp_path / QUEUE_FILE).read_text() == text  # left as it was


def test_a_record_that_cannot_be_read_is_set_aside_once_and_the_rest_are_read(tmp_path):
    FileQueue(tmp_path).add(entry("first"))
    FileQueue(tmp_path).add(entry("last"))
    doc = json.loads((tmp_path / QUEUE_FILE).read_text())
    bad = json.loads(json.dumps(doc["launches"]["first"]))
    bad["request"].update(run_id="poison", slice="not a profile", cards=1)
    doc["launches"] = {"first": doc["launches"]["first"], "poison": bad, "last": doc["launches"]["last"]}
    (tmp_path / QUEUE_FILE).write_text(json.dumps(doc))
    told = []
    queue = FileQueue(tmp_path)
    queue.on_set_aside = told.append
    assert [e.run_id for e in queue.entries()] == ["first", "last"]  # the rest, in their order
    assert [(r.key, r.path.name) for r in told] == [("poison", REJECTED_FILE)]
    assert "'not a profile' is not a MIG profile" in told[0].why
    kept = json.loads((tmp_path / REJECTED_FILE).read_text())["set_aside"]
    assert [(k["key"], k["record"]) for k in kept] == [("poison", bad)]  # kept as it was written, with why
    assert stat.S_IMODE((tmp_path / REJECTED_FILE).stat().st_mode) == 0o600
    assert list(json.loads((tmp_path / QUEUE_FILE).read_text())["launches"]) == ["first", "last"]
    assert queue.problem() == (
        f"1 queued launch could not be read back and was set aside in {tmp_path / REJECTED_FILE} "
        "(see tpnode-tui events); the queue goes on"
    )
    queue.add(entry("after"))
    assert [e.run_id for e in FileQueue(tmp_path).entries()] == ["first", "last", "after"]
    assert len(told) == 1  # said once: it is no longer in the queue


def test_a_temporary_file_left_by_a_dead_writer_is_cleared_on_the_next_write(tmp_path):
    stale = tmp_path / f".{QUEUE_FILE}.abc.tmp"
    stale.write_text("half")
    FileQueue(tmp_path).add(entry("t1"))
    assert not stale.exists()
    assert json.loads((tmp_path / QUEUE_FILE).read_text())["launches"]["t1"]["caller"]["user"] == "alice"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
