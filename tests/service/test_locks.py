"""The allocation lock, against real processes and a real redis-server.

Cross-process behaviour is checked with real subprocesses (tests/helpers/lock_worker.py):
the counter they share loses updates the moment two of them are inside at once,
and ``kill -9`` is the real signal, not a simulated crash.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis as redis_sync

from helpers.paths import LOCK_WORKER
from helpers.services import redis_or_unavailable
from helpers.waiting import until_async
from tpnode_tui.config.settings import load_settings
from tpnode_tui.locks import (
    LEASE_TOKEN_FILE,
    LOCK_FILE,
    REDIS_KEY,
    AllocationLock,
    Holder,
    check_allocation_safety,
    make_lock,
)
from tpnode_tui.locks.flock import short_command
from tpnode_tui.model.errors import ConfigError, LockWaitTimeout
from tpnode_tui.text.printable import printable

WORKERS = 8
TIMES = 3


def _lock(state_dir: Path, redis_url: str | None = None, lease_ms: int = 120_000) -> AllocationLock:
    return make_lock(
        load_settings({}, state_dir=state_dir, lock_redis_url=redis_url, lock_lease_ms=lease_ms, lock_retry_ms=20)
    )


def _env(state_dir: Path, redis_url: str | None = None, lease_ms: int = 120_000) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(TUNEPLANE_STATE_DIR=str(state_dir), TUNEPLANE_LOCK_RETRY_MS="10", TUNEPLANE_LOCK_LEASE_MS=str(lease_ms))
    if redis_url:
        env["TUNEPLANE_REDIS_URL"] = redis_url
    return env


async def _spawn(env: dict[str, str], *args: str, stdin: int = asyncio.subprocess.DEVNULL):
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(LOCK_WORKER),
        *args,
        env=env,
        stdin=stdin,
        stdout=asyncio.subprocess.PIPE,
    )


async def _line(proc: asyncio.subprocess.Process, timeout: float = 15) -> str:
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    assert line, f"worker {proc.pid} ended without answering (exit {await proc.wait()})"
    return line.decode().strip()


async def _take(lock: AllocationLock) -> int:
    async with lock.hold() as hold:
        return hold.lease_token


async def _run_counters(env: dict[str, str], counter: Path, mode: str) -> list[tuple[int, int]]:
    """Start the workers together and return every (lease token, counter read) they printed."""
    counter.write_text("0")
    procs = [await _spawn(env, mode, str(counter), str(TIMES), stdin=asyncio.subprocess.PIPE) for _ in range(WORKERS)]
    try:
        for p in procs:
            assert await _line(p) == "ready"
        for p in procs:
            p.stdin.write(b"go\n")
            await p.stdin.drain()
            p.stdin.close()
        seen = []
        for p in procs:
            for _ in range(TIMES):
                token, read = (await _line(p)).split()
                seen.append((int(token), int(read)))
            assert await asyncio.wait_for(p.wait(), 15) == 0
        return seen
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()


@pytest.fixture(params=["flock", pytest.param("redis", marks=pytest.mark.redis)])
def lock_env(request, state_dir):
    """Worker environment for each backend."""
    if request.param == "redis":
        return _env(state_dir, request.getfixturevalue("redis_url"))
    return _env(state_dir)


# ── in one process ───────────────────────────────────────────────────────────


async def test_tasks_of_one_process_take_turns(state_dir):
    lock = _lock(state_dir)
    events: list[tuple[str, int, int]] = []

    async def allocate(i: int) -> None:
        async with lock.hold() as hold:
            events.append(("in", i, hold.lease_token))
            await asyncio.sleep(0.01)
            events.append(("out", i, hold.lease_token))

    tasks = [asyncio.create_task(allocate(i)) for i in range(5)]
    await until_async(lambda: lock.waiting is not None, "a second task waiting", 5)
    assert "in this process" in lock.waiting
    await asyncio.wait_for(asyncio.gather(*tasks), 10)

    assert lock.waiting is None
    assert [e[0] for e in events] == ["in", "out"] * 5
    assert all(events[k][1:] == events[k + 1][1:] for k in range(0, 10, 2))
    tokens = [e[2] for e in events[::2]]
    assert tokens == sorted(set(tokens))


async def test_each_account_takes_its_turn_so_many_requests_of_one_never_queue_ahead_of_another(state_dir):
    """Bob's five allocations wait in his own line: alice, arriving after all of
    them, is next once bob's first is out, not sixth."""
    lock = _lock(state_dir)
    order: list[str] = []
    bob_inside = asyncio.Event()
    let_go = asyncio.Event()

    async def allocate(name: str, uid: int) -> None:
        async with lock.hold(Holder(name, uid, f"launch of {name}")):
            order.append(name)
            if name == "bob-0":
                bob_inside.set()
                await let_go.wait()

    bobs = [asyncio.create_task(allocate(f"bob-{i}", 1001)) for i in range(5)]
    await asyncio.wait_for(bob_inside.wait(), 5)
    for _ in range(3):
        await asyncio.sleep(0)  # bob's others are in his line
    alice = asyncio.create_task(allocate("alice", 1002))
    await until_async(lambda: "held by bob-0's launch of bob-0 since " in (lock.waiting or ""), "alice to wait", 5)
    let_go.set()
    await asyncio.wait_for(asyncio.gather(alice, *bobs), 10)
    assert order == ["bob-0", "alice", "bob-1", "bob-2", "bob-3", "bob-4"]
    assert lock._turns == {}  # no line is kept once nobody of the account is at the lock


async def test_whoever_gives_up_waiting_is_told_whose_allocation_held_the_lock(state_dir):
    lock = _lock(state_dir)
    patient = make_lock(load_settings({}, state_dir=state_dir, lock_retry_ms=20), max_wait_s=0.2)
    # one process, two locks, as the agent has one: the second waits behind the first's holder
    patient._local, patient._holder = lock._local, None
    inside = asyncio.Event()
    release = asyncio.Event()

    async def bobs_launch() -> None:
        async with lock.hold(Holder("bob\x1b[2J", 1001, "launch of b-1")):
            inside.set()
            await release.wait()

    held = asyncio.create_task(bobs_launch())
    await asyncio.wait_for(inside.wait(), 5)
    patient._holder = lock._holder
    with pytest.raises(LockWaitTimeout) as gave_up:
        async with patient.hold(Holder("alice", 1002, "reservation of a-1")):
            pass
    said = str(gave_up.value)
    assert "held by bob\\x1b[2J's launch of b-1 since " in said, said  # named, and made printable
    assert "\x1b" not in said
    release.set()
    await held


async def test_the_lock_is_given_back_when_the_body_fails_or_a_waiter_is_cancelled(state_dir):
    first, other = _lock(state_dir), _lock(state_dir)  # two locks: two flock holders
    with pytest.raises(ValueError):
        async with first.hold():
            raise ValueError("the launch failed")
    assert await asyncio.wait_for(_take(other), 5) > 0

    async with first.hold():
        waiter = asyncio.create_task(_take(other))
        await until_async(lambda: other.waiting is not None, "the second lock waiting", 5)
        assert f"pid {os.getpid()}" in other.waiting  # the kernel names the holder
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert other.waiting is None
    assert await asyncio.wait_for(_take(other), 5) > 0


# ── across processes ─────────────────────────────────────────────────────────


async def test_processes_never_share_the_critical_section(lock_env, tmp_path):
    seen = await _run_counters(lock_env, tmp_path / "counter", "count")

    assert int((tmp_path / "counter").read_text()) == WORKERS * TIMES
    # Ordered by lease token, the reads are 0, 1, 2, ...: the tokens follow the order
    # in which the processes really held the lock, and never repeat.
    assert [read for _, read in sorted(seen)] == list(range(WORKERS * TIMES))
    assert len({token for token, _ in seen}) == WORKERS * TIMES


async def test_without_the_lock_the_counter_loses_updates(state_dir, tmp_path):
    """The control for the test above: its workers really do overlap."""
    await _run_counters(_env(state_dir), tmp_path / "counter", "nolock")
    assert int((tmp_path / "counter").read_text()) < WORKERS * TIMES


async def test_a_killed_flock_holder_frees_the_lock_at_once(state_dir):
    holder = await _spawn(_env(state_dir), "hold")
    try:
        held_token = int((await _line(holder)).split()[1])
        lock = _lock(state_dir)
        taker = asyncio.create_task(_take(lock))
        await until_async(lambda: lock.waiting is not None, "the lock refused while held", 5)
        assert f"held by pid {holder.pid}" in lock.waiting
        assert not taker.done()

        holder.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(taker, 5) > held_token
    finally:
        if holder.returncode is None:
            holder.kill()
        await holder.wait()


async def test_a_child_forked_by_the_holder_does_not_keep_the_lock(state_dir):
    holder = await _spawn(_env(state_dir), "hold-fork")
    child = None
    try:
        _, held_token, child = (await _line(holder)).split()
        holder.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(_take(_lock(state_dir)), 5) > int(held_token)
        os.kill(int(child), 0)  # the child is still alive: it let go of its copy
    finally:
        if holder.returncode is None:
            holder.kill()
        await holder.wait()
        if child:
            os.kill(int(child), signal.SIGKILL)


@pytest.mark.redis
async def test_a_killed_redis_holder_frees_the_lock_when_its_lease_runs_out(state_dir, redis_url):
    lease_ms = 1200
    holder = await _spawn(_env(state_dir, redis_url, lease_ms), "hold")
    client = redis_sync.Redis.from_url(redis_url)
    try:
        held_token = int((await _line(holder)).split()[1])
        holder_id = client.get(REDIS_KEY)
        lock = _lock(state_dir, redis_url, lease_ms)
        taker = asyncio.create_task(_take(lock))
        await until_async(lambda: lock.waiting is not None, "the lease refused while held", 5)
        assert f"held by pid {holder.pid}" in lock.waiting
        # Longer than a lease: the holder's renewals keep it.
        await asyncio.sleep(2 * lease_ms / 1000)
        assert not taker.done()
        assert client.get(REDIS_KEY) == holder_id

        holder.send_signal(signal.SIGKILL)
        await holder.wait()
        # Nobody released it: the dead holder's lease is still there, running out.
        assert client.get(REDIS_KEY) == holder_id
        assert client.pttl(REDIS_KEY) > 0
        assert await asyncio.wait_for(taker, 10) > held_token
        assert client.get(REDIS_KEY) is None  # taken and given back by the new holder
        await lock.close()
    finally:
        client.close()
        if holder.returncode is None:
            holder.kill()
            await holder.wait()


# ── Redis trouble ────────────────────────────────────────────────────────────


@pytest.mark.redis
async def test_allocation_waits_while_redis_is_down(state_dir, redis_server, redis_url, caplog):
    caplog.set_level(logging.INFO, logger="tpnode_tui.locks")
    lock = _lock(state_dir, redis_url)
    redis_server.stop()
    try:
        taker = asyncio.create_task(_take(lock))
        await until_async(lambda: lock.waiting is not None, "waiting for Redis", 5)
        assert lock.waiting.startswith(f"Redis at {redis_url} unreachable (")
        await asyncio.sleep(0.3)  # many retries at 20 ms
        assert not taker.done()
        redis_server.start()
        assert await asyncio.wait_for(taker, 10) > 0
    finally:
        if redis_server.proc is None:
            redis_server.start()
        await lock.close()

    outage = [r for r in caplog.records if "cannot be reached" in r.getMessage()]
    # once per outage, not per retry; at info, since whoever waits says it where it is read
    assert [r.levelno for r in outage] == [logging.INFO]
    assert any("answers again" in r.getMessage() for r in caplog.records)
    assert lock.waiting is None


@pytest.mark.redis
async def test_a_deleted_lease_is_reported_lost(state_dir, redis_url, caplog):
    lock = _lock(state_dir, redis_url, lease_ms=300)
    client = redis_sync.Redis.from_url(redis_url)
    try:
        async with lock.hold() as hold:
            assert not hold.lost()
            client.delete(REDIS_KEY)
            await until_async(hold.lost, "the renewer noticing the lease is gone", 5)
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert any("lost the allocation lock lease" in r.getMessage() for r in errors)
    finally:
        client.close()
        await lock.close()


@pytest.mark.redis
async def test_a_lease_that_cannot_be_renewed_in_time_counts_as_lost(state_dir, redis_server, redis_url, caplog):
    lock = _lock(state_dir, redis_url, lease_ms=600)
    try:
        async with lock.hold() as hold:
            redis_server.stop()
            await until_async(hold.lost, "the lease running out unrenewed", 5)
            assert any("could not be reached to renew" in r.getMessage() for r in caplog.records)
    finally:
        if redis_server.proc is None:
            redis_server.start()
        await lock.close()


@pytest.mark.redis
async def test_lease_tokens_keep_rising_when_redis_forgets_its_counter(state_dir, redis_url):
    lock = _lock(state_dir, redis_url)
    client = redis_sync.Redis.from_url(redis_url)
    try:
        first = await _take(lock)
        second = await _take(lock)
        client.flushall()  # what a restart without persistence does
        third = await _take(lock)
        assert first < second < third
    finally:
        client.close()
        await lock.close()


@pytest.mark.redis
async def test_password_protected_redis(state_dir, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    password, wrong = "s3cret-Pass-41", "wr0ng-Pass-97"
    server = redis_or_unavailable(tmp_path, password)
    locks = []
    try:
        good = _lock(state_dir, server.url)
        locks.append(good)
        assert password not in good.description and ":***@" in good.description
        assert await asyncio.wait_for(_take(good), 10) > 0

        for url, said in [
            (server.url.replace(password, wrong), "refused the password"),
            (server.url.replace(f":{password}@", ""), "requires a password"),
        ]:
            bad = _lock(state_dir, url)
            locks.append(bad)
            with pytest.raises(ConfigError) as refused:
                await asyncio.wait_for(_take(bad), 10)
            assert said in str(refused.value)
            assert wrong not in str(refused.value) and wrong not in bad.description
    finally:
        for lock in locks:
            await lock.close()
        server.stop()
    assert password not in caplog.text and wrong not in caplog.text


def test_the_description_never_shows_a_redis_password(state_dir):
    for url in ("rediss://:pw-in-netloc-1@redis.example:6380/2", "unix:///run/r.sock?password=pw-in-query-2"):
        lock = _lock(state_dir, url)
        assert "pw-in" not in lock.description and "***" in lock.description
        assert lock.description.startswith("redis lease at ") and lock.description.endswith(f"(key {REDIS_KEY})")


# ── files, settings, safety ──────────────────────────────────────────────────


async def test_lock_and_lease_token_files_are_private_and_lease_tokens_rise(tmp_path):
    state_dir = tmp_path / "new" / "state"  # created on first use
    lock = _lock(state_dir)
    first = await _take(lock)
    second = await _take(lock)
    assert stat.S_IMODE((state_dir / LOCK_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE((state_dir / LEASE_TOKEN_FILE).stat().st_mode) == 0o600
    (state_dir / LEASE_TOKEN_FILE).unlink()
    third = await _take(lock)
    assert first < second < third
    assert lock.description == f"flock {state_dir / LOCK_FILE}" and lock.kind == "flock"


async def test_an_unusable_state_dir_is_a_clear_error(tmp_path):
    (tmp_path / "a-file").write_text("")
    lock = _lock(tmp_path / "a-file" / "state")
    with pytest.raises(ConfigError) as refused:
        await _take(lock)
    assert str(tmp_path / "a-file" / "state") in str(refused.value)
    assert "TUNEPLANE_STATE_DIR" in str(refused.value)


async def test_a_damaged_lease_token_file_is_a_clear_error_and_frees_the_lock(state_dir):
    (state_dir / LEASE_TOKEN_FILE).write_text("garbage")
    lock = _lock(state_dir)
    with pytest.raises(ConfigError, match="delete it"):
        await _take(lock)
    (state_dir / LEASE_TOKEN_FILE).unlink()
    assert await asyncio.wait_for(_take(_lock(state_dir)), 5) > 0


def test_several_allocating_processes_need_a_cross_process_lock(state_dir):
    with pytest.raises(ConfigError, match="TUNEPLANE_REDIS_URL"):
        check_allocation_safety(None, 2)
    with pytest.raises(ConfigError, match="no cross-process lock"):
        check_allocation_safety(SimpleNamespace(cross_process=False), 3)
    check_allocation_safety(None, 1)
    check_allocation_safety(_lock(state_dir), 4)
    redis_lock = _lock(state_dir, "redis://127.0.0.1:1/0")  # connects only when held
    assert redis_lock.kind == "redis"
    check_allocation_safety(redis_lock, 4)


async def test_state_tells_a_reader_who_holds_the_flock(tmp_path):
    from tpnode_tui.config.settings import load_settings
    from tpnode_tui.locks import make_lock

    settings = load_settings({}, state_dir=str(tmp_path))
    holder, reader = make_lock(settings), make_lock(settings)
    assert await reader.state() is None
    async with holder.hold():
        state = await reader.state()
        assert state is not None and f"pid {os.getpid()}" in state
    assert await reader.state() is None
    await holder.close()
    await reader.close()


@pytest.mark.redis
async def test_state_says_when_redis_cannot_be_reached(redis_server, redis_url, tmp_path):
    from tpnode_tui.config.settings import load_settings
    from tpnode_tui.locks import make_lock

    lock = make_lock(load_settings({}, state_dir=str(tmp_path), lock_redis_url=redis_url, lock_lease_ms=2000))
    assert await lock.state() is None
    async with lock.hold():
        other = make_lock(load_settings({}, state_dir=str(tmp_path), lock_redis_url=redis_url))
        assert f"held by pid {os.getpid()}" in await other.state()
        await other.close()
    redis_server.stop()
    try:
        state = await lock.state()
        assert "cannot be reached" in state and "launches wait" in state
    finally:
        redis_server.start()
        await lock.close()


@pytest.mark.parametrize("redis_url,loaded", [(None, False), ("redis://127.0.0.1:1/0", True)])
def test_redis_py_is_imported_only_for_a_configured_redis_lease(tmp_path, redis_url, loaded):
    """redis-py is most of a CLI command's start-up; the default flock lock never needs it."""
    script = (
        "import sys\n"
        "from tpnode_tui import cli\n"
        "from tpnode_tui.config.settings import load_settings\n"
        "from tpnode_tui.locks import make_lock\n"
        f"make_lock(load_settings({{}}, state_dir={str(tmp_path)!r}, lock_redis_url={redis_url!r}))\n"
        "print('redis' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(loaded)


@pytest.mark.parametrize(
    "argv,words",
    [
        (
            ["/usr/bin/python3", "-m", "tpnode_tui", "launch", "--cards", "2", "--", "python", "t.py"],
            "tpnode-tui launch",
        ),
        (["/usr/bin/python3", "/usr/local/bin/tpnode-tui", "--demo"], "tpnode-tui dashboard"),
        (["/usr/local/bin/tpnode-tui", "--state-dir", "/x", "reserve", "--for", "1h"], "tpnode-tui reserve"),
        (["/usr/bin/python3", "/opt/jobs/train.py", "--lr", "3"], "python3 train.py --lr 3"),
        (["sched\n\x1b[2J", "x" * 80], "sched\n\x1b[2J " + "x" * 48 + "…"),
    ],
)
def test_a_lock_holder_is_named_in_a_few_words(argv, words):
    """In a few words; on one line and escaped where it is shown (printable.py),
    since the holder's command line is anyone's to choose."""
    assert short_command(argv) == words
    assert printable(words).isprintable()
