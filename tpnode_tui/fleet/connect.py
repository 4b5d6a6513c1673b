"""One Redis client for the fleet, as the publisher and the reader both open it."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from tpnode_tui.model.errors import ConfigError

#: a request slower than this counts as Redis not answering
TIMEOUT_S = 2.0


def open_client(url: str, safe_url: str, *, timeout_s: float = TIMEOUT_S) -> aioredis.Redis:
    try:
        return aioredis.from_url(
            url,
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
            # One quick retry covers a pooled connection that died with a restarted
            # server; longer outages are waited out by the caller, which says so.
            retry=Retry(NoBackoff(), 1),
        )
    except ValueError as e:
        raise ConfigError(f"TUNEPLANE_FLEET_URL={safe_url!r} cannot be used: {scrub(str(e), url)}") from None


def scrub(text: str, url: str) -> str:
    """``text`` with the URL's password blanked: redis-py's messages are not ours."""
    parts = urlsplit(url)
    for secret in filter(None, [parts.password or ""] + parse_qs(parts.query).get("password", [])):
        text = text.replace(secret, "***")
    return text
