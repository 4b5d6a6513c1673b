"""Moments and durations, as short as the places that show them."""

from __future__ import annotations

import time

from tpnode_tui.text.render import format_duration


def clock_time(ts: float) -> str:
    """The moment on this machine's clock, to the second: "14:03:27"."""
    return time.strftime("%H:%M:%S", time.localtime(ts))


def short_duration(seconds: float) -> str:
    """ "45m" under an hour, else as format_duration says it ("1h05m")."""
    return f"{max(0, int(seconds)) // 60}m" if seconds < 3600 else format_duration(seconds)
