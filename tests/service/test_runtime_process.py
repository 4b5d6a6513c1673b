"""The process runtime with real processes: its supervisor, liveness by pid and start, the state file."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from helpers.waiting import until, until_async
from tpnode_tui.devices.bpf import attached_programs
from tpnode_tui.model.errors import BadRequest, ConfigError, Conflict, JobNotFound, RuntimeUnavailable
from tpnode_tui.model.jobs import DeviceFence, DeviceGrant, JobSpec, RunAs
from tpnode_tui.runtimes import jobfence
from tpnode_tui.runtimes.jobprocs import cgroup_parent, process_stat
from tpnode_tui.runtimes.liveness import boot_id
from tpnode_tui.runtimes.process import ProcessRuntime
from tpnode_tui.runtimes.statefile import JobRecord, StateFile

WAIT_S = 20.0


@pytest.fixture
async def runtime(state_dir):
    rt = ProcessRuntime(state_dir, stop_timeout_s=2.0)
    yield rt
    await clear(rt)


async def clear(rt: ProcessRuntime) -> None:
    """Stop and remove every job, which also removes any cgroup a killed supervisor left."""
    for job in await rt.ps():
        if job.live:
            await rt.stop(job.name)
        await rt.remove(job.name)
    await rt.close()


def cgroup_or_unavailable() -> None:
    """Skip a test that needs jobs to get cgroups where they cannot, saying why.

    Under CI=true it fails instead where the machine is known to allow them:
    root on a kernel with cgroup v2. CI runs as root and starts its own
    dockerd, which needs a privileged machine; there, a missing or read-only
    cgroup2 means the guarantee these tests check would be silently absent.
    """
    parent, why = cgroup_parent()
    if parent is not None:
        return
    known = os.geteuid() == 0 and "cgroup2" in Path("/proc/filesystems").read_text()
    if os.environ.get("CI", "").lower() == "true" and known:
        pytest.fail(f"CI=true, root, and a kernel with cgroup v2, yet jobs get no cgroup: {why}", pytrace=False)
    pytest.skip(f"jobs get no cgroup here: {why}")


@pytest.fixture(params=[True, False], ids=["cgroup", "session-only"])
def with_cgroup(request) -> bool:
    """Run a test with a job cgroup (where the machine allows one) and without."""
    if request.param:
        cgroup_or_unavailable()
    return request.param


def job(run_id: str, *command: str, **kw) -> JobSpec:
    return JobSpec(run_id=run_id, cards=1, command=command, **kw)


async def state_of(rt: ProcessRuntime, name: str):
    return next(j for j in await rt.ps() if j.name == name)


async def wait_for_status(rt: ProcessRuntime, name: str, status: str):
    """The job's state, once its status is ``status``."""
    last: list = [None]

    async def reached():
        last[0] = await state_of(rt, name)
        return last[0] if last[0].status == status else None

    return await until_async(reached, f"{name} to be {status}", WAIT_S, show=lambda: f"it was {last[0].status}")


def log_text(path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


async def wait_for_log(path, text: str) -> str:
    """The log, once ``text`` is in it."""
    return await until_async(
        lambda: text in (content := log_text(path)) and content,
        f"{text!r} in {path}",
        WAIT_S,
        show=lambda: f"it holds {log_text(path)!r}",
    )


def descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


async def test_run_records_cards_and_sets_visible_devices_in_the_job(runtime, state_dir):
    spec = job("train-1", "sh", "-c", "env; echo READY; sleep 30", lease_token=17)
    started = await runtime.run(spec, [1, 2])
    assert started.status == "running" and started.gpus == (1, 2) and started.lease_token == 17
    log = state_dir / "logs" / "train-1.log"
    env = await wait_for_log(log, "READY")
    assert "CUDA_VISIBLE_DEVICES=1,2\n" in env
    assert "NVIDIA_VISIBLE_DEVICES=1,2\n" in env
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID\n" in env
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    [seen] = await runtime.ps()
    assert (seen.name, seen.run_id, seen.status, seen.gpus) == ("train-1", "train-1", "running", (1, 2))
    assert seen.command == ("sh", "-c", "env; echo READY; sleep 30")
    assert seen.pid == started.pid and seen.exit_code is None and seen.kind == "job"
    assert seen.lease_token == 17
    written = json.loads((state_dir / "jobs.json").read_text())["jobs"]["train-1"]
    assert written["lease_token"] == 17 and "fence" not in written  # the name before, read but never written
    assert (await runtime.start("train-1")).status == "running"
    assert runtime.describe() == f"processes recorded in {state_dir / 'jobs.json'}"


async def test_a_slice_job_is_recorded_with_its_slice_and_pointed_at_its_mig_device(runtime, state_dir):
    from tpnode_tui.model.jobs import SliceRef

    mig = SliceRef(1, "MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9", "1g.18gb")
    spec = job("nb", "sh", "-c", "env; echo READY; sleep 30", slice="1g.18gb", slices=(mig,))
    started = await runtime.run(spec, [])
    assert (started.gpus, started.slices) == ((), (mig,))
    env = await wait_for_log(state_dir / "logs" / "nb.log", "READY")
    assert f"CUDA_VISIBLE_DEVICES={mig.uuid}\n" in env and f"NVIDIA_VISIBLE_DEVICES={mig.uuid}\n" in env
    [seen] = await runtime.ps()
    assert seen.slices == (mig,)
    with pytest.raises(BadRequest, match="whole cards or MIG slices, not both"):
        await runtime.create(replace(spec, run_id="both"), [0])
    with pytest.raises(BadRequest, match="are not distinct MIG slices"):
        await runtime.create(replace(spec, run_id="odd", slices=(SliceRef(1, "GPU-1234"),)), [])


async def test_exit_code_is_recorded_with_nobody_waiting_and_stays_until_removed(runtime, state_dir):
    await runtime.run(job("fails", "sh", "-c", "echo bye; exit 3"), [0])
    ended = await wait_for_status(runtime, "fails", "exited")
    assert ended.exit_code == 3 and ended.gpus == (0,)
    assert [j.name for j in await runtime.ps()] == ["fails"]
    assert "bye" in (state_dir / "logs" / "fails.log").read_text()  # there for as long as the record
    await runtime.remove("fails")
    assert await runtime.ps() == []
    assert not (state_dir / "logs" / "fails.log").exists()  # and gone with it: logs are bounded as records are
    with pytest.raises(JobNotFound):
        await runtime.remove("fails")
    with pytest.raises(JobNotFound):
        await runtime.stop("fails")
    with pytest.raises(JobNotFound):
        await runtime.start("fails")


async def test_a_jobs_output_is_read_from_its_own_log_only_while_it_is_that_job(runtime, state_dir):
    """Pages of the log, none cutting a character; and once the job is reclaimed and
    its name another job's, the output asked for the first job is not the second's."""
    await runtime.run(job("talk", "sh", "-c", "printf 'one\\ntw\\303\\251\\n'"), [0])
    first = await wait_for_status(runtime, "talk", "exited")
    page = await runtime.output(first, None, 6)  # "one\ntw" and the first byte of an "é": cut before it
    assert (page.text, page.after, page.more, page.ended) == ("one\ntw", "6", True, True)
    rest = await runtime.output(first, page.after, 6)
    assert (rest.text, rest.after, rest.more, rest.log) == ("é\n", "9", False, str(state_dir / "logs" / "talk.log"))
    with pytest.raises(BadRequest, match="is not a place in a job's output"):
        await runtime.output(first, "-1", 6)
    await runtime.remove("talk")
    await runtime.run(job("talk", "sh", "-c", "echo second; sleep 30"), [1])
    with pytest.raises(JobNotFound, match="talk is no longer recorded: it was reclaimed"):
        await runtime.output(first, None, 100)


async def test_a_quiet_jobs_follower_gets_an_empty_page_now_and_then_so_one_gone_away_is_noticed(
    service_node, monkeypatch
):
    """A follower that went away is noticed only when its next line cannot be
    written: a job that prints nothing for hours still gets its followers an empty
    page now and then, so the agent never looks at a log for nobody until the job ends."""
    from helpers.callers import ROOT
    from tpnode_tui.port.types.jobs import LaunchRequest, LogsRequest
    from tpnode_tui.service import jobs

    monkeypatch.setattr(jobs, "FOLLOW_EVERY_S", 0.001)
    await service_node.service.launch(ROOT, LaunchRequest(cards=1, command=("sleep", "60"), run_id="quiet"))
    pages = await service_node.service.follow_logs(ROOT, LogsRequest("quiet", follow=True))
    first = await asyncio.wait_for(pages.__anext__(), WAIT_S)  # a bound: it comes after 40 quiet looks
    assert (first.text, first.ended, first.more) == ("", False, False)
    await pages.aclose()


async def test_a_running_job_cannot_be_removed_and_a_run_id_cannot_be_reused(runtime):
    first = await runtime.run(job("busy", "sleep", "30"), [0])
    with pytest.raises(Conflict, match="still running"):
        await runtime.remove("busy")
    with pytest.raises(Conflict, match="already recorded"):
        await runtime.create(job("busy", "sleep", "30"), [1])
    [still] = await runtime.ps()
    assert (still.pid, still.gpus, still.status) == (first.pid, (0,), "running")


async def test_stop_sends_one_sigterm_and_records_how_the_job_ended(runtime, state_dir):
    counter = (
        "import signal, sys, time\n"
        "got = []\n"
        "signal.signal(signal.SIGTERM, lambda *a: got.append(1))\n"
        "print('READY', flush=True)\n"
        "while not got: time.sleep(0.02)\n"
        "time.sleep(0.3)\n"
        "print('TERMS', len(got), flush=True)\n"
        "sys.exit(5)\n"
    )
    await runtime.run(job("graceful", sys.executable, "-c", counter), [0])
    log = state_dir / "logs" / "graceful.log"
    await wait_for_log(log, "READY")
    await runtime.stop("graceful")
    ended = await state_of(runtime, "graceful")
    assert (ended.status, ended.exit_code) == ("exited", 5)
    assert "TERMS 1\n" in log.read_text()


async def test_stop_kills_a_job_that_ignores_sigterm_and_records_that_it_did(state_dir, with_cgroup):
    rt = ProcessRuntime(state_dir, stop_timeout_s=0.5, cgroups=with_cgroup)
    started = await rt.run(job("stubborn", "sh", "-c", "trap '' TERM; echo READY; sleep 30"), [0])
    await wait_for_log(state_dir / "logs" / "stubborn.log", "READY")
    inside = descendants(started.pid)
    assert inside
    await asyncio.gather(rt.stop("stubborn"), rt.stop("stubborn"))  # asked twice: said once
    _, alive = psutil.wait_procs(inside, timeout=WAIT_S)
    assert alive == []
    ended = await state_of(rt, "stubborn")
    assert (ended.status, ended.exit_code) == ("exited", 137)  # as a shell shows SIGKILL
    assert ended.note == "stopped; killed by SIGKILL after 0.5 s (it did not end on SIGTERM)"
    await clear(rt)


async def test_a_killed_supervisor_means_exited_and_takes_the_command_with_it(runtime):
    started = await runtime.run(job("orphan", "sleep", "30"), [0])
    inside = await until_async(lambda: descendants(started.pid), "the command to start", WAIT_S)
    os.kill(started.pid, signal.SIGKILL)
    ended = await wait_for_status(runtime, "orphan", "exited")
    assert ended.exit_code is None
    _, alive = psutil.wait_procs(inside, timeout=WAIT_S)
    assert alive == []


def forged(name: str, pid: int, ticks: int, boot: str) -> JobRecord:
    return JobRecord(
        name=name,
        run_id=name,
        gpus=(5,),
        kind="job",
        owner="",
        command=("sleep", "1"),
        started_at=time.time(),
        expires_at=None,
        pid=pid,
        pid_start_ticks=ticks,
        boot_id=boot,
        log="",
    )


async def test_a_reused_pid_is_not_the_job_and_is_never_signalled(runtime, state_dir):
    me = os.getpid()
    ticks = process_stat(me).ticks
    with StateFile(state_dir).transaction() as jobs:
        jobs["same"] = forged("same", me, ticks, boot_id())
        # A start one tick after this process's: never negative, however young the machine.
        jobs["reused"] = forged("reused", me, ticks + 1, boot_id())
        jobs["rebooted"] = forged("rebooted", me, ticks, "another-boot")
    states = {j.name: j.status for j in await runtime.ps()}
    assert states == {"same": "running", "reused": "exited", "rebooted": "exited"}
    await runtime.stop("reused")  # would SIGTERM this very test if it trusted the pid
    await runtime.remove("reused")
    with pytest.raises(Conflict, match="still running"):
        await runtime.remove("same")
    with StateFile(state_dir).transaction() as jobs:
        del jobs["same"]  # so the fixture does not stop this test process


async def test_a_new_runtime_on_the_same_directory_sees_the_same_jobs(runtime, state_dir):
    await runtime.run(job("long", "sleep", "30"), [0, 1])
    await runtime.run(job("short", "sh", "-c", "exit 7"), [2])
    await wait_for_status(runtime, "short", "exited")
    again = ProcessRuntime(state_dir)
    assert await again.ps() == await runtime.ps()
    assert {j.name: (j.status, j.exit_code) for j in await again.ps()} == {
        "long": ("running", None),
        "short": ("exited", 7),
    }


async def test_hostile_arguments_are_stored_and_passed_literally(runtime, state_dir, tmp_path):
    marker = tmp_path / "pwned"
    hostile = [
        "with spaces",
        'it\'s "quoted"',
        f"$(touch {marker})",
        f"`touch {marker}`",
        "line\nbreak",
        "ünïcødé ☃",
        "; rm -rf /",
        "",
    ]
    echo = "import json, sys; print(json.dumps(sys.argv[1:]))"
    await runtime.run(job("args", sys.executable, "-c", echo, *hostile), [0])
    await wait_for_status(runtime, "args", "exited")
    printed = (state_dir / "logs" / "args.log").read_text().strip().splitlines()[-1]
    assert json.loads(printed) == hostile
    assert (await state_of(runtime, "args")).command == (sys.executable, "-c", echo, *hostile)
    assert not marker.exists()


@pytest.mark.parametrize("run_id", ["with space", "quote'd", "$(touch /tmp/tpn-x)", "new\nline", "ünï", "../up", ""])
async def test_a_hostile_run_id_is_refused_before_anything_runs(runtime, state_dir, run_id):
    with pytest.raises(BadRequest, match="run id"):
        await runtime.create(job(run_id, "true"), [0])
    assert await runtime.ps() == []
    assert not (state_dir / "logs").exists()


async def test_a_command_that_cannot_start_is_refused_by_the_check_and_holds_nothing(runtime, state_dir, tmp_path):
    with pytest.raises(Conflict, match="'no-such-command-tpn' not found"):
        await runtime.check(job("missing", "no-such-command-tpn", "--flag"))
    plain = tmp_path / "notes.txt"
    plain.write_text("echo hi\n")
    with pytest.raises(Conflict, match="not executable"):
        await runtime.check(job("plain", str(plain)))
    for check in (runtime.check, lambda spec: runtime.create(spec, [0])):  # the spec's rules: both refuse
        with pytest.raises(BadRequest, match="no command"):
            await check(job("empty"))
        with pytest.raises(BadRequest, match="NUL"):
            await check(job("nul", "echo", "a\0b"))
    assert await runtime.ps() == []
    # created without the check (it runs only before the allocation lock), the job itself finds out
    await runtime.run(job("missing", "no-such-command-tpn", "--flag"), [0])
    ended = await wait_for_status(runtime, "missing", "exited")
    assert ended.exit_code == 127 and not ended.live  # an ended job holds no card


async def test_a_command_that_fails_to_exec_shows_exited_127(runtime, state_dir, tmp_path):
    script = tmp_path / "broken.sh"
    script.write_text("#!/no/such/interpreter\n")
    script.chmod(0o755)
    await runtime.run(job("broken", str(script)), [0])
    ended = await wait_for_status(runtime, "broken", "exited")
    assert ended.exit_code == 127
    assert "cannot start" in (state_dir / "logs" / "broken.log").read_text()


async def test_a_reservation_holds_until_it_expires_by_itself(runtime):
    expires = time.time() + 1.0
    spec = JobSpec(run_id="rsv-1", cards=1, kind="reservation", owner="ana", expires_at=expires)
    held = await runtime.run(spec, [3])
    assert (held.status, held.kind, held.owner, held.expires_at, held.gpus) == (
        "running",
        "reservation",
        "ana",
        expires,
        (3,),
    )
    ended = await wait_for_status(runtime, "rsv-1", "exited")
    assert ended.exit_code == 0
    with pytest.raises(BadRequest, match="needs an expiry time"):
        await runtime.create(JobSpec(run_id="rsv-2", cards=1, kind="reservation"), [0])
    with pytest.raises(BadRequest, match="in the past"):
        await runtime.create(replace(spec, run_id="rsv-3", expires_at=time.time() - 5), [0])


async def test_a_corrupt_state_file_stops_launches_and_is_left_as_it_was(runtime, state_dir):
    path = state_dir / "jobs.json"
    path.write_bytes(b'{"version": 1, "jobs": {"a": {"name"')
    for attempt in (runtime.ps(), runtime.create(job("new", "true"), [0]), runtime.remove("a")):
        with pytest.raises(RuntimeUnavailable, match=str(path)):
            await attempt
    assert path.read_bytes() == b'{"version": 1, "jobs": {"a": {"name"'
    assert not (state_dir / "logs").exists()  # nothing was started either
    path.unlink()  # lets the fixture's clean-up read the directory


async def test_waiting_for_the_lock_does_not_block_the_event_loop(state_dir):
    import fcntl

    rt = ProcessRuntime(state_dir, lock_timeout_s=0.5)
    (state_dir / "jobs.json").write_text('{"version": 1, "jobs": {}}')  # a file to wait for
    lock_fd = os.open(state_dir / "jobs.json.lock", os.O_RDWR | os.O_CREAT, 0o600)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        task = asyncio.create_task(ticker())
        with pytest.raises(RuntimeUnavailable, match="held by another process"):
            await rt.ps()
        task.cancel()
    finally:
        os.close(lock_fd)
    assert ticks > 1


LAUNCHER = """
import asyncio, sys
from pathlib import Path
from tpnode_tui.model.jobs import JobSpec
from tpnode_tui.runtimes.process import ProcessRuntime
state_dir, prefix, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
sys.stdin.readline()  # start together
async def main():
    rt = ProcessRuntime(state_dir)
    for i in range(count):
        await rt.run(JobSpec(run_id=f"{prefix}-{i}", cards=1,
                             command=("sh", "-c", f"exit {10 * int(prefix[1:]) + i}")), [i])
asyncio.run(main())
"""


async def test_concurrent_launchers_and_exiting_jobs_lose_no_record_or_exit_code(runtime, state_dir):
    launchers, each = 3, 2
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            LAUNCHER,
            str(state_dir),
            f"p{n}",
            str(each),
            stdin=asyncio.subprocess.PIPE,
        )
        for n in range(launchers)
    ]
    for p in procs:
        p.stdin.write(b"go\n")
        p.stdin.close()
    for p in procs:
        assert await asyncio.wait_for(p.wait(), WAIT_S) == 0
    expected = {f"p{n}-{i}": 10 * n + i for n in range(launchers) for i in range(each)}
    for name in expected:
        await wait_for_status(runtime, name, "exited")
    assert {j.name: j.exit_code for j in await runtime.ps()} == expected


async def test_a_created_job_holds_its_cards_but_runs_nothing_until_started(runtime, state_dir, tmp_path):
    marker = tmp_path / "ran"
    created = await runtime.create(job("gated", "sh", "-c", f"touch {marker}; sleep 30"), [2])
    assert created.status == "created" and created.gpus == (2,)
    await asyncio.sleep(0.5)
    assert not marker.exists()  # the command waits for start
    [seen] = await ProcessRuntime(state_dir).ps()  # another reader sees it holding its card
    assert seen.status == "created" and seen.live
    assert (await runtime.start("gated")).status == "running"
    await until_async(marker.exists, "the command to run after start", WAIT_S)
    await runtime.stop("gated")


async def test_a_created_job_whose_launcher_goes_away_never_runs(state_dir, tmp_path):
    marker = tmp_path / "ran"
    launcher = ProcessRuntime(state_dir)
    await launcher.create(job("orphaned", "sh", "-c", f"touch {marker}"), [0])
    await launcher.close()  # as when the launching process dies before starting it
    ended = await wait_for_status(ProcessRuntime(state_dir), "orphaned", "exited")
    assert ended.exit_code == 125 and not marker.exists()


async def test_stopping_a_created_job_withdraws_it(runtime, tmp_path):
    marker = tmp_path / "ran"
    await runtime.create(job("withdrawn", "sh", "-c", f"touch {marker}"), [0])
    await runtime.stop("withdrawn")
    assert (await state_of(runtime, "withdrawn")).status == "exited"
    await runtime.remove("withdrawn")
    assert not marker.exists() and await runtime.ps() == []


async def test_a_job_from_another_pid_namespace_is_never_taken_for_ended(runtime, state_dir):
    from tpnode_tui.runtimes.statefile import StateFile

    await runtime.run(job("elsewhere", "sleep", "30"), [5])
    with StateFile(state_dir).transaction() as jobs:  # as if launched from a container
        real = jobs["elsewhere"]
        jobs["elsewhere"] = replace(real, pid_ns="pid:[1]", pid=999_999)
    [seen] = await runtime.ps()
    assert seen.status == "running" and seen.live
    assert "another PID namespace" in seen.problems[0]
    with pytest.raises(RuntimeUnavailable, match="was not signalled"):
        await runtime.stop("elsewhere")
    with StateFile(state_dir).transaction() as jobs:
        jobs["elsewhere"] = real
    await runtime.stop("elsewhere")


async def test_an_image_is_refused_by_the_process_runtime(runtime):
    with pytest.raises(BadRequest, match="TUNEPLANE_RUNTIME=docker"):
        await runtime.create(replace(job("img", "true"), image="pytorch/pytorch"), [0])
    assert await runtime.ps() == []


# ── what a job's command leaves running ends with the job ────────────────────

#: A job's command: starts the given children, prints their pids, says READY and exits 3.
#: Each child is "term" (ends on SIGTERM), "deaf" (ignores it), "group" (ignores it, in a
#: process group of its own) or "setsid" (ignores it, in a session of its own).
LEAVER = """
import os, signal, subprocess, sys
how = {"term": {}, "deaf": {}, "group": {"process_group": 0}, "setsid": {"start_new_session": True}}
kids = [subprocess.Popen(["sleep", "300"], **how[kind],
                         preexec_fn=None if kind == "term" else lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
        for kind in sys.argv[1:]]
print("PIDS", *(k.pid for k in kids), flush=True)
print("READY", flush=True)
sys.exit(3)
"""


async def leave(rt: ProcessRuntime, state_dir, name: str, *kinds: str) -> dict[str, psutil.Process]:
    """Run LEAVER as job ``name``; its children by kind, once it has printed them."""
    await rt.run(job(name, sys.executable, "-c", LEAVER, *kinds), [0])
    log = await wait_for_log(state_dir / "logs" / f"{name}.log", "READY")
    pids = next(line.split()[1:] for line in log.splitlines() if line.startswith("PIDS"))
    return {kind: psutil.Process(int(pid)) for kind, pid in zip(kinds, pids)}


def still_running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def gone(proc: psutil.Process, what: str) -> None:
    await until_async(lambda: not still_running(proc), f"{what} (pid {proc.pid}) to end", WAIT_S)


def recorded(state_dir, name: str) -> JobRecord:
    return StateFile(state_dir).read()[name]


async def test_the_job_runs_until_what_its_command_left_has_ended(state_dir, with_cgroup):
    rt = ProcessRuntime(state_dir, stop_timeout_s=60, cgroups=with_cgroup)
    kids = await leave(rt, state_dir, "leaver", "term", "deaf")
    assert bool(recorded(state_dir, "leaver").cgroup) == with_cgroup
    await gone(kids["term"], "the child that ends on SIGTERM")  # sent when the command ended
    await asyncio.sleep(0.5)
    held = await state_of(rt, "leaver")
    assert still_running(kids["deaf"])
    assert (held.status, held.exit_code, held.gpus) == ("running", None, (0,))  # its cards stay held
    kids["deaf"].kill()
    ended = await wait_for_status(rt, "leaver", "exited")
    assert (ended.exit_code, ended.note) == (3, "")  # the command's code, recorded only now
    if with_cgroup:
        assert not Path(recorded(state_dir, "leaver").cgroup).exists()  # removed afterwards
    await clear(rt)


async def test_what_ignores_sigterm_is_killed_after_the_grace_and_noted(state_dir, with_cgroup):
    rt = ProcessRuntime(state_dir, stop_timeout_s=0.5, cgroups=with_cgroup)
    kids = await leave(rt, state_dir, "deaf", "deaf", "group")
    ended = await wait_for_status(rt, "deaf", "exited")
    assert not still_running(kids["deaf"]) and not still_running(kids["group"])
    assert ended.exit_code == 3
    assert ended.note == ("2 processes it left running did not end on SIGTERM and were killed by SIGKILL after 0.5 s")
    await clear(rt)


async def test_with_a_cgroup_a_process_that_left_the_session_is_ended_too(state_dir):
    cgroup_or_unavailable()
    rt = ProcessRuntime(state_dir, stop_timeout_s=0.5)
    kids = await leave(rt, state_dir, "escaper", "setsid")
    cgroup = Path(recorded(state_dir, "escaper").cgroup)
    assert cgroup.name.startswith("tpnode-tui.escaper.")
    ended = await wait_for_status(rt, "escaper", "exited")
    assert not still_running(kids["setsid"])
    assert ended.exit_code == 3 and "killed by SIGKILL" in ended.note
    assert not cgroup.exists()
    await clear(rt)


async def test_without_a_cgroup_the_session_is_ended_but_a_setsid_escapee_is_not(state_dir):
    """The documented weaker guarantee: a process that called setsid() has left the job."""
    rt = ProcessRuntime(state_dir, stop_timeout_s=0.5, cgroups=False)
    kids = await leave(rt, state_dir, "escaper", "group", "setsid")
    assert recorded(state_dir, "escaper").cgroup == ""
    try:
        ended = await wait_for_status(rt, "escaper", "exited")
        assert not still_running(kids["group"])  # another process group, same session: ended
        assert still_running(kids["setsid"])  # out of the session: not found
        assert ended.exit_code == 3
    finally:
        kids["setsid"].kill()
    await clear(rt)


#: A job's command that starts children of every kind and then waits to be stopped.
STAYER = LEAVER.replace("sys.exit(3)", "signal.pause()")


async def test_stop_reaches_every_process_of_the_job(state_dir, with_cgroup):
    rt = ProcessRuntime(state_dir, stop_timeout_s=0.5, cgroups=with_cgroup)
    kinds = ("term", "deaf", "group", "setsid") if with_cgroup else ("term", "deaf", "group")
    await rt.run(job("stayer", sys.executable, "-c", STAYER, *kinds), [0])
    log = await wait_for_log(state_dir / "logs" / "stayer.log", "READY")
    pids = next(line.split()[1:] for line in log.splitlines() if line.startswith("PIDS"))
    kids = [psutil.Process(int(p)) for p in pids]
    await rt.stop("stayer")
    assert [k.pid for k in kids if still_running(k)] == []
    ended = await state_of(rt, "stayer")
    assert (ended.status, ended.exit_code) == ("exited", 128 + signal.SIGTERM)
    await clear(rt)


async def test_a_killed_supervisor_leaves_the_job_running_while_its_processes_are(state_dir, with_cgroup):
    rt = ProcessRuntime(state_dir, stop_timeout_s=0.5, cgroups=with_cgroup)
    await rt.run(job("headless", sys.executable, "-c", STAYER, "group"), [0])
    log = await wait_for_log(state_dir / "logs" / "headless.log", "READY")
    group = psutil.Process(int(next(line.split()[1] for line in log.splitlines() if line.startswith("PIDS"))))
    supervisor = recorded(state_dir, "headless").pid
    killed = psutil.Process(supervisor)  # taken first: once dead it may be collected at once
    killed.kill()  # its command dies with it; the child in its own group does not
    psutil.wait_procs([killed], timeout=WAIT_S)
    held = await state_of(rt, "headless")
    assert held.status == "running" and held.gpus == (0,)
    assert f"its supervisor (pid {supervisor}) was killed" in held.problems[0]
    assert str(group.pid) in held.problems[0]
    with pytest.raises(Conflict, match="still running"):
        await rt.remove("headless")
    await rt.stop("headless")
    await gone(group, "the child left by a killed supervisor")
    ended = await state_of(rt, "headless")
    assert (ended.status, ended.exit_code) == ("exited", None)  # nobody saw how the command ended
    cgroup = recorded(state_dir, "headless").cgroup
    await rt.remove("headless")
    assert not (cgroup and Path(cgroup).exists())
    await clear(rt)


async def test_a_cgroup_the_command_cannot_join_is_dropped_and_said(state_dir, tmp_path, monkeypatch):
    """The record never claims a cgroup the job is not in: it runs without, and says so."""
    import tpnode_tui.runtimes.launching as launching_module

    not_a_cgroup = tmp_path / "tpnode-tui.nojoin.00000000"  # a plain directory: no cgroup.procs
    not_a_cgroup.mkdir()
    monkeypatch.setattr(launching_module, "make_cgroup", lambda name: not_a_cgroup)
    rt = ProcessRuntime(state_dir, stop_timeout_s=0.5)
    created = await rt.create(job("nojoin", "sh", "-c", "sleep 0.3; exit 4"), [0])
    assert recorded(state_dir, "nojoin").cgroup == str(not_a_cgroup)
    await rt.start(created.name)
    ended = await wait_for_status(rt, "nojoin", "exited")
    assert ended.exit_code == 4 and recorded(state_dir, "nojoin").cgroup == ""
    log = (state_dir / "logs" / "nojoin.log").read_text()
    assert f"runs without a cgroup: it could not be moved into {not_a_cgroup}" in log
    assert not (not_a_cgroup / "cgroup.procs").exists()
    await clear(rt)


COPY_LAUNCHER = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from tpnode_tui.model.jobs import JobSpec
from tpnode_tui.runtimes.process import ProcessRuntime
asyncio.run(ProcessRuntime(sys.argv[2]).run(JobSpec("copy", 1, ("true",)), [0]))
"""


async def test_the_supervisor_runs_the_launchers_own_code_wherever_that_came_from(state_dir, tmp_path):
    """Under python -I nothing but site-packages is on the path: a launcher run
    from a checkout would otherwise start supervisors that cannot be imported,
    or that are another installed version."""
    import shutil

    import tpnode_tui

    copy = tmp_path / "checkout"
    shutil.copytree(Path(tpnode_tui.__file__).parent, copy / "tpnode_tui", ignore=shutil.ignore_patterns("__pycache__"))
    supervise = copy / "tpnode_tui" / "runtimes" / "supervise.py"
    supervise.write_text(
        supervise.read_text().replace(
            "def main(argv: Optional[list[str]] = None) -> int:\n",
            "def main(argv: Optional[list[str]] = None) -> int:\n    print('THE COPY', file=sys.stderr)\n",
        )
    )
    done = subprocess.run(
        [sys.executable, "-c", COPY_LAUNCHER, str(copy), str(state_dir)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    ended = await wait_for_status(ProcessRuntime(state_dir), "copy", "exited")
    assert ended.exit_code == 0
    assert "THE COPY" in (state_dir / "logs" / "copy.log").read_text()


# ── a caller's job runs as the caller ────────────────────────────────────────


@pytest.fixture
def shared_state():
    """A state dir every test account can reach the way the agent's is reached
    (a pytest tmp_path is root's alone), removed afterwards."""
    import shutil

    from helpers.accounts import shared_dir

    base = shared_dir("tpn-runas-")
    yield base / "state"
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
async def root_runtime(shared_state):
    rt = ProcessRuntime(shared_state, stop_timeout_s=2.0)
    yield rt
    await clear(rt)


def run_as(account) -> RunAs:
    return RunAs(uid=account.uid, gid=account.gid, groups=account.groups, user=account.name, home=str(account.home))


def owned_dir(account, path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, account.uid, account.gid)
    path.chmod(mode)
    return path


def as_caller(account, run_id: str, *command: str, cwd=None, **env) -> JobSpec:
    return JobSpec(
        run_id=run_id,
        cards=1,
        command=command,
        owner=account.name,
        uid=account.uid,
        env=tuple(account.env(**env).items()),
        cwd=str(cwd or account.home),
        run_as=run_as(account),
    )


def command_of(supervisor: int) -> psutil.Process:
    return until(lambda: descendants(supervisor), "the command to start", WAIT_S)[0]


SHOW = "id -u; id -g; id -G; pwd; env; echo READY; sleep 30"


async def test_a_callers_job_runs_as_them_with_their_environment_and_directory(
    accounts, root_runtime, shared_state, with_cgroup
):
    alice = accounts.alice
    root_runtime.cgroups = with_cgroup
    work = owned_dir(alice, alice.home / "work")
    spec = as_caller(alice, "mine", "sh", "-c", SHOW, cwd=work, HOME="/root", USER="root", TRAINING_SEED="7")
    started = await root_runtime.run(spec, [1, 2])
    log = shared_state / "logs" / "mine.log"
    lines = (await wait_for_log(log, "READY")).splitlines()
    uid, gid, groups, pwd = lines[:4]
    assert (int(uid), int(gid), pwd) == (alice.uid, alice.gid, str(work))
    assert {int(g) for g in groups.split()} == set(alice.groups) | {alice.gid}  # not root's groups
    env = dict(line.split("=", 1) for line in lines[4:] if "=" in line)
    assert env["TRAINING_SEED"] == "7"
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == (str(alice.home), alice.name, alice.name)
    assert (env["CUDA_VISIBLE_DEVICES"], env["NVIDIA_VISIBLE_DEVICES"]) == ("1,2", "1,2")
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert (started.uid, recorded(shared_state, "mine").uid) == (alice.uid, alice.uid)
    command = command_of(started.pid)
    if with_cgroup:  # joined as root, before the switch: it could not have joined after it
        cgroup = recorded(shared_state, "mine").cgroup
        assert cgroup and Path(f"/proc/{command.pid}/cgroup").read_text().strip().endswith("/" + Path(cgroup).name)
    # The command holds nothing of the launch but its output: no sheet, no gate.
    held = {os.readlink(f"/proc/{command.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{command.pid}/fd")}
    assert held == {"/dev/null", str(log)}


async def test_the_supervisor_starts_clean_and_the_callers_environment_reaches_only_the_command(
    accounts, root_runtime, shared_state
):
    """A caller's PYTHONPATH or LD_PRELOAD in the supervisor would run their code as root."""
    from tpnode_tui.runtimes.launching import SUPERVISOR_ENV

    alice = accounts.alice
    planted = owned_dir(alice, alice.home / "planted")
    marker = planted / "ran-as"
    (planted / "sitecustomize.py").write_text(
        f"import os\nwith open({str(marker)!r}, 'a') as f: f.write(f'{{os.getuid()}}\\n')\n"
    )
    secret = "tok-" + os.urandom(8).hex()
    spec = as_caller(
        alice,
        "clean",
        "sh",
        "-c",
        'echo "P=$PYTHONPATH"; echo READY',
        PYTHONPATH=str(planted),
        PYTHONSTARTUP=str(planted / "sitecustomize.py"),
        LD_PRELOAD="/nonexistent/preload.so",
        HF_TOKEN=secret,
    )
    created = await root_runtime.create(spec, [0])
    supervisor = psutil.Process(created.pid)
    await until_async(lambda: "tpnode_tui.runtimes.supervise" in supervisor.cmdline(), "the supervisor to exec", WAIT_S)
    assert supervisor.environ() == SUPERVISOR_ENV
    assert "-I" in supervisor.cmdline() and secret not in " ".join(supervisor.cmdline())
    assert supervisor.cwd() == "/"
    await root_runtime.start(created.name)
    assert f"P={planted}\n" in await wait_for_log(shared_state / "logs" / "clean.log", "READY")
    await wait_for_status(root_runtime, "clean", "exited")
    assert not marker.exists()  # no Python of the launch read the caller's PYTHONPATH as root


async def test_a_working_directory_the_caller_cannot_enter_is_refused_before_anything_is_held(
    accounts, root_runtime, shared_state
):
    alice = accounts.alice
    closed = shared_state.parent / "roots-only"
    closed.mkdir(mode=0o700)  # root enters it; alice may not
    plain = shared_state.parent / "a-file"
    plain.write_text("")
    cases = {
        closed: f"alice may not enter working directory {str(closed)!r}",
        shared_state.parent / "missing": "does not exist",
        plain: "is not a directory",
    }
    for cwd, words in cases.items():
        spec = as_caller(alice, "nowhere", "true", cwd=cwd)
        with pytest.raises(Conflict) as refused:
            await root_runtime.check(spec)
        assert str(refused.value).replace(alice.name, "alice").find(words.replace(alice.name, "alice")) >= 0, (
            refused.value
        )
    with pytest.raises(BadRequest, match="not an absolute path"):
        await root_runtime.check(replace(as_caller(alice, "rel", "true"), cwd="work"))
    assert await root_runtime.ps() == []
    assert not (shared_state / "logs").exists()


async def test_creation_runs_nothing_of_the_caller_and_a_command_that_cannot_start_is_its_first_step(
    accounts, root_runtime, shared_state
):
    """Under the allocation lock nothing of the caller's runs: a directory closed
    to them is found by the job itself, which ends with 126 and the reason in its
    log, holding nothing."""
    alice = accounts.alice
    closed = shared_state.parent / "roots-only"
    closed.mkdir(mode=0o700)
    created = await root_runtime.create(as_caller(alice, "closed", "true", cwd=closed), [0])
    assert created.status == "created"
    await root_runtime.start(created.name)
    ended = await wait_for_status(root_runtime, "closed", "exited")
    assert ended.exit_code == 126 and not ended.live
    log = (shared_state / "logs" / "closed.log").read_text()
    assert f"cannot enter the working directory {str(closed)!r} as {alice.name}" in log


async def test_the_command_is_found_and_checked_as_the_caller_with_their_path(accounts, root_runtime, shared_state):
    alice = accounts.alice
    mine = shared_state.parent / "bin"
    mine.mkdir(mode=0o755)
    tool = mine / "tpn-tool"
    tool.write_text("#!/bin/sh\necho TOOL RAN\n")
    tool.chmod(0o755)
    secret = shared_state.parent / "secret-bin"
    secret.mkdir(mode=0o700)  # only root may look inside
    hidden = secret / "tpn-hidden"
    hidden.write_text("#!/bin/sh\ntrue\n")
    hidden.chmod(0o755)
    roots = shared_state.parent / "roots-script"
    roots.write_text("#!/bin/sh\ntrue\n")
    roots.chmod(0o700)
    path = f"{mine}:{secret}:/usr/bin:/bin"
    with pytest.raises(Conflict, match=f"is not executable by {alice.name}"):
        await root_runtime.check(as_caller(alice, "r", str(roots), PATH=path))
    with pytest.raises(Conflict, match="'tpn-hidden' not found on PATH"):
        await root_runtime.check(as_caller(alice, "h", "tpn-hidden", PATH=path))
    with pytest.raises(Conflict, match="'tpn-tool' not found on PATH"):  # not on alice's own PATH
        await root_runtime.check(as_caller(alice, "t", "tpn-tool"))
    with pytest.raises(Conflict, match=r"'\./tpn-tool' not found"):  # relative to her directory
        await root_runtime.check(as_caller(alice, "t", "./tpn-tool", PATH=path))
    await root_runtime.run(as_caller(alice, "tool", "tpn-tool", PATH=path), [0])
    await root_runtime.run(as_caller(alice, "dot", "./tpn-tool", cwd=mine), [1])
    for name in ("tool", "dot"):
        assert (await wait_for_status(root_runtime, name, "exited")).exit_code == 0
        assert "TOOL RAN" in (shared_state / "logs" / f"{name}.log").read_text()


async def test_a_check_that_does_not_answer_in_time_refuses_the_launch(root_runtime, monkeypatch):
    import tpnode_tui.runtimes.runnable as runnable

    # As if its file system hung: the check stays in it (however fast the machine).
    monkeypatch.setattr(runnable, "RUNNABLE", "sleep 30")
    monkeypatch.setattr(runnable, "CHECK_TIMEOUT_S", 0.5)
    started = time.monotonic()
    with pytest.raises(Conflict, match="could not check within 0.5 s"):
        await root_runtime.check(job("slow", "true"))
    assert time.monotonic() - started < 10  # it gave up; it did not wait the check out


async def test_a_check_its_account_stops_keeps_no_thread_and_is_killed_and_collected(
    accounts, root_runtime, monkeypatch
):
    """The check is the caller's process: stopped by them, it costs the launcher
    no thread while it is waited for, and it is killed and collected after."""
    import threading

    import tpnode_tui.runtimes.runnable as runnable

    monkeypatch.setattr(runnable, "RUNNABLE", "kill -STOP $$")  # as its account may do to it
    monkeypatch.setattr(runnable, "CHECK_TIMEOUT_S", 1.0)
    threads = threading.active_count()
    checking = asyncio.ensure_future(root_runtime.check(as_caller(accounts.alice, "stopped", "true")))
    mine = psutil.Process()
    stopped = await until_async(
        lambda: [c for c in mine.children() if c.status() == psutil.STATUS_STOPPED], "the check to stop", WAIT_S
    )
    assert stopped[0].uids().real == accounts.alice.uid  # it was hers to stop
    assert threading.active_count() == threads  # waited for without a thread
    with pytest.raises(Conflict, match="could not check within 1 s whether"):
        await checking
    # that one: a supervisor an earlier test left ending as its loop closed is never collected
    await until_async(
        lambda: stopped[0].pid not in {c.pid for c in mine.children()},
        "the stopped check to be killed and collected",
        WAIT_S,
    )


async def test_a_directory_closed_after_the_check_is_never_entered_as_root(accounts, root_runtime, shared_state):
    """The command enters its directory as the caller: entered by root before the
    switch (as Popen's cwd does), a directory closed to the caller would be used."""
    alice = accounts.alice
    work = owned_dir(alice, alice.home / "closing")
    created = await root_runtime.create(as_caller(alice, "late", "pwd", cwd=work), [0])
    os.chown(work, 0, 0)
    work.chmod(0o700)
    await root_runtime.start(created.name)
    ended = await wait_for_status(root_runtime, "late", "exited")
    assert ended.exit_code == 126
    log = (shared_state / "logs" / "late.log").read_text()
    assert f"cannot enter the working directory {str(work)!r} as {alice.name}: Permission denied" in log
    assert str(work) + "\n" not in log  # pwd never ran


async def test_the_log_is_the_callers_alone_and_the_state_stays_roots(accounts, root_runtime, shared_state):
    alice, bob = accounts.alice, accounts.bob
    await root_runtime.run(as_caller(alice, "private", "sh", "-c", "echo ALICE-OUTPUT"), [0])
    await wait_for_status(root_runtime, "private", "exited")
    logs = shared_state / "logs"
    log = logs / "private.log"
    info = log.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (alice.uid, 0o600)
    for directory in (shared_state, logs):
        mode = stat.S_IMODE(directory.stat().st_mode)
        assert mode & 0o011 == 0o011 and mode & 0o044 == 0, oct(mode)  # passable, not listable
    state = (shared_state / "jobs.json").stat()
    assert (state.st_uid, stat.S_IMODE(state.st_mode)) == (0, 0o600)
    assert alice.run(["cat", str(log)], env=alice.env()).stdout == "ALICE-OUTPUT\n"
    for argv in (
        ["cat", str(log)],
        ["ls", str(logs)],
        ["ls", str(shared_state)],
        ["cat", str(shared_state / "jobs.json")],
    ):
        assert bob.run(argv, env=bob.env()).returncode != 0, argv


async def test_a_log_left_by_another_account_is_moved_aside_not_handed_on(accounts, root_runtime, shared_state):
    """A log goes with its record now; one an earlier version left behind stays its owner's."""
    alice, bob = accounts.alice, accounts.bob
    await root_runtime.run(as_caller(alice, "reused", "sh", "-c", "echo ALICE-SECRET"), [0])
    await wait_for_status(root_runtime, "reused", "exited")
    with StateFile(shared_state).transaction() as jobs:
        del jobs["reused"]  # as a reclaim of an earlier version left it: the record gone, the log kept
    await root_runtime.run(as_caller(bob, "reused", "sh", "-c", "echo BOB-OUTPUT"), [0])
    await wait_for_status(root_runtime, "reused", "exited")
    log = shared_state / "logs" / "reused.log"
    assert log.stat().st_uid == bob.uid
    assert "ALICE-SECRET" not in log.read_text() and "BOB-OUTPUT" in log.read_text()
    [aside] = [p for p in (shared_state / "logs").iterdir() if p.name.startswith("reused.log.")]
    assert aside.stat().st_uid == alice.uid and "ALICE-SECRET" in aside.read_text()


# ── extending a reservation ──────────────────────────────────────────────────


def reservation(run_id: str, seconds: float) -> JobSpec:
    return JobSpec(run_id=run_id, cards=1, kind="reservation", owner="ana", expires_at=time.time() + seconds)


async def test_an_extended_reservation_holds_its_cards_throughout_and_ends_at_the_new_time(scene_node):
    from tpnode_tui.allocator.allocator import GpuAllocator
    from tpnode_tui.config.settings import load_settings

    scene, state_dir = scene_node
    settings = load_settings({}, runtime_kind="process", state_dir=str(state_dir), probe_kind=f"simulated:{scene}")
    allocator = GpuAllocator.from_settings(settings)
    samples: list[dict[int, str]] = []
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            samples.append(dict((await allocator.occupancy()).by_job))
            await asyncio.sleep(0.02)

    try:
        launched = await allocator.reserve(2, duration_s=1.5, run_id="held")
        first_end = launched.job.expires_at
        sampler = asyncio.create_task(sample())
        await asyncio.sleep(0.5)
        extended = await allocator.extend("held", 3.0)
        assert extended.expires_at == pytest.approx(first_end + 3.0)
        assert (extended.status, extended.gpus) == ("running", launched.gpus)
        while time.time() < first_end + 1.0:  # well past the first expiry
            await asyncio.sleep(0.05)
        done.set()
        await sampler
        wanted = {card: "held" for card in launched.gpus}
        assert samples and all(s == wanted for s in samples), [s for s in samples if s != wanted][:3]
        ended = await wait_for_status(allocator.runtime, "held", "exited")
        assert time.time() >= extended.expires_at and ended.exit_code == 0
        assert recorded(state_dir, "held").expires_at == extended.expires_at
    finally:
        await allocator.close()


async def test_an_extension_landing_as_the_hold_decides_to_end_is_kept(runtime, state_dir):
    """The hold looks at its expiry, then ends it only after looking again under
    the state file's exclusive lock, and extend moves the expiry under that lock:
    an extension that lands in between is seen, never lost."""
    import fcntl

    spec = reservation("edge", 0.5)
    await runtime.run(spec, [0])
    state = StateFile(state_dir)
    fd = os.open(state.lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # the hold may look, but not yet decide
        await asyncio.sleep(max(0.0, spec.expires_at - time.time()) + 0.5)
        fcntl.flock(fd, fcntl.LOCK_EX)  # as extend does, while the hold waits to decide
        jobs, _unread = state._sorted()
        jobs["edge"] = replace(jobs["edge"], expires_at=time.time() + 60)
        state._write(jobs)
    finally:
        os.close(fd)
    await asyncio.sleep(0.5)
    kept = await state_of(runtime, "edge")
    assert (kept.status, kept.exit_code) == ("running", None)


async def test_only_a_live_reservation_of_this_version_is_extended(runtime, state_dir):
    await runtime.run(job("work", "sleep", "30"), [0])
    with pytest.raises(Conflict, match="is a job, not a reservation"):
        await runtime.extend("work", time.time() + 60)
    with pytest.raises(JobNotFound):
        await runtime.extend("nobody", time.time() + 60)
    await runtime.run(reservation("held", 60), [1])
    with pytest.raises(BadRequest, match="not a time to come"):
        await runtime.extend("held", time.time() - 1)
    with pytest.raises(BadRequest, match="not a time to come"):
        await runtime.extend("held", float("inf"))
    await runtime.stop("held")
    stopped = await state_of(runtime, "held")
    assert (stopped.status, stopped.exit_code) == ("exited", 128 + signal.SIGTERM)
    with pytest.raises(Conflict, match="has ended"):
        await runtime.extend("held", time.time() + 60)
    await runtime.run(reservation("old", 60), [2])
    with StateFile(state_dir).transaction() as jobs:  # as an earlier version recorded its sleep
        jobs["old"] = replace(jobs["old"], command=(sys.executable, "-c", "sleep", "60"))
    with pytest.raises(Conflict, match="older tpnode-tui"):
        await runtime.extend("old", time.time() + 120)


# ── the fence ────────────────────────────────────────────────────────────────


async def test_a_job_with_its_device_numbers_is_fenced_and_the_kernel_agrees(state_dir):
    cgroup_or_unavailable()
    rt = ProcessRuntime(state_dir, stop_timeout_s=0.5)
    started = await rt.run(job("fenced", "sleep", "30", granted=DeviceGrant(cards=(0,))), [0])
    assert started.device_fence == DeviceFence.by("cgroup-v2")
    record = recorded(state_dir, "fenced")
    assert (record.fence_mechanism, record.fence_problem, record.granted) == ("cgroup-v2", "", DeviceGrant(cards=(0,)))
    assert attached_programs(Path(record.cgroup))
    assert rt.node_fence() == DeviceFence.by("cgroup-v2")
    await clear(rt)


async def test_inside_the_fence_cuda_numbers_the_jobs_cards_from_0_and_outside_by_the_nodes_indices(state_dir):
    """The driver shows a fenced process only its own cards, and CUDA numbers them from 0."""
    cgroup_or_unavailable()
    for policy, cuda in (("auto", "0,1"), ("off", "2,3")):
        rt = ProcessRuntime(state_dir, stop_timeout_s=0.5, fence_policy=policy)
        spec = job(f"env-{policy}", "sh", "-c", "env; echo READY; sleep 30", granted=DeviceGrant(cards=(3, 2)))
        started = await rt.run(spec, [2, 3])
        assert started.device_fence.fenced is (policy == "auto")
        env = await wait_for_log(state_dir / "logs" / f"env-{policy}.log", "READY")
        assert f"CUDA_VISIBLE_DEVICES={cuda}\n" in env and "NVIDIA_VISIBLE_DEVICES=2,3\n" in env
        assert "CUDA_DEVICE_ORDER=PCI_BUS_ID\n" in env
        await clear(rt)


async def test_what_is_not_fenced_says_why(state_dir):
    rt = ProcessRuntime(state_dir, stop_timeout_s=0.5)
    unplaced = await rt.run(job("unplaced", "sleep", "30"), [0])
    assert unplaced.device_fence == DeviceFence.missing(jobfence.NOT_GRANTED)
    unread = DeviceGrant(unknown="the nvidia-smi probe did not read card 1's device minor")
    blind = await rt.run(job("blind", "sleep", "30", granted=unread), [1])
    assert blind.device_fence.problem == (
        "its cards' device files cannot be named: the nvidia-smi probe did not read card 1's device minor"
    )
    held = JobSpec("held", 1, kind="reservation", expires_at=time.time() + 60, granted=DeviceGrant(cards=(2,)))
    assert (await rt.run(held, [2])).device_fence == DeviceFence.missing(jobfence.RESERVATION)
    off = ProcessRuntime(state_dir, stop_timeout_s=0.5, fence_policy="off")
    loose = await off.run(job("loose", "sleep", "30", granted=DeviceGrant(cards=(3,))), [3])
    assert loose.device_fence == DeviceFence.missing(jobfence.FENCE_OFF)
    assert off.node_fence() == DeviceFence.missing(jobfence.FENCE_OFF)
    assert recorded(state_dir, "loose").cgroup == "" or not attached_programs(Path(recorded(state_dir, "loose").cgroup))
    await clear(rt)


async def test_required_refuses_a_job_that_cannot_be_fenced_and_leaves_nothing(state_dir):
    rt = ProcessRuntime(state_dir, stop_timeout_s=0.5, fence_policy="required")
    parent, _ = cgroup_parent()
    before = set(parent.iterdir()) if parent is not None else set()
    with pytest.raises(ConfigError, match=r"job 'must' cannot be fenced to its cards \(the allocator recorded no"):
        await rt.create(job("must", "sleep", "30"), [0])
    assert await rt.ps() == [] and not (state_dir / "logs" / "must.log").exists()
    if parent is not None:
        assert set(parent.iterdir()) == before  # its cgroup was removed again
    held = JobSpec("held", 1, kind="reservation", expires_at=time.time() + 60)
    assert not (await rt.run(held, [1])).device_fence.fenced  # a reservation runs nothing: not refused
    await clear(rt)


async def test_a_command_that_cannot_join_the_cgroup_that_fences_it_does_not_run(state_dir, tmp_path):
    """The record says fenced from the moment the job is created; a command that
    could not be put into that cgroup would run unfenced under it, so it does not run."""
    cgroup_or_unavailable()
    rt = ProcessRuntime(state_dir, stop_timeout_s=0.5)
    marker = tmp_path / "ran"
    created = await rt.create(job("unjoined", "touch", str(marker), granted=DeviceGrant(cards=(0,))), [0])
    assert created.device_fence.fenced
    Path(recorded(state_dir, "unjoined").cgroup).rmdir()  # gone before the command could join it
    await rt.start(created.name)
    ended = await wait_for_status(rt, "unjoined", "exited")
    assert ended.exit_code == 126 and not marker.exists()
    log = (state_dir / "logs" / "unjoined.log").read_text()
    assert "which fences it to its cards" in log
    await clear(rt)
