"""URLs with their passwords taken out, before they reach a log, an error or a screen."""

from __future__ import annotations

import re


def redact_url(url: str) -> str:
    """The URL with any password replaced, for logs, errors and the header.

    A password can stand in the authority (``redis://:pw@host``) or, for unix
    sockets, in the query (``unix:///run/redis.sock?password=pw``).
    """
    from urllib.parse import urlsplit, urlunsplit  # here: a command that asks the agent needs no URL

    parts = urlsplit(url)
    if parts.password is not None:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        user = parts.username or ""
        netloc = f"{user}:***@{host}" if user else f":***@{host}"
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", url)
