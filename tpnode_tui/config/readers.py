"""How each setting's text is read: checked, or a ConfigError that names where it came from.

A reader takes the name the text came from (the variable, or the flag that
overrode it) and the text itself. A typo in a card count must not silently
become "detect", and a typo in a probe name must not silently become "blind",
so nothing here guesses: what is not understood is refused, in one line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Optional

from tpnode_tui.config.redact import redact_url
from tpnode_tui.config.ssh import SshTarget
from tpnode_tui.config.values import decimal_number, parse_duration, whole_number
from tpnode_tui.model.errors import BadRequest, ConfigError

#: reads a setting's text; the first argument names where the text came from, for errors
Parse = Callable[[str, str], Any]

#: more cards than any machine has; a larger count is a typo, not a node
MAX_CARDS = 1024

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

#: a group as useradd allows it (a trailing "$": a machine account)
_GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\$?")
#: whom a card limit is for: an account, or "@" and a group
_LIMITED = re.compile(r"@?[A-Za-z_][A-Za-z0-9_.-]{0,63}\$?")
#: a node name: what a host name may hold, so it reads the same in keys, labels and screens
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")


def _whole(name: str, raw: str, minimum: int, maximum: Optional[int] = None) -> int:
    value = whole_number(raw)
    if value is None:
        raise ConfigError(f"{name}={raw!r} is not a whole number")
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}={raw!r} must be at most {maximum}")
    return value


def whole(minimum: int, maximum: Optional[int] = None) -> Parse:
    """A whole number from ``minimum`` to ``maximum`` (no upper bound: None)."""
    return lambda name, raw: _whole(name, raw, minimum, maximum)


def decimal(minimum: float, maximum: float) -> Parse:
    """A plain decimal from ``minimum`` to ``maximum``."""

    def read(name: str, raw: str) -> float:
        value = decimal_number(raw)
        if value is None:
            raise ConfigError(f"{name}={raw!r} is not a number (write it like 2 or 0.5)")
        if not minimum <= value <= maximum:
            raise ConfigError(f"{name}={raw!r} must be from {minimum:g} to {maximum:g}")
        return value

    return read


def duration(name: str, raw: str) -> float:
    """A duration as the CLI takes one: ``90s``, ``15m``, ``2h``, ``1h30m``, ``1d`` or plain seconds."""
    try:
        return parse_duration(raw)
    except BadRequest as e:
        raise ConfigError(f"{name}={raw!r}: {e}") from None


def duration_or_off(name: str, raw: str) -> Optional[float]:
    """A duration, or ``off`` for none: what turns a timed action off is said
    in a word, not as a 0 that would read as "at once"."""
    if raw.strip().lower() in ("off", "none"):
        return None
    try:
        return parse_duration(raw)
    except BadRequest as e:
        raise ConfigError(f"{name}={raw!r}: {e} (or off: never)") from None


def choice(*choices: str) -> Parse:
    """One of ``choices``, in any case."""

    def read(name: str, raw: str) -> str:
        word = str(raw).strip().lower()
        if word not in choices:
            raise ConfigError(f"{name}={raw!r} is not one of {', '.join(choices)}")
        return word

    return read


def switch(name: str, raw: str) -> bool:
    word = str(raw).strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not one of true/false, yes/no, 1/0, on/off")


def text(name: str, raw: str) -> str:
    return raw.strip()


def command(name: str, raw: str) -> tuple[str, ...]:
    """A command line, split into words as a shell would (quotes, backslashes), and
    never run through one; empty: none."""
    import shlex

    if "\x00" in raw:
        raise ConfigError(f"{name} holds a NUL character, which no command line can")
    try:
        return tuple(shlex.split(raw))
    except ValueError as e:
        raise ConfigError(f"{name}={raw!r} is not a command line ({e})") from None


def patterns(name: str, raw: str) -> tuple[str, ...]:
    """ "busybox:*, nvcr.io/*" -> ("busybox:*", "nvcr.io/*")."""
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def absolute_path(name: str, raw: str) -> Path:
    """Absolute, so that shells started in different directories share one
    lock, one state file and one agent instead of each finding its own."""
    if not raw.strip():
        raise ConfigError(f"{name} is empty")
    return Path(raw).expanduser().absolute()


def probe_source(name: str, raw: str) -> str:
    value = str(raw).strip()
    if value.lower() in ("nvml", "smi", "auto"):
        return value.lower()
    if value.startswith("simulated:") and value.split(":", 1)[1]:
        return value
    raise ConfigError(f"{name}={raw!r} is not one of nvml, smi, auto or simulated:PATH")


def redis_url(name: str, raw: str) -> Optional[str]:
    """A redis://, rediss:// or unix:// URL; empty: none. Refused without its password."""
    value = str(raw).strip()
    if not value:
        return None
    from urllib.parse import urlsplit

    if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"{name}={redact_url(value)!r} is not a redis://, rediss:// or unix:// URL")
    return value


def card_limit(name: str, raw: str) -> Optional[int]:
    """Most cards; empty: no limit."""
    return None if not raw.strip() else _whole(name, raw, 0, MAX_CARDS)


def card_limits(name: str, raw: str) -> tuple[tuple[str, int], ...]:
    """ "alice=4,@students=1" -> (("alice", 4), ("@students", 1))."""
    limits: dict[str, int] = {}
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        who, sep, count = part.partition("=")
        who = who.strip()
        if not sep or not _LIMITED.fullmatch(who):
            raise ConfigError(f"{name}: {part!r} is not NAME=N or @GROUP=N (e.g. alice=4,@students=1)")
        limits[who] = _whole(f"{name} ({who})", count, 0, MAX_CARDS)
    return tuple(limits.items())


def xids(name: str, raw: str) -> tuple[int, ...]:
    """ "46,48, 79" -> (46, 48, 79); "none" -> ()."""
    if raw.strip().lower() == "none":
        return ()
    found = [_whole(f"{name} ({part!r})", part, 1, 65535) for part in (p.strip() for p in raw.split(",")) if part]
    return tuple(sorted(set(found)))


def address(name: str, raw: str) -> Optional[tuple[str, int]]:
    """ "0.0.0.0:9400", "[::]:9400", "localhost:9400" or ":9400" (every address) -> (host, port)."""
    value = raw.strip()
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{name}={raw!r} is not HOST:PORT with a port from 1 to 65535 (e.g. 0.0.0.0:9400)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if any(ch.isspace() or ch in "/[]" for ch in host):
        raise ConfigError(f"{name}={raw!r}: {host!r} is not a host name or address")
    return host or "0.0.0.0", int(port)


def listen_address(name: str, raw: str) -> tuple[str, int]:
    """Where a server listens: HOST:PORT as :func:`address` reads it; never empty."""
    found = address(name, raw)
    if found is None:
        raise ConfigError(f"{name} is empty: give HOST:PORT, e.g. 127.0.0.1:8470")
    return found


#: the fewest characters a token is taken with: fewer can be guessed
MIN_TOKEN_CHARS = 16


def token(name: str, raw: str) -> Optional[str]:
    """A secret a reader gives to be let in: printable ASCII with no spaces (it travels in a
    header and a cookie), at least MIN_TOKEN_CHARS long; empty: none. Never echoed."""
    value = raw.strip()
    if not value:
        return None
    if not all("!" <= ch <= "~" for ch in value) or ";" in value or "," in value:
        raise ConfigError(f"{name} must be printable ASCII with no space, ';' or ',': try openssl rand -hex 16")
    if len(value) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"{name} is {len(value)} characters: give at least {MIN_TOKEN_CHARS}; try openssl rand -hex 16"
        )
    return value


def ssh_target(name: str, raw: str) -> Optional[SshTarget]:
    """An empty variable is unset; an empty flag (``--host "$NODE"`` with NODE
    unset) is a mistake, which must not quietly mean this machine's node."""
    if not raw.strip():
        if name.startswith("--"):
            raise ConfigError(f"{name} is empty: give [user@]host, or leave {name} out for this machine's node")
        return None
    return SshTarget.parse(raw, name)


def node_name(name: str, raw: str) -> str:
    value = raw.strip()
    if value and not _NODE_NAME.fullmatch(value):
        raise ConfigError(
            f"{name}={raw!r} is not a node name: 1 to 253 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    return value


def group_name(name: str, raw: str) -> str:
    if not _GROUP.fullmatch(raw.strip()):
        raise ConfigError(f"{name}={raw!r} is not a group name")
    return raw.strip()
