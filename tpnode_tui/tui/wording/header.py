"""The header and the banners over the grid: where the data comes from, how fresh it is, who you are.

An operator glancing at the grid must never mistake an old reading for a
current one, so the header always says how old the data is, and a failed poll
(or an agent that stopped answering) turns into a red line instead of the
last picture quietly staying up. On a shared node what a key does depends on
who presses it, so the header also says who that is, as the node named them,
and where the node is served from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rich.text import Text

from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.port.types.readings import You
from tpnode_tui.text.header import blind_banner, free_words, intruder_summary, stale_banner
from tpnode_tui.text.render import cards_words, format_duration
from tpnode_tui.tui.wording.jobs import WAITING
from tpnode_tui.tui.wording.marks import WARNING
from tpnode_tui.tui.wording.times import clock_time


@dataclass(frozen=True)
class PollState:
    """How the last polls went (and how the dashboard was started), for the header and banners."""

    paused: bool = False
    readonly: bool = False
    #: unix time of the first failed poll in the current run of failures, or
    #: since when the agent has not answered
    stale_since: Optional[float] = None
    stale_error: str = ""
    #: the agent stopped answering (rather than the node failing to be read)
    agent_gone: bool = False
    #: what the allocation lock is waiting for, when a launch waits on it
    lock_waiting: Optional[str] = None
    #: TUNEPLANE_ALLOW_UNVERIFIED: cards are handed out even while probe-blind
    unverified_allowed: bool = False
    #: the caller as the node named them (None until the node has answered)
    you: Optional[You] = None
    #: where the node is served from: its agent's socket, or this process
    served: str = ""
    #: the same in a word, for a short terminal: "agent" or "in-process"
    via: str = ""


def lock_line(snap: Optional[NodeSnapshot]) -> Optional[str]:
    """What the allocation lock means for a launch now: what a launch under
    way waits for, else who holds the lock or that Redis cannot be reached,
    as the node found it: a launch would wait, and the operator should know
    before pressing l."""
    if snap is None:
        return None
    waiting = next((q.waiting_for for q in snap.queue if q.state == WAITING and q.waiting_for), None)
    return waiting or snap.lock_state


def you_text(you: You) -> str:
    """ "alice · operator", or "bob · 1 of at most 2 cards" where a card limit applies."""
    words = [you.user]
    if you.operator:
        words.append("operator")
    if you.card_limit is not None:
        words.append(f"{you.cards_held} of at most {cards_words(you.card_limit)}")
    return " · ".join(words)


def _who_line(poll: PollState, compact: bool = False) -> Text:
    """Who you are and where the node is served from; ``compact`` says where in
    a word, to follow the first line on a short terminal."""
    out = Text()
    if poll.you is not None:
        out.append(f" {you_text(poll.you)} ", style="bold")
        out.append("│ ")
    else:
        out.append(" ")
    out.append(poll.via if compact else poll.served, style="grey62")
    if poll.agent_gone:
        out.append(" (not answering; reconnecting)", style="bold #ef5350")
    return out


def _not_read_yet(out: Text, poll: PollState) -> Text:
    """The header before any reading: why not yet, and who you are."""
    if poll.stale_since is not None:
        out.append(" NOTHING READ YET ", style="bold white on #c62828")
        failing = "agent not answering" if poll.agent_gone else "polls failing"
        out.append(f" {failing} since {clock_time(poll.stale_since)}", style="grey62")
    else:
        out.append("  reading the node…", style="grey62")
    return out + Text("\n") + _who_line(poll)


def _free_words(snap: NodeSnapshot, stale: bool) -> str:
    """ "│ 3/8 free ", unknown while stale, and said unverified while probe-blind."""
    return f"│ {free_words(snap, stale)} "


def _marks(out: Text, poll: PollState) -> None:
    """Stale (or no agent) since when, else paused; and read-only."""
    if poll.stale_since is not None:
        what = "NO AGENT" if poll.agent_gone else "STALE"  # short: the line says how old the reading is
        out.append(f" {what} since {clock_time(poll.stale_since)} ", style="bold white on #c62828")
    elif poll.paused:
        out.append(" PAUSED ", style="bold black on #fbc02d")
    if poll.readonly:
        out.append(" READ-ONLY ", style="bold white on #6b6b6b")


def _age(snap: NodeSnapshot, now: float, stale: bool) -> str:
    """How old what is shown is: " updated 5s ago", " last good reading 2m00s ago"."""
    age = max(0.0, now - snap.taken_at)
    what = " last good reading" if stale else " updated"
    return f"{what} {format_duration(age)} ago" if age >= 1 else f"{what} just now"


def header_text(snap: Optional[NodeSnapshot], now: float, poll: PollState, compact: bool = False) -> Text:
    """Three lines: the node and how fresh the reading is; who you are and where
    the node is served from; its runtime, lock and whether it fences its jobs.
    ``compact``, on a short terminal: two lines that never wrap, the node's cards
    and probe after who you are, and no runtime line; never without who you are
    or the lock waiting."""
    out = Text()
    out.append(" tpnode-tui ", style="bold white on #1e63c4")
    if snap is None:
        return _not_read_yet(out, poll)
    stale = poll.stale_since is not None
    model = snap.probe.model_name or "unknown cards"
    series = f" · series {snap.series}" if snap.series and snap.series.lower() != model.lower() else ""
    out.append(f" {snap.host} ", style="bold")
    cards = f"{model}{series} │ probe {snap.probe.source}"
    if not compact:
        out.append(f"│ {cards} ")
    out.append(_free_words(snap, stale), style="bold")
    _marks(out, poll)
    out.append(_age(snap, now, stale), style="grey62")
    out.append("\n")
    out.append_text(_who_line(poll, compact=compact))
    if compact:
        # Two lines that never wrap (dashboard.tcss): a phrase split over two ("updated" /
        # "just now") reads as two facts. The cards go after who you are; a line too long ends in "…".
        out.append(f" │ {cards}", style="grey62")
    else:
        out.append("\n")
        out.append(f" runtime {snap.runtime} · lock {snap.lock} · ", style="grey62")
        out.append_text(fence_text(snap))
    if poll.lock_waiting:
        out.append(f"\n {poll.lock_waiting}", style="bold #ffb300")
    return out


def _stale_banner(snap: Optional[NodeSnapshot], poll: PollState) -> Optional[Text]:
    """Why what is shown may be out of date, and what is shown meanwhile (None while it is not)."""
    if poll.stale_since is None:
        return None
    return Text(stale_banner(snap is not None, clock_time(poll.stale_since), poll.stale_error, poll.agent_gone))


def fence_text(snap: NodeSnapshot) -> Text:
    """Whether the node fences its jobs to their cards, in a word or two: "jobs
    fenced", or "no fence" marked. Each job's detail says by what, or why not."""
    if snap.node_fence.fenced:
        return Text("jobs fenced", style="grey62")
    return Text("no fence", style=f"bold {WARNING}")


def _blind_banner(snap: Optional[NodeSnapshot], poll: PollState, compact: bool) -> Optional[Text]:
    """Use from outside cannot be probed: why, and what it means for launches (None while it can)."""
    words = blind_banner(snap, poll.unverified_allowed, compact)
    return None if words is None else Text(words)


def banner_lines(snap: Optional[NodeSnapshot], poll: PollState, compact: bool = False) -> list[tuple[str, Text]]:
    """(banner name, text) for each banner that applies now, most urgent first;
    ``compact`` keeps the blind banner's explanation to one short line, so a
    short terminal still shows the jobs table."""
    banners = (("stale", _stale_banner(snap, poll)), ("blind", _blind_banner(snap, poll, compact)))
    return [(name, text) for name, text in banners if text is not None]


def summary_text(snap: NodeSnapshot, poll: PollState) -> Text:
    intruders = intruder_summary(snap)
    if poll.stale_since is None:
        out = Text(snap.explain)
        if intruders:
            out.append("; ")
            out.append(intruders, style="bold #ef5350")
        return out
    out = Text("Now unknown. ", style="bold #ef5350")
    said = f"{snap.explain}; {intruders}" if intruders else snap.explain
    out.append(f"The last good reading said: {said}", style="grey62")
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
