"""Numbers, durations and moments as a person writes them: in settings, flags and the dashboard's forms.

Numbers are ASCII digits only: int() and float() also take "٣", "1_0" and
"inf", and a typo read as one of those must not become a count or a time.
"""

from __future__ import annotations

import re
import time
from typing import Optional

from tpnode_tui.model.errors import BadRequest

_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}

#: a duration shorter than this is a typo (0.0001s), not a reservation
MIN_DURATION_S = 1.0
MAX_DURATION_S = 366 * 86400.0


def whole_number(text: str) -> Optional[int]:
    """``text`` as a whole number written in ASCII digits; None for anything else."""
    raw = str(text).strip()
    return int(raw) if _WHOLE.fullmatch(raw) else None


def decimal_number(text: str) -> Optional[float]:
    """``text`` as a plain decimal in ASCII digits (no exponent, inf or nan); None otherwise."""
    raw = str(text).strip()
    return float(raw) if _DECIMAL.fullmatch(raw) else None


def parse_duration(text: str) -> float:
    """'90s', '30m', '2h', '1h30m', '1d' or plain seconds -> seconds; BadRequest otherwise."""
    raw = text.strip().lower()
    if raw.startswith("-"):
        raise BadRequest(f"{text.strip()}: a duration must be positive, e.g. {raw[1:].lstrip('-') or '30m'}")
    seconds = decimal_number(raw)
    if seconds is None:
        parts = _DURATION_PART.findall(raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise BadRequest(f"duration {text!r} is not understood: use e.g. 90s, 30m, 2h, 1h30m or 1d")
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if not MIN_DURATION_S <= seconds <= MAX_DURATION_S:
        raise BadRequest(f"duration {text!r} must be at least 1s and at most a year")
    return seconds


def typed_duration(text: str) -> float:
    """A length of time a person types for a reservation or a look back (``--for``,
    ``--since``, the dashboard's forms): as :func:`parse_duration`, but with its
    unit, since a bare 30 reads as minutes to one person and seconds to another.
    Settings keep plain seconds: a file is written once and read by a program."""
    raw = text.strip()
    if decimal_number(raw) is not None and not raw.startswith("-"):
        raise BadRequest(f"{raw} has no unit: {raw}m or {raw}s?")
    return parse_duration(raw)


#: --since and --until without a word: the last week, up to now
DEFAULT_SPAN_S = 7 * 86400.0

#: dates and times --since and --until take, in the node's local time
_DATE_FORMATS = ("%Y-%m-%d", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S")
_LOOKS_LIKE_DURATION = re.compile(r"[0-9.smhd]+")


def parse_when(text: str, now: float) -> float:
    """``--since``/``--until``: a date or time (local: ``2026-12-01``, ``2026-12-01 14:00``),
    or a duration that long before ``now`` (``7d``, ``12h``, ``1h30m``); BadRequest otherwise."""
    raw = text.strip()
    for fmt in _DATE_FORMATS:
        try:
            return time.mktime(time.strptime(raw, fmt))
        except (ValueError, OverflowError):
            continue
    if _LOOKS_LIKE_DURATION.fullmatch(raw.lower()):
        return now - typed_duration(raw)  # its own words: "must be at least 1s and at most a year", "30m or 30s?"
    raise BadRequest(
        f"{text!r} is neither a date such as 2026-12-01 or 2026-12-01 14:00 (local time) "
        "nor a duration such as 7d or 12h (that long ago)"
    )


def usage_span(since: Optional[str], until: Optional[str], now: float) -> tuple[float, float]:
    """The span ``--since`` and ``--until`` name: the last week by default, up to now."""
    end = now if until is None else parse_when(until, now)
    start = end - DEFAULT_SPAN_S if since is None else parse_when(since, now)
    if start >= end:
        raise BadRequest(
            f"--since ({time.strftime('%Y-%m-%d %H:%M', time.localtime(start))}) is not before "
            f"--until ({time.strftime('%Y-%m-%d %H:%M', time.localtime(end))})"
        )
    return start, end
