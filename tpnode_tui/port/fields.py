"""A request's fields, read strictly: the typed getters every request's parse is made of.

A request comes from an account that need not trust the agent's other users,
so each field is checked before anything holds, keeps or echoes it: its type
(:class:`~tpnode_tui.port.wire.reader.Reader`, for a JSON body), that it is text a
program can take (no lone surrogate, which cannot be encoded and ended the
queue's pass and a job's supervisor; no NUL, which no program can receive),
and its size against the node's limits (:class:`OverLimit`, naming the limit
and its value). What is echoed back in an error is cut short and made
printable, so a 64 KiB command is not written back into every refusal and
every log line.

A GET request's fields come in its query string (:class:`Query`), read as
strictly as a body: an unknown or repeated key is refused, never ignored.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

from tpnode_tui.config.values import decimal_number
from tpnode_tui.model.errors import BadRequest, OverLimit
from tpnode_tui.port.wire.reader import Reader
from tpnode_tui.text.printable import printable, shown

#: fields that say who asks: the kernel does (SO_PEERCRED), never the request
IDENTITY_FIELDS = frozenset({"uid", "gid", "user", "groups", "pid", "caller", "operator", "as_user"})


def valid_text(text: str, where: str, *, nul: bool = False) -> str:
    """``text`` when it is text a program can take; BadRequest saying why not.

    A lone surrogate (``\\ud800``, which JSON can carry) cannot be encoded: it
    once ended the queue's pass each time it was tried and a job's supervisor
    with a traceback. A NUL cannot be passed to a program at all; ``nul``
    allows one where the text is never handed to one."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadRequest(
            f"{where} is not valid text: it holds a lone surrogate ({printable(text[e.start])}) at "
            f"character {e.start}; send UTF-8"
        ) from None
    if not nul and "\0" in text:
        raise BadRequest(f"{where} holds a NUL character, which no program can receive")
    return text


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def kib(size: int) -> str:
    """A size as a limit is written: "65.5 KiB"."""
    return f"{size / 1024:.1f}".rstrip("0").rstrip(".") + " KiB"


def over(what: str, most: str, setting: str, value: object) -> OverLimit:
    """The one line a request over a limit gets: what it asked, the limit, and
    the setting that holds it: "the command is 65.5 KiB, over the limit of
    16 KiB (TUNEPLANE_MAX_COMMAND_KIB=16)"."""
    return OverLimit(f"{what}, over the limit of {most} ({setting}={value})")


def known_fields(r: Reader, *keys: str) -> Reader:
    """Refuse a field the request does not take: a misspelt option silently
    ignored would do something other than what was asked, and a field that
    says who asks (``uid``, ``user``) is an attempt to be someone else."""
    unknown = sorted(set(r.doc) - set(keys))
    if not unknown:
        return r
    names = ", ".join(shown(k, 30) for k in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
    why = ""
    if IDENTITY_FIELDS & set(unknown):
        why = "; who asks is the kernel's to say (the socket's peer), never the request's"
    raise BadRequest(f"{r.where} has unknown fields [{names}]; known: {', '.join(keys)}{why}")


def text(r: Reader, key: str, default: Any = None, *, required: bool = False) -> Optional[str]:
    """A text field (None when absent or null, unless ``required``), checked as :func:`valid_text`."""
    if required:
        value: Optional[str] = r.text(key)
    else:
        value = r.opt_text(key) if key in r.doc else default
    return None if value is None else valid_text(value, f"{r.where}.{key}")


def whole(r: Reader, key: str, lowest: int, highest: int, words: str, default: Any = None) -> int:
    """A whole number from ``lowest`` to ``highest``; ``words`` say what one is ("a card index")."""
    value = r.whole(key) if default is None or key in r.doc else default
    if not lowest <= value <= highest:
        raise BadRequest(f"{r.where}.{key} is {_number(value)}, not {words}")
    return value


def _number(value: float) -> str:
    """A number as an error quotes it: a whole one as such, a 300-digit one not written out."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 20 else text[:17] + "..."


def duration(r: Reader, key: str, least: str, most: Optional[float], what: str) -> float:
    """A length of time in seconds, 1 or more (``least``: the refusal's words
    for less) and at most ``most`` (TUNEPLANE_MAX_DURATION_DAYS; None: no bound).
    Unbounded, 1e300 s was taken, and every status then showed a 300-digit time."""
    value = r.number(key)
    if not value >= 1:
        raise BadRequest(f"{least}, not {_number(value)}")
    if most is not None and value > most:
        raise over(f"{what} of {_number(value)} s", days(most), "TUNEPLANE_MAX_DURATION_DAYS", f"{most / 86400:g}")
    return value


def days(value_s: float) -> str:
    """A limit on a length of time, in words: "366 days"."""
    count = value_s / 86400
    return f"{count:g} day{'s' if count != 1 else ''}" if count >= 1 else f"{value_s:g} s"


def query_of(fields: Mapping[str, Any]) -> dict[str, str]:
    """A GET request's fields as its query string holds them: true for a flag,
    seconds in plain digits, never an exponent ("1.0368e+06" has a "+", which
    a query string reads as a space)."""
    out = {}
    for key, value in fields.items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, float):
            out[key] = f"{value:.6f}".rstrip("0").rstrip(".")
        else:
            out[key] = str(value)
    return out


class Query:
    """A GET request's query string, read as strictly as a body."""

    def __init__(self, items: Mapping[str, str], path: str, repeated: tuple[str, ...] = ()) -> None:
        self.items = dict(items)
        self.path = path
        if repeated:
            raise BadRequest(f"{path} was given {shown(repeated[0], 30)} more than once")

    @classmethod
    def of(cls, pairs: list[tuple[str, str]], path: str) -> Query:
        """From the query's pairs as they came, a key given twice refused."""
        seen: dict[str, str] = {}
        twice: list[str] = []
        for key, value in pairs:
            if key in seen:
                twice.append(key)
            seen[key] = value
        return cls(seen, path, tuple(twice))

    def only(self, *keys: str) -> Query:
        unknown = sorted(set(self.items) - set(keys))
        if unknown:
            takes = f"it takes {', '.join(keys)}" if keys else "it takes no parameters"
            raise BadRequest(f"{self.path} does not take {', '.join(shown(k, 30)[1:-1] for k in unknown)}; {takes}")
        return self

    def _raw(self, key: str) -> Optional[str]:
        return self.items.get(key)

    def text(self, key: str, most: int, *, required: bool = False) -> Optional[str]:
        """Text a program can take, of at most ``most`` characters (None when not given, unless ``required``)."""
        raw = self._raw(key)
        if raw is None:
            if required:
                raise BadRequest(f"{self.path} needs {key}")
            return None
        if len(raw) > most:
            raise BadRequest(f"{key}={shown(raw, 30)} is longer than {most} characters")
        return valid_text(raw, key)

    def seconds(self, key: str) -> Optional[float]:
        """A number of seconds, 0 or more, in plain digits."""
        raw = self._raw(key)
        if raw is None:
            return None
        value = decimal_number(raw)
        if value is None or value < 0 or not math.isfinite(value):
            raise BadRequest(f"{key}={shown(raw, 30)} is not a number of seconds")
        return value

    def time(self, key: str) -> Optional[float]:
        """A moment, in unix seconds."""
        raw = self._raw(key)
        if raw is None:
            return None
        value = decimal_number(raw)
        if value is None or not math.isfinite(value):
            raise BadRequest(f"{key}={shown(raw, 30)} is not a time (unix seconds)")
        return value

    def card(self, key: str) -> Optional[int]:
        raw = self._raw(key)
        if raw is None:
            return None
        if not raw.isascii() or not raw.isdigit() or len(raw) > 6:
            raise BadRequest(f"{key}={shown(raw, 30)} is not a card index")
        return int(raw)

    def count(self, key: str, most: Optional[int]) -> Optional[int]:
        """A count from 1; one over ``most`` is taken as ``most`` (an answer is
        never more than the node's page, however much is asked for)."""
        raw = self._raw(key)
        if raw is None:
            return None
        if not raw.isascii() or not raw.isdigit() or len(raw) > 9 or int(raw) < 1:
            raise BadRequest(f"{key}={shown(raw, 30)} is not a number of entries (1 or more)")
        return int(raw) if most is None else min(int(raw), most)

    def flag(self, key: str) -> bool:
        raw = self._raw(key)
        if raw is None:
            return False
        word = raw.lower()
        if word not in ("true", "false", "1", "0"):
            raise BadRequest(f"{key}={shown(raw, 30)} is not true or false")
        return word in ("true", "1")

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        """One of ``choices``, as written (``default`` when not given)."""
        raw = self._raw(key)
        if raw is None:
            return default
        if raw not in choices:
            raise BadRequest(f"{key}={shown(raw, 30)} is not one of {', '.join(choices)}")
        return raw
