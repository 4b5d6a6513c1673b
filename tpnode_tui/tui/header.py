"""The header and the banners over the grid: where the data comes from and how fresh it is.

An operator glancing at the grid must never mistake an old reading for a
current one, so the header always says how old the data is, and a failed poll
turns into a red "stale since" line instead of the last picture quietly
staying up.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rich.text import Text

from ..model import NodeSnapshot
from ..render import format_duration
from .detail import clock_time


@dataclass(frozen=True)
class PollState:
    """How the last polls went (and how the dashboard was started), for the header and banners."""

    paused: bool = False
    readonly: bool = False
    #: unix time of the first failed poll in the current run of failures
    stale_since: Optional[float] = None
    stale_error: str = ""
    #: what the allocation lock is waiting for, when a launch waits on it
    lock_waiting: Optional[str] = None
    #: TUNEPLANE_ALLOW_UNVERIFIED: cards are handed out even while probe-blind
    unverified_allowed: bool = False


def header_text(snap: Optional[NodeSnapshot], now: float, poll: PollState, compact: bool = False) -> Text:
    """Two lines (where the data comes from and how fresh it is); ``compact``
    drops the runtime and lock line on a short terminal, never the lock waiting."""
    out = Text()
    out.append(" tpnode-tui ", style="bold white on #1e63c4")
    if snap is None and poll.stale_since is not None:
        out.append(" NOTHING READ YET ", style="bold white on #c62828")
        out.append(f" polls failing since {clock_time(poll.stale_since)}", style="grey62")
        return out
    if snap is None:
        out.append("  reading the node…", style="grey62")
        return out
    model = snap.probe.model_name or "unknown cards"
    series = f" · series {snap.series}" if snap.series and snap.series != model.lower() else ""
    out.append(f" {snap.host} ", style="bold")
    out.append(f"│ {model}{series} │ probe {snap.probe.source} ")
    occ = snap.occupancy
    stale = poll.stale_since is not None
    if stale:
        out.append(f"│ ?/{occ.total} free ", style="bold")
    elif not occ.external_probe_ok:
        out.append(f"│ {len(occ.free)}/{occ.total} free, unverified ", style="bold")
    else:
        out.append(f"│ {len(occ.free)}/{occ.total} free ", style="bold")
    if stale:
        out.append(f" STALE since {clock_time(poll.stale_since)} ", style="bold white on #c62828")
    elif poll.paused:
        out.append(" PAUSED ", style="bold black on #fbc02d")
    if poll.readonly:
        out.append(" READ-ONLY ", style="bold white on #6b6b6b")
    age = max(0.0, now - snap.taken_at)
    what = " last good reading" if stale else " updated"
    out.append(f"{what} {format_duration(age)} ago" if age >= 1 else f"{what} just now", style="grey62")
    if not compact:
        out.append("\n")
        out.append(f" runtime {snap.runtime} · lock {snap.lock}", style="grey62")
    if poll.lock_waiting:
        out.append(f"\n {poll.lock_waiting}", style="bold #ffb300")
    return out


def banner_lines(snap: Optional[NodeSnapshot], poll: PollState,
                 compact: bool = False) -> list[tuple[str, Text]]:
    """(banner name, text) for each banner that applies now, most urgent first;
    ``compact`` keeps the blind banner's explanation to one short line, so a
    short terminal still shows the jobs table."""
    banners = []
    if poll.stale_since is not None and snap is None:
        banners.append(("stale", Text(
            f"the node cannot be read (since {clock_time(poll.stale_since)}): {poll.stale_error}\n"
            "Nothing has been read yet, so no card is shown; it retries by itself.")))
    elif poll.stale_since is not None:
        banners.append(("stale", Text(
            f"stale since {clock_time(poll.stale_since)}: {poll.stale_error}\n"
            "Showing the last good reading, marked ?; no card counts as free until a poll "
            "succeeds again (it retries by itself).")))
    if snap is not None and not snap.occupancy.external_probe_ok and snap.occupancy.total:
        why = snap.probe.problem or "use from outside the platform cannot be probed"
        if compact:
            then = "handed out anyway" if poll.unverified_allowed else "launches wait for the probe"
            explain = f"Free cards show as UNVERIFIED; {then}."
        else:
            then = ("they are handed out anyway (TUNEPLANE_ALLOW_UNVERIFIED)" if poll.unverified_allowed
                    else "launches wait until the probe works again (queued ones then start by themselves)")
            explain = ("Cards may be in use by processes outside the platform that cannot be seen (the "
                       f"free count may be too high): free cards show as UNVERIFIED, and {then}.")
        banners.append(("blind", Text(f"PROBE-BLIND: {why}.\n{explain}")))
    return banners


def summary_text(snap: NodeSnapshot, poll: PollState) -> Text:
    if poll.stale_since is None:
        return Text(snap.explain)
    out = Text("Now unknown. ", style="bold #ef5350")
    out.append(f"The last good reading said: {snap.explain}", style="grey62")
    return out


def no_cards_text(snap: NodeSnapshot) -> Text:
    """What to say instead of an empty grid."""
    out = Text()
    if snap.probe.problem:
        out.append("No GPUs can be seen on this node.\n\n", style="bold #ef5350")
        out.append("Tried: ", style="bold")
        out.append(f"{snap.probe.problem}\n\n")
        out.append(
            "If this node has NVIDIA cards, install the driver (nvidia-smi should list them), "
            "or give the card count with --gpu-count N (TUNEPLANE_LOCAL_GPU_COUNT).\n"
            "To see what the dashboard shows on a GPU node, run:  tpnode-tui --demo"
        )
    else:
        out.append(f"The probe ({snap.probe.source}) reports no cards on this node.\n\n", style="bold")
        out.append("Give the card count with --gpu-count N, or try:  tpnode-tui --demo")
    return out
