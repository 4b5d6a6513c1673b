"""The process runtime's state file: modes, atomic writes, locking, refusing what it cannot read."""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tpnode_tui.model.errors import RuntimeUnavailable
from tpnode_tui.model.jobs import DeviceGrant, SliceMinors, SliceRef
from tpnode_tui.runtimes.statefile import JobRecord, StateFile


def record(name: str, **changes) -> JobRecord:
    base = JobRecord(
        name=name,
        run_id=name,
        gpus=(0, 1),
        kind="job",
        owner="ana",
        command=("python", "train.py", "--lr", "3e-4"),
        started_at=1_700_000_000.5,
        expires_at=None,
        pid=4242,
        pid_start_ticks=123456,
        boot_id="boot-a",
        log=f"/tmp/{name}.log",
    )
    return replace(base, **changes)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_missing_directory_or_file_means_no_jobs_and_a_read_creates_nothing(tmp_path):
    missing = tmp_path / "nowhere"
    assert StateFile(missing).read() == {}
    assert not missing.exists()
    empty_dir = tmp_path / "state"
    empty_dir.mkdir()
    assert StateFile(empty_dir).read() == {}
    assert not (empty_dir / "jobs.json").exists()


def test_first_write_creates_directory_file_and_lock_private(tmp_path):
    state_dir = tmp_path / "new" / "state"
    state = StateFile(state_dir)
    with state.transaction() as jobs:
        jobs["a"] = record("a")
    assert mode(state_dir) == 0o700
    assert mode(state.path) == 0o600
    assert mode(state.lock_path) == 0o600
    doc = json.loads(state.path.read_text())
    assert doc["version"] == 1 and list(doc["jobs"]) == ["a"]


def test_an_existing_directory_keeps_its_mode(state_dir):
    state_dir.chmod(0o755)
    with StateFile(state_dir).transaction() as jobs:
        jobs["a"] = record("a")
    assert mode(state_dir) == 0o755


def test_records_round_trip_exactly(state_dir):
    state = StateFile(state_dir)
    hostile = record(
        "b",
        command=("sh", "-c", "echo 'hi there'; $(touch /tmp/x)", "line\nbreak", "ünï\u2603"),
        kind="reservation",
        expires_at=1_700_000_600.25,
        exit_code=137,
        gpus=(),
        lease_token=41,
        cgroup="/sys/fs/cgroup/system.slice/tpnode.service/tpnode-tui.b.0a1b2c3d",
        note="killed by SIGKILL after 10 s (it did not end on SIGTERM)",
    )
    with state.transaction() as jobs:
        jobs["a"] = record("a")
        jobs["b"] = hostile
    assert StateFile(state_dir).read() == {"a": record("a"), "b": hostile}


def test_a_record_an_earlier_version_wrote_with_fence_is_read_and_rewritten_with_lease_token(state_dir):
    """The lease token was written as "fence" before it was called so: such a
    record still holds its number, and is written back under the new name only."""
    earlier = _without(record("a").to_json(), "lease_token")
    state = StateFile(state_dir)
    state.path.write_text(json.dumps({"version": 1, "jobs": {"a": dict(earlier, fence=41)}}))
    assert state.read() == {"a": record("a", lease_token=41)}
    with state.transaction() as jobs:
        jobs["b"] = record("b", lease_token=42)
    written = json.loads(state.path.read_text())["jobs"]
    assert (written["a"]["lease_token"], written["b"]["lease_token"]) == (41, 42)
    assert not any("fence" in job for job in written.values())
    assert StateFile(state_dir).read() == {"a": record("a", lease_token=41), "b": record("b", lease_token=42)}


def test_an_error_inside_a_transaction_writes_nothing(state_dir):
    state = StateFile(state_dir)
    with state.transaction() as jobs:
        jobs["a"] = record("a")
    before = state.path.read_bytes()
    with pytest.raises(KeyError):
        with state.transaction() as jobs:
            jobs["b"] = record("b")
            raise KeyError("changed my mind")
    assert state.path.read_bytes() == before


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(state_dir, monkeypatch):
    state = StateFile(state_dir)
    with state.transaction() as jobs:
        jobs["a"] = record("a")
    before = state.path.read_bytes()

    def disk_full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(RuntimeUnavailable, match="No space left on device") as err:
        with state.transaction() as jobs:
            jobs["b"] = record("b")
    assert str(state.path) in str(err.value)
    assert state.path.read_bytes() == before
    assert sorted(p.name for p in state_dir.iterdir()) == ["jobs.json", "jobs.json.lock"]


def _without(data: dict, key: str) -> dict:
    return {k: v for k, v in data.items() if k != key}


def _valid_document() -> bytes:
    return json.dumps({"version": 1, "jobs": {"a": record("a").to_json()}}).encode()


BAD_FILES = {
    "not json": b"{this is not json",
    "truncated": _valid_document()[:57],
    "empty": b"",
    "not utf-8": b"\xff\xfe{}",
    "newer version": json.dumps({"version": 2, "jobs": {}}).encode(),
    "no version": json.dumps({"jobs": {}}).encode(),
    "jobs not an object": json.dumps({"version": 1, "jobs": []}).encode(),
    "bad gpus": json.dumps({"version": 1, "jobs": {"a": dict(record("a").to_json(), gpus="0,1")}}).encode(),
    "missing pid": json.dumps(
        {"version": 1, "jobs": {"a": {k: v for k, v in record("a").to_json().items() if k != "pid"}}}
    ).encode(),
    "bad lease token": json.dumps({"version": 1, "jobs": {"a": dict(record("a").to_json(), lease_token=-1)}}).encode(),
    "bad lease token under its old name": json.dumps(
        {"version": 1, "jobs": {"a": {**_without(record("a").to_json(), "lease_token"), "fence": -1}}}
    ).encode(),
    "lease token under both names": json.dumps(
        {"version": 1, "jobs": {"a": dict(record("a").to_json(), lease_token=3, fence=3)}}
    ).encode(),
    # stopping a job kills everything in its cgroup: only one this runtime made is taken
    "foreign cgroup": json.dumps(
        {"version": 1, "jobs": {"a": dict(record("a").to_json(), cgroup="/sys/fs/cgroup/system.slice")}}
    ).encode(),
    "relative cgroup": json.dumps(
        {"version": 1, "jobs": {"a": dict(record("a").to_json(), cgroup="tpnode-tui.a.0a1b2c3d")}}
    ).encode(),
    "cgroup up a level": json.dumps(
        {"version": 1, "jobs": {"a": dict(record("a").to_json(), cgroup="/sys/fs/cgroup/../tpnode-tui.a")}}
    ).encode(),
    "unknown field": json.dumps({"version": 1, "jobs": {"a": dict(record("a").to_json(), extra=1)}}).encode(),
    "slice not a MIG device": json.dumps(
        {"version": 1, "jobs": {"a": dict(record("a").to_json(), gpus=[], slices=[{"card": 0, "uuid": "GPU-1234"}])}}
    ).encode(),
    "slice listed twice": json.dumps(
        {
            "version": 1,
            "jobs": {
                "a": dict(
                    record("a").to_json(),
                    gpus=[],
                    slices=[{"card": 0, "uuid": "MIG-a1"}, {"card": 1, "uuid": "MIG-a1"}],
                )
            },
        }
    ).encode(),
    "slice with an unknown field": json.dumps(
        {
            "version": 1,
            "jobs": {"a": dict(record("a").to_json(), gpus=[], slices=[{"card": 0, "uuid": "MIG-a1", "gi": 9}])},
        }
    ).encode(),
    "name mismatch": json.dumps({"version": 1, "jobs": {"b": record("a").to_json()}}).encode(),
}


@pytest.mark.parametrize("content", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_an_unreadable_file_is_refused_by_name_and_never_written_over(state_dir, content):
    state = StateFile(state_dir)
    state.path.write_bytes(content)
    with pytest.raises(RuntimeUnavailable) as err:
        state.read()
    assert str(state.path) in str(err.value)
    entered = False
    with pytest.raises(RuntimeUnavailable):
        with state.transaction() as jobs:
            entered = True
            jobs["z"] = record("z")
    assert not entered
    assert state.path.read_bytes() == content


def test_a_newer_version_says_to_upgrade(state_dir):
    state = StateFile(state_dir)
    state.path.write_text(json.dumps({"version": 7, "jobs": {}}))
    with pytest.raises(RuntimeUnavailable, match="version 7.*upgrade tpnode-tui"):
        state.read()


def test_a_held_lock_is_waited_for_then_reported(state_dir):
    state = StateFile(state_dir, lock_timeout_s=0.3)
    with state.transaction() as jobs:
        jobs["a"] = record("a")
    fd = os.open(state.lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # another reader: reads go on, writes wait
        assert list(state.read()) == ["a"]
        with pytest.raises(RuntimeUnavailable, match="held by another process") as err:
            with state.transaction():
                pass
        assert str(state.lock_path) in str(err.value)
        fcntl.flock(fd, fcntl.LOCK_EX)  # a writer: reads wait too
        with pytest.raises(RuntimeUnavailable, match="fuser"):
            state.read()
    finally:
        os.close(fd)
    assert list(state.read()) == ["a"]


WRITER = """
import sys
from dataclasses import replace
from pathlib import Path
from tpnode_tui.runtimes.statefile import JobRecord, StateFile
state_dir, prefix, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
template = JobRecord(name="x", run_id="x", gpus=(0,), kind="job", owner="", command=("true",),
                     started_at=0.0, expires_at=None, pid=1, pid_start_ticks=0, boot_id="b", log="")
sys.stdin.readline()  # start together
for i in range(count):
    name = f"{prefix}-{i}"
    with StateFile(state_dir).transaction() as jobs:
        jobs[name] = replace(template, name=name, run_id=name)
"""


def test_concurrent_writers_lose_no_record(state_dir):
    writers, each = 4, 12
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(state_dir), f"w{w}", str(each)],
            stdin=subprocess.PIPE,
        )
        for w in range(writers)
    ]
    for p in procs:  # release them as close together as possible
        p.stdin.write(b"go\n")
        p.stdin.close()
    for p in procs:
        assert p.wait(timeout=60) == 0
    names = set(StateFile(state_dir).read())
    assert names == {f"w{w}-{i}" for w in range(writers) for i in range(each)}


def test_a_temporary_file_left_by_a_writer_that_died_is_cleared_by_the_next_write(tmp_path):
    state = StateFile(tmp_path)
    leftover = tmp_path / ".jobs.json.abc123.tmp"
    leftover.write_text('{"half": ')
    with state.transaction() as jobs:
        jobs["a"] = record("a")
    assert not leftover.exists()
    assert list(state.read()) == ["a"]


def test_reading_a_state_dir_with_no_state_file_creates_nothing(state_dir):
    """status on a node where no job was ever recorded leaves no trace there."""
    assert StateFile(state_dir).read() == {}
    assert list(state_dir.iterdir()) == []


def test_a_slice_jobs_record_round_trips_and_one_without_slices_is_written_as_before(state_dir):
    state = StateFile(state_dir)
    on_slice = record("nb", gpus=(), slices=(SliceRef(1, "MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9", "1g.18gb"),))
    with state.transaction() as jobs:
        jobs["nb"] = on_slice
        jobs["a"] = record("a")
    assert StateFile(state_dir).read() == {"nb": on_slice, "a": record("a")}
    doc = json.loads(state.path.read_text())["jobs"]
    assert doc["nb"]["slices"] == [
        {"card": 1, "uuid": "MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9", "profile": "1g.18gb"}
    ]
    assert "slices" not in doc["a"]  # so a version that knows no slices still reads it


def test_an_old_record_without_slices_still_reads(state_dir):
    old = {k: v for k, v in record("a").to_json().items()}
    assert "slices" not in old
    (state_dir / "jobs.json").write_text(json.dumps({"version": 1, "jobs": {"a": old}}))
    assert StateFile(state_dir).read()["a"].slices == ()


def test_how_a_job_was_fenced_and_what_it_was_granted_round_trip(state_dir):
    state = StateFile(state_dir)
    granted = DeviceGrant(cards=(3,), slices=(SliceMinors(1, 9, 0),))
    fenced = record(
        "f",
        granted=granted,
        fence_mechanism="cgroup-v1",
        devices_cgroup="/sys/fs/cgroup/devices/tpnode-tui.f.0a1b2c3d",
    )
    loose = record("l", granted=DeviceGrant(unknown="the nvidia-smi probe did not read card 0's device minor"))
    loose = replace(loose, fence_problem="its cards' device files cannot be named")
    with state.transaction() as jobs:
        jobs.update(f=fenced, l=loose, a=record("a"))
    assert StateFile(state_dir).read() == {"f": fenced, "l": loose, "a": record("a")}
    doc = json.loads(state.path.read_text())["jobs"]
    assert doc["f"]["granted"] == {
        "cards": [3],
        "slices": [{"card": 1, "gpu_instance": 9, "compute_instance": 0}],
        "unknown": "",
    }
    assert not {"granted", "fence_mechanism", "fence_problem", "devices_cgroup"} & set(doc["a"])


@pytest.mark.parametrize(
    "change, says",
    [
        ({"fence_mechanism": "cgroup-v2", "fence_problem": "not root"}, "recorded both fenced and not"),
        ({"fence_mechanism": "kvm"}, "field 'fence_mechanism' is 'kvm'"),
        ({"devices_cgroup": "/sys/fs/cgroup/devices/user.slice"}, "field 'devices_cgroup'"),
        ({"devices_cgroup": "/sys/fs/cgroup/devices/tpnode-tui.x/../.."}, "field 'devices_cgroup'"),
        ({"granted": {"cards": [-1], "slices": [], "unknown": ""}}, "field 'granted'"),
        ({"granted": {"cards": [], "slices": [{"card": 1, "gpu_instance": 9}], "unknown": ""}}, "field 'granted'"),
    ],
)
def test_a_fence_that_cannot_be_understood_is_refused(state_dir, change, says):
    doc = record("a").to_json() | change
    (state_dir / "jobs.json").write_text(json.dumps({"version": 1, "jobs": {"a": doc}}))
    with pytest.raises(RuntimeUnavailable, match=re.escape(says)):
        StateFile(state_dir).read()
