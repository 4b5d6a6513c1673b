"""The Redis lease backend of the allocation lock (see the package for why there are two).

Kept apart so that redis-py is imported only by processes that use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from typing import Optional
from urllib.parse import parse_qs, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tpnode_tui.locks.base import REDIS_KEY, LockHold, Release, Report, lease_token_floor, past
from tpnode_tui.model.errors import ConfigError, LockWaitTimeout

log = logging.getLogger("tpnode_tui.locks")  # one logger for the allocation lock, whichever backend

#: Errors that waiting can fix: Redis down, slow or not resolvable. (A refused
#: password is a ConnectionError to redis-py too, so it is caught first.)
_OUTAGE = (RedisConnectionError, RedisTimeoutError, OSError)


# ── Redis lease ──────────────────────────────────────────────────────────────

#: Take the lease when it is free (or already ours: a retry after a lost reply),
#: and draw the lease token in the same step, so no holder ever runs without one.
#: Returns the lease token, or the current holder's id when someone else holds it.
_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return holder
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local lease_token = redis.call('INCR', KEYS[2])
if lease_token == 1 then
  lease_token = tonumber(ARGV[3])
  redis.call('SET', KEYS[2], ARGV[3])
end
return lease_token
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


def _new_holder_id() -> str:
    """This holding's value in the lease key: "<ms since epoch>-<pid>-<random hex>".

    Unique per holding, so release and renewal can tell our lease from a
    successor's. The time and pid make a stuck lease readable with redis-cli:
    since when, and which process on the node took it.
    """
    return f"{time.time_ns() // 1_000_000}-{os.getpid()}-{secrets.token_hex(8)}"


def _describe_holder(holder_id: bytes | str) -> str:
    text = holder_id.decode(errors="replace") if isinstance(holder_id, bytes) else holder_id
    try:
        ms, pid, _ = text.split("-", 2)
        since = time.strftime("%H:%M:%S", time.localtime(int(ms) / 1000))
        return f"held by pid {int(pid)} since {since}"
    except ValueError:
        return "held by another process"


class RedisLease:
    """A lease in Redis: ``key`` holds its holder's id for ``lease_ms``, renewed while held.

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
        self._token_key = f"{REDIS_KEY}:fence"
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
            raise ConfigError(f"TUNEPLANE_REDIS_URL={self._safe!r} cannot be used: {self._scrub(str(e))}") from None
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
            # Info, not a warning: the caller says why it waits where a person
            # reads it (the CLI's one line, the dashboard's header); this keeps when.
            log.info(
                "Redis at %s cannot be reached (%s): allocations wait until it answers",
                self._safe,
                reason,
            )
        return f"Redis at {self._safe} unreachable ({reason}): waiting for it to answer"

    def _reachable(self) -> None:
        if self._outage:
            self._outage = False
            log.info("Redis at %s answers again", self._safe)

    async def acquire(self, report: Report, deadline: Optional[float]) -> tuple[LockHold, Release]:
        holder_id = _new_holder_id()
        while True:
            started = time.monotonic()
            try:
                answer = await self._acquire(
                    keys=[self._key, self._token_key],
                    args=[holder_id, self._lease_ms, lease_token_floor()],
                )
            except asyncio.CancelledError:
                # The lease may have been granted with the reply lost on the way.
                await self._give_up(holder_id)
                raise
            except AuthenticationError as e:
                raise self._refused(e) from None
            except _OUTAGE as e:
                why = self._unreachable(e)
                report(why)
                if past(deadline):
                    raise LockWaitTimeout(why) from None
            except RedisError as e:
                raise ConfigError(
                    f"Redis at {self._safe} cannot hold the allocation lock "
                    f"({self._scrub(str(e))}); point TUNEPLANE_REDIS_URL at a writable primary"
                ) from None
            else:
                self._reachable()
                if isinstance(answer, int):
                    break
                why = (
                    f"waiting for the allocation lock, {_describe_holder(answer)} "
                    f"(Redis lease at {self._safe}, key {self._key})"
                )
                report(why)
                if past(deadline):
                    raise LockWaitTimeout(why)
            await asyncio.sleep(self._retry_s)

        hold = LockHold(lease_token=answer)
        renewer = asyncio.create_task(self._keep(holder_id, hold, started + self._lease_s))

        async def release() -> None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            await self._give_up(holder_id, hold)

        return hold, release

    async def _keep(self, holder_id: str, hold: LockHold, valid_until: float) -> None:
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
                renewed = await self._renew(keys=[self._key], args=[holder_id, self._lease_ms])
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
                self._lost(hold, "the key expired, was deleted or now holds another holder's id")
                return
            valid_until = started + self._lease_s
            delay = self._lease_s / 3

    def _lost(self, hold: LockHold, why: str) -> None:
        hold.mark_lost(why)
        log.error(
            "lost the allocation lock lease at %s (key %s): %s; another process may be "
            "allocating at the same time, so this allocation must back off",
            self._safe,
            self._key,
            why,
        )

    async def _give_up(self, holder_id: str, hold: Optional[LockHold] = None) -> None:
        """Compare-and-delete the lease. A failure is logged, not raised: the job
        inside the lock already exists, and the lease runs out by itself."""
        try:
            deleted = await self._release(keys=[self._key], args=[holder_id])
        except (RedisError, OSError) as e:
            log.warning(
                "could not release the allocation lock lease at %s (%s); it runs out by itself within %gs",
                self._safe,
                self._scrub(str(e)) or type(e).__name__,
                self._lease_s,
            )
            return
        if hold is not None and not deleted and not hold.lost():
            self._lost(hold, "it was gone or held by another holder when released")

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
