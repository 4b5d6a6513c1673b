"""Who may allocate cards right now.

Launching is "read occupancy -> pick cards -> create the job", and it has to be
atomic across every process on the node: occupancy is rebuilt from container
labels and the process state file, so until the job exists its cards still look
free to everyone else. Two callers inside that window hand the same card to two
jobs, and the symptom (both go OOM, or one runs slow) says nothing about why.

Concurrency comes from two places, so there are two layers:

- an ``asyncio.Lock``, for tasks of one process (the dashboard's keys, a queue
  loop): they queue on it in order instead of polling the cross-process lock
  against each other;
- a cross-process lock, for the CLI next to the dashboard, several dashboards,
  a scheduler in another process. By default an ``flock`` on a file in the state
  directory: the kernel drops it when its holder dies, even by ``kill -9``, so a
  crash never leaves the node stuck. With ``TUNEPLANE_REDIS_URL`` set, a Redis
  lease instead, for setups that already coordinate through Redis.

While the cross-process lock cannot be taken (someone holds it, or Redis cannot
be reached) a caller waits and :attr:`AllocationLock.waiting` says why. It never
goes ahead without the lock: letting an allocation through blind is exactly the
over-subscription this exists to prevent, and waiting costs only time.

Every acquisition gets a fencing number, larger than any handed out before on
this node. A Redis lease can be lost while its holder still runs (Redis
restarted, the key was cleared, the holder stalled past its lease); the holder
learns it through :meth:`LockHold.lost` and the fence tells which of two
holders came later.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Optional, Protocol
from urllib.parse import parse_qs, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .config import Settings
from .model import ConfigError

log = logging.getLogger(__name__)

LOCK_FILE = "alloc.lock"
FENCE_FILE = "alloc.fence"
REDIS_KEY = "tpnode:gpu-alloc"

_STATE_DIR_HINT = "set TUNEPLANE_STATE_DIR to a directory this user can write"

#: Errors that waiting can fix: Redis down, slow or not resolvable. (A refused
#: password is a ConnectionError to redis-py too, so it is caught first.)
_OUTAGE = (RedisConnectionError, RedisTimeoutError, OSError)


@dataclass
class LockHold:
    """One holding of the allocation lock, handed to the code inside it."""

    #: larger than every fence handed out before it on this node, by any process
    fence: int
    _lost_because: Optional[str] = field(default=None, init=False, repr=False)

    def lost(self) -> bool:
        """Whether the lock was found to be no longer ours while held.

        Only a Redis lease can be lost; the kernel does not take an flock away
        from a live process. Once True it stays True: another process may have
        allocated in the meantime, and the caller has to back off.
        """
        return self._lost_because is not None

    def _mark_lost(self, why: str) -> None:
        if self._lost_because is None:
            self._lost_because = why


#: What a backend hands back for one acquisition: the hold, and how to give it up.
_Release = Callable[[], Awaitable[None]]
_Report = Callable[[Optional[str]], None]


class _CrossProcessLock(Protocol):
    kind: str
    description: str

    async def acquire(self, report: _Report) -> tuple[LockHold, _Release]:
        """Wait until this process holds the lock, calling ``report`` with why it
        is waiting on every retry. Raises ConfigError for what waiting cannot fix."""
        ...

    async def inspect(self) -> Optional[str]:
        """Who holds the lock or why it cannot be had, without taking it; None when free."""
        ...

    async def close(self) -> None: ...


class AllocationLock:
    """The allocation critical section: ``async with lock.hold() as h:``."""

    #: Both backends span processes. :func:`check_allocation_safety` asks this
    #: attribute, so any other object passed as a lock (a test double) is
    #: refused unless it says the same.
    cross_process = True

    def __init__(self, backend: _CrossProcessLock) -> None:
        self._backend = backend
        self._local = asyncio.Lock()
        self._local_waiters = 0
        self._backend_waiting: Optional[str] = None
        self.kind = backend.kind
        self.description = backend.description

    @property
    def waiting(self) -> Optional[str]:
        """What a waiting caller waits for, in plain words; None when nobody waits."""
        if self._backend_waiting:
            return self._backend_waiting
        if self._local_waiters:
            return "waiting for the allocation lock (held by another allocation in this process)"
        return None

    async def state(self) -> Optional[str]:
        """The lock as another reader of the node should hear of it: what a caller
        here waits for, else who holds it or why it cannot be had (Redis down),
        else None. Used by ``status`` and the dashboard header, which do not
        allocate and so would otherwise never learn that launches are waiting."""
        return self.waiting or await self._backend.inspect()

    def locked(self) -> bool:
        """Whether an allocation in this process is inside the lock now."""
        return self._local.locked()

    def _report(self, why: Optional[str]) -> None:
        self._backend_waiting = why

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[LockHold]:
        """Hold the lock for the body: in-process first, then across processes.

        Given back on leaving, whether the body returns, raises or is cancelled.
        """
        self._local_waiters += 1
        try:
            await self._local.acquire()
        finally:
            self._local_waiters -= 1
        try:
            try:
                hold, release = await self._backend.acquire(self._report)
            finally:
                self._backend_waiting = None
            try:
                yield hold
            finally:
                await release()
        finally:
            self._local.release()

    async def close(self) -> None:
        await self._backend.close()


def make_lock(settings: Settings) -> AllocationLock:
    """The lock the settings ask for: a Redis lease when a URL is set, else flock."""
    retry_s = settings.lock_retry_ms / 1000
    if settings.redis_url:
        return AllocationLock(
            _RedisLease(
                settings.redis_url,
                settings.redis_url_safe or "",
                lease_ms=settings.lock_lease_ms,
                retry_s=retry_s,
            )
        )
    return AllocationLock(_FileLock(Path(settings.state_dir), retry_s))


def check_allocation_safety(lock: Optional[AllocationLock], allocating_processes: int) -> None:
    """Refuse to start several allocating processes that cannot see each other.

    Each process has its own in-process lock, so without a cross-process one two
    of them can read the same occupancy and hand out the same card.
    """
    if allocating_processes <= 1:
        return
    if lock is not None and getattr(lock, "cross_process", False):
        return
    raise ConfigError(
        f"{allocating_processes} processes would allocate cards on this node with no "
        "cross-process lock, so two of them could hand out the same card; use the flock "
        "lock (every process with the same TUNEPLANE_STATE_DIR) or set TUNEPLANE_REDIS_URL "
        "to one Redis for all of them"
    )


def _fence_floor() -> int:
    """Where a fence counter starts when it is missing: microseconds since the epoch.

    A counter goes missing when Redis restarts without persistence, the key or
    the fence file is deleted, or on first use. Restarting at 1 would give the
    next holder a *smaller* fence than a holder that may still be running with a
    lost lease, which is when fencing matters. No node takes the lock more than
    once per microsecond, so the clock is above every fence handed out before.
    (Microseconds since the epoch still fit exactly in a Lua number.)
    """
    return time.time_ns() // 1_000


# ── flock ────────────────────────────────────────────────────────────────────

#: Lock-file descriptors this process has open. A child made by a bare fork
#: shares their open file descriptions, and with them the lock: it would keep
#: the node locked after this process dies. The child closes its copies at once
#: (closing, unlike LOCK_UN, leaves the parent's lock alone).
_OPEN_LOCK_FDS: set[int] = set()


def _forget_lock_fds_in_child() -> None:
    for fd in _OPEN_LOCK_FDS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _OPEN_LOCK_FDS.clear()


os.register_at_fork(after_in_child=_forget_lock_fds_in_child)


class _FileLock:
    """``flock`` on ``state_dir/alloc.lock``, fenced by ``state_dir/alloc.fence``.

    The file is opened per acquisition and closed on release, so nothing stays
    open between allocations. Locking is non-blocking with a retry: a thread
    parked in a blocking flock cannot be cancelled, and the event loop keeps
    drawing the dashboard meanwhile.
    """

    kind = "flock"

    def __init__(self, state_dir: Path, retry_s: float) -> None:
        self._dir = state_dir
        self._path = state_dir / LOCK_FILE
        self._fence_path = state_dir / FENCE_FILE
        self._retry_s = retry_s
        self.description = f"flock {self._path}"

    def _unusable(self, e: OSError) -> ConfigError:
        return ConfigError(
            f"the state directory {self._dir} cannot hold the allocation lock "
            f"({e.strerror or e}); {_STATE_DIR_HINT}"
        )

    def _open(self) -> int:
        try:
            # 0700 as the state file makes it: whoever creates the directory first
            # (usually this lock) decides its mode, and an existing one keeps its own.
            self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise self._unusable(e) from None
        _OPEN_LOCK_FDS.add(fd)
        return fd

    @staticmethod
    def _close(fd: int) -> None:
        _OPEN_LOCK_FDS.discard(fd)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    async def acquire(self, report: _Report) -> tuple[LockHold, _Release]:
        fd = self._open()
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    report(f"waiting for the allocation lock {self._path} ({_flock_holder(fd)})")
                await asyncio.sleep(self._retry_s)
            hold = LockHold(fence=self._next_fence())
        except OSError as e:
            self._close(fd)
            raise self._unusable(e) from None
        except BaseException:
            self._close(fd)
            raise

        async def release() -> None:
            self._close(fd)

        return hold, release

    def _next_fence(self) -> int:
        """Read, increment and atomically replace the counter; called holding the lock."""
        try:
            text = self._fence_path.read_text().strip()
        except FileNotFoundError:
            fence = _fence_floor()
        else:
            if not text.isdigit():
                raise ConfigError(
                    f"{self._fence_path} should hold the last fencing number but holds "
                    f"{text[:40]!r}; delete it (the next number then starts from the clock)"
                )
            fence = int(text) + 1
        tmp = self._dir / f".{FENCE_FILE}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, f"{fence}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._fence_path)
        return fence

    async def inspect(self) -> Optional[str]:
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            return f"the allocation lock {self._path} cannot be opened ({e.strerror or e})"
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return f"allocation lock {self._path} {_flock_holder(fd)}"
        finally:
            os.close(fd)  # closing drops the shared lock if it was taken
        return None

    async def close(self) -> None:
        """Nothing stays open between holds."""


def _flock_holder(fd: int) -> str:
    """Who holds the flock on ``fd``'s file, as the kernel's /proc/locks says.

    The answer is the kernel's own record, so it cannot go stale the way a pid
    written into the lock file would. Falls back to plain words where
    /proc/locks cannot be read or names nobody (another pid namespace).
    """
    st = os.fstat(fd)
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            lines = f.readlines()
    except OSError:
        return "held by another process"
    for line in lines:
        parts = line.split()
        # "1: FLOCK ADVISORY WRITE <pid> <maj:min:inode> 0 EOF"; waiters have "->"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == wanted and parts[4].isdigit():
            pid = int(parts[4])
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                return f"held by pid {pid}"
            return f"held by pid {pid} ({name})"
    return "held by another process"


# ── Redis lease ──────────────────────────────────────────────────────────────

#: Take the lease when it is free (or already ours: a retry after a lost reply),
#: and draw the fence in the same step, so no holder ever runs without one.
#: Returns the fence, or the current holder's token when someone else holds it.
_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return holder
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local fence = redis.call('INCR', KEYS[2])
if fence == 1 then
  fence = tonumber(ARGV[3])
  redis.call('SET', KEYS[2], ARGV[3])
end
return fence
"""

#: Extend the lease only if it is still ours.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

#: Give the lease up only if it is still ours: never delete a successor's.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def _new_token() -> str:
    """This holding's value in the lease key: "<ms since epoch>-<pid>-<random hex>".

    Unique per holding, so release and renewal can tell our lease from a
    successor's. The time and pid make a stuck lease readable with redis-cli:
    since when, and which process on the node took it.
    """
    return f"{time.time_ns() // 1_000_000}-{os.getpid()}-{secrets.token_hex(8)}"


def _describe_holder(token: bytes | str) -> str:
    text = token.decode(errors="replace") if isinstance(token, bytes) else token
    try:
        ms, pid, _ = text.split("-", 2)
        since = time.strftime("%H:%M:%S", time.localtime(int(ms) / 1000))
        return f"held by pid {int(pid)} since {since}"
    except ValueError:
        return "held by another process"


class _RedisLease:
    """A lease in Redis: ``key`` holds a token for ``lease_ms``, renewed while held.

    The lease, not a connection, is what holds the lock, so a holder that dies
    frees it after at most one lease. A renewer extends it every third of a lease
    for as long as the work inside takes.
    """

    kind = "redis"

    def __init__(self, url: str, safe_url: str, *, lease_ms: int, retry_s: float) -> None:
        self._url = url
        # redact_url blanks a password in the address; this also catches one
        # given as ?password= (unix:// URLs take it that way).
        self._safe = self._scrub(safe_url)
        self._key = REDIS_KEY
        self._fence_key = f"{REDIS_KEY}:fence"
        self._lease_ms = lease_ms
        self._lease_s = lease_ms / 1000
        self._retry_s = retry_s
        self._outage = False
        self.description = f"redis lease at {self._safe} (key {self._key})"
        # A request must answer well inside a lease, or a renewal cannot save it.
        timeout = max(0.2, min(5.0, self._lease_s / 3))
        try:
            self._client = aioredis.from_url(
                url,
                socket_connect_timeout=timeout,
                socket_timeout=timeout,
                # One quick retry covers a pooled connection that died with a
                # restarted server; longer outages are waited out by the loops
                # here, which can say so, instead of inside redis-py.
                retry=Retry(NoBackoff(), 1),
            )
        except ValueError as e:
            raise ConfigError(
                f"TUNEPLANE_REDIS_URL={self._safe!r} cannot be used: {self._scrub(str(e))}"
            ) from None
        self._acquire = self._client.register_script(_ACQUIRE)
        self._renew = self._client.register_script(_RENEW)
        self._release = self._client.register_script(_RELEASE)

    def _scrub(self, text: str) -> str:
        """``text`` with the URL's password blanked: redis-py's messages are not ours."""
        parts = urlsplit(self._url)
        secrets_in_url = [parts.password or ""] + parse_qs(parts.query).get("password", [])
        for secret in filter(None, secrets_in_url):
            text = text.replace(secret, "***")
        return text

    def _refused(self, e: AuthenticationError) -> ConfigError:
        has_password = bool(urlsplit(self._url).password) or "password=" in urlsplit(self._url).query
        what = (
            "refused the password in TUNEPLANE_REDIS_URL"
            if has_password
            else "requires a password and TUNEPLANE_REDIS_URL has none"
        )
        return ConfigError(
            f"Redis at {self._safe} {what} ({self._scrub(str(e))}); "
            "put the right one in the URL, as redis://:PASSWORD@host:port/db"
        )

    def _unreachable(self, e: BaseException) -> str:
        reason = self._scrub(str(e)) or type(e).__name__
        if not self._outage:
            self._outage = True
            log.warning(
                "Redis at %s cannot be reached (%s): allocations wait until it answers",
                self._safe, reason,
            )
        return f"waiting for Redis at {self._safe}: {reason}"

    def _reachable(self) -> None:
        if self._outage:
            self._outage = False
            log.info("Redis at %s answers again", self._safe)

    async def acquire(self, report: _Report) -> tuple[LockHold, _Release]:
        token = _new_token()
        while True:
            started = time.monotonic()
            try:
                answer = await self._acquire(
                    keys=[self._key, self._fence_key],
                    args=[token, self._lease_ms, _fence_floor()],
                )
            except asyncio.CancelledError:
                # The lease may have been granted with the reply lost on the way.
                await self._give_up(token)
                raise
            except AuthenticationError as e:
                raise self._refused(e) from None
            except _OUTAGE as e:
                report(self._unreachable(e))
            except RedisError as e:
                raise ConfigError(
                    f"Redis at {self._safe} cannot hold the allocation lock "
                    f"({self._scrub(str(e))}); point TUNEPLANE_REDIS_URL at a writable primary"
                ) from None
            else:
                self._reachable()
                if isinstance(answer, int):
                    break
                report(
                    f"waiting for the allocation lock ({_describe_holder(answer)}; "
                    f"Redis lease at {self._safe}, key {self._key})"
                )
            await asyncio.sleep(self._retry_s)

        hold = LockHold(fence=answer)
        renewer = asyncio.create_task(self._keep(token, hold, started + self._lease_s))

        async def release() -> None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            await self._give_up(token, hold)

        return hold, release

    async def _keep(self, token: str, hold: LockHold, valid_until: float) -> None:
        """Renew every third of a lease until cancelled, or until the lease is lost.

        A failed renewal is retried, because Redis blinking for a second must not
        cost a lease that still has most of its time left. Past the moment the
        lease would have run out, nobody can count on it any more.
        """
        delay = self._lease_s / 3
        while True:
            await asyncio.sleep(delay)
            started = time.monotonic()
            try:
                renewed = await self._renew(keys=[self._key], args=[token, self._lease_ms])
            except (RedisError, OSError) as e:
                if time.monotonic() >= valid_until:
                    self._lost(
                        hold,
                        f"Redis could not be reached to renew it before it ran out "
                        f"({self._scrub(str(e)) or type(e).__name__})",
                    )
                    return
                delay = min(self._retry_s, max(0.0, valid_until - time.monotonic()))
                continue
            if not renewed:
                self._lost(hold, "the key expired, was deleted or now holds another token")
                return
            valid_until = started + self._lease_s
            delay = self._lease_s / 3

    def _lost(self, hold: LockHold, why: str) -> None:
        hold._mark_lost(why)
        log.error(
            "lost the allocation lock lease at %s (key %s): %s; another process may be "
            "allocating at the same time, so this allocation must back off",
            self._safe, self._key, why,
        )

    async def _give_up(self, token: str, hold: Optional[LockHold] = None) -> None:
        """Compare-and-delete the lease. A failure is logged, not raised: the job
        inside the lock already exists, and the lease runs out by itself."""
        try:
            deleted = await self._release(keys=[self._key], args=[token])
        except (RedisError, OSError) as e:
            log.warning(
                "could not release the allocation lock lease at %s (%s); it runs out by "
                "itself within %gs",
                self._safe, self._scrub(str(e)) or type(e).__name__, self._lease_s,
            )
            return
        if hold is not None and not deleted and not hold.lost():
            self._lost(hold, "it was gone or held by another token when released")

    async def inspect(self) -> Optional[str]:
        try:
            holder = await self._client.get(self._key)
        except AuthenticationError as e:
            return str(self._refused(e))
        except (RedisError, OSError) as e:
            reason = self._scrub(str(e)) or type(e).__name__
            return f"Redis at {self._safe} cannot be reached ({reason}): launches wait until it answers"
        if holder is None:
            return None
        return f"allocation lock {_describe_holder(holder)} (Redis lease at {self._safe})"

    async def close(self) -> None:
        await self._client.aclose()

