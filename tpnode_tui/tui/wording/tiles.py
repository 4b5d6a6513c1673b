"""What a card's tile says: its badge, who holds it, its memory, its readings and what needs attention.

A tile has a fixed height and is one of several on a line, so every line is
cut to the tile's width (``fit``), and what needs attention most takes the
last line (an intruder, a warning, a drain), ahead of the job's time.
"""

from __future__ import annotations

from typing import Optional

from rich.cells import cell_len
from rich.text import Text

from tpnode_tui.model.views import CardView, Drain
from tpnode_tui.text.badges import STALE_BADGE, badge, symbol
from tpnode_tui.text.cards import STATE_NOTES, UNKNOWN_UNTIL_READ, drained_by, memory_words, readings, who_words
from tpnode_tui.text.render import card_summary, format_duration
from tpnode_tui.tui.wording.cells import fit
from tpnode_tui.tui.wording.marks import DRAINED_TEXT, ERROR, WARNING
from tpnode_tui.tui.wording.times import short_duration

#: how the line under the badge is styled, by the card's state (bold for the rest)
SUMMARY_STYLE = {
    "free": "grey62",
    "unverified": "grey62",
    "unhealthy": f"bold {ERROR}",
    "drained": f"bold {DRAINED_TEXT}",
}

#: the style of a tile's last line in a state that needs no more than a word (text/cards.py's STATE_NOTES)
STATE_NOTE_STYLE = {"unhealthy": ERROR, "external": "#ffb300", "unverified": "grey62"}


def memory_bar(used: Optional[int], total: Optional[int], width: int, dim: bool) -> Text:
    label = memory_words(used, total)
    bar_width = max(0, width - len(label) - 1)
    line = Text()
    if bar_width >= 3 and used is not None and total:
        share = min(1.0, max(0.0, used / total))
        filled = round(share * bar_width)
        colour = "#4caf50" if share < 0.5 else "#fbc02d" if share < 0.9 else "#e53935"
        line.append("█" * filled, style="grey50" if dim else colour)
        line.append("░" * (bar_width - filled), style="grey35")
        line.append(" ")
    elif bar_width >= 3:
        line.append("·" * bar_width + " ", style="grey35")
    line.append(label)
    return line


def short_profile(profile: Optional[str]) -> str:
    """A MIG profile as a tile has room for it: "1g.18gb" -> "1g", "1c.3g.71gb" -> "1c.3g"."""
    if not profile:
        return "?"
    return profile.rsplit(".", 1)[0] if profile.count(".") > 1 else profile.split(".", 1)[0]


def slice_strip(card: CardView, width: int, stale: bool) -> Text:
    """A MIG card's slices on one line, each its profile after its state's mark
    in its state's colour: what a tile shows in place of the card's
    utilisation, which the driver does not report in MIG mode."""
    line = Text()
    for n, piece in enumerate(card.slices):
        colour = "grey50" if stale else badge(piece.state)[1]
        mark, profile = ("" if n == 0 else " ") + symbol(piece.state), short_profile(piece.facts.profile)
        room = width - (0 if n == len(card.slices) - 1 else 2)  # what is left must take " …"
        if cell_len(line.plain) + len(mark) + cell_len(profile) > room:
            line.append(" …", style="grey62")
            break
        line.append(mark, style=colour)
        line.append(profile, style="grey62" if stale else "")
    return line


def drain_note(drain: Drain, now: float) -> str:
    """ "by ana, 2h00m ago", "by XID 79, 5m00s ago" (the badge says drained)."""
    return f"by {drained_by(drain)}, {format_duration(now - drain.at)} ago"


def _attention(card: CardView, now: float) -> Optional[tuple[str, str]]:
    """What needs attention on the card, if anything: it comes before the job's time.
    Someone else's process on a held card is in the error colour: the card's
    holder is losing memory and speed to it now."""
    if card.state == "unhealthy":
        return _state_note("unhealthy")
    if card.warning:
        return f"! {card.warning}", f"bold {ERROR}" if card.intruders else f"bold {WARNING}"
    if card.state == "drained" and card.drain is not None:
        return drain_note(card.drain, now), DRAINED_TEXT
    return None


def _time_note(card: CardView, now: float) -> str:
    """How long the job has run, or how long the reservation has left ("" for neither)."""
    job = card.job
    if card.state == "reservation" and job and job.expires_at:
        left = job.expires_at - now
        return ("ends in " + format_duration(left)) if left > 0 else "expired, ending"
    if card.state == "job" and job and job.started_at:
        return f"up {format_duration(now - job.started_at)}"
    return ""


def _state_note(state: str) -> tuple[str, str]:
    return STATE_NOTES.get(state, ""), STATE_NOTE_STYLE.get(state, "")


def tile_note(card: CardView, now: float) -> tuple[str, str]:
    """The tile's last line and its style: what needs attention, or the job's time."""
    attention = _attention(card, now)
    if attention is not None:
        return attention
    timed = _time_note(card, now)
    if timed:
        return timed, ""
    return _state_note(card.state)


def unused_marks(
    now: float, idle_since: Optional[float], releases_at: Optional[float], held_since: Optional[float]
) -> tuple[list[str], str]:
    """What the head says of a holder not using the card, longest first, and its style:
    a reservation the node releases soon (the countdown), one unused for a while, or
    a job idle-held."""
    if releases_at is not None:
        left = releases_at - now
        if left <= 0:
            return [" releasing"], f"bold {ERROR}"
        return [f" releases in {short_duration(left)}", f" frees {short_duration(left)}", " frees"], f"bold {ERROR}"
    if idle_since is not None:
        return [f" idle {short_duration(now - idle_since)}", " idle"], f"bold {WARNING}"
    if held_since is not None:
        return [f" idle-held {short_duration(now - held_since)}", " idle-held"], f"bold {WARNING}"
    return [], ""


def _head(
    card: CardView,
    width: int,
    now: float,
    stale: bool,
    idle_since: Optional[float],
    releases_at: Optional[float] = None,
    held_since: Optional[float] = None,
) -> Text:
    """The card's index and badge, and what is said of its holder not using it
    (how long an idle reservation has not been used, when the node releases it,
    how long a job has held it idle)."""
    label, colour = STALE_BADGE if stale else badge(card.state)
    head = Text()
    head.append(f"{card.index:<2} ", style="bold")
    head.append(f" {label} ", style=f"bold white on {colour}")
    if not stale:
        # on one line whatever the width: a wrapped head would push the tile's last line
        # (an intruder's name, say) out of its fixed height; short of room a mark keeps
        # its word and drops the time
        marks, style = unused_marks(now, idle_since, releases_at, held_since)
        fits = [mark for mark in marks if len(head) + len(mark) <= width]
        if fits:
            head.append(fits[0], style=style)
    head.truncate(width)
    return head


def moves_with_time(
    card: CardView,
    idle_since: Optional[float] = None,
    releases_at: Optional[float] = None,
    held_since: Optional[float] = None,
) -> bool:
    """Whether :func:`render_tile` words the card differently as time passes, the
    card as it is: a drain's age, a job's time, the marks of an unused
    reservation or an idle-held job. A tile whose words do not is worded again
    only when its card changes (tui/widgets/tiles.py); anything here that
    comes to read the clock must be named here."""
    return card.drain is not None or card.job is not None or (idle_since, releases_at, held_since) != (None, None, None)


def render_line(
    card: CardView,
    width: int,
    now: float,
    stale: bool,
    idle_since: Optional[float] = None,
    *,
    releases_at: Optional[float] = None,
    held_since: Optional[float] = None,
) -> Text:
    """A card on one line, where every card must show on a short terminal: its
    index and badge, what needs attention on it ("! intruder"), what is said of
    its holder not using it (in its shortest words), who holds it or why it is
    not free, and its utilisation at the right.
    The detail pane has the rest of the selected card."""
    head = _head(card, width, now, stale, None)
    summary, _, warned = (card_summary(card) or ("nothing holds it" if card.state == "free" else "")).partition(" ! ")
    if not stale:
        # what needs attention goes first, where the holder's name cannot push it out
        if warned:
            head.append(f" ! {warned}", style=f"bold {ERROR}" if card.intruders else f"bold {WARNING}")
        marks, style = unused_marks(now, idle_since, releases_at, held_since)
        if marks and len(head) + len(marks[-1]) <= width:
            head.append(marks[-1], style=style)
    f = card.facts
    util = f" {f.utilization_pct}%" if f is not None and f.utilization_pct is not None and not stale else ""
    if stale:
        who, style = f"was {badge(card.state)[0].lower()}" + (f": {summary}" if summary else ""), "grey62"
    else:
        who, style = summary, SUMMARY_STYLE.get(card.state, "")
    room = width - len(head) - 1 - len(util)
    out = head
    if room > 0:
        said = fit(who, room)
        out.append(" ")
        out.append(said, style=style)
        out.append(" " * (room - cell_len(said)))
        out.append(util, style="grey62")
    out.truncate(width)
    return out


def render_tile(
    card: CardView,
    width: int,
    now: float,
    stale: bool,
    idle_since: Optional[float] = None,
    spark: Optional[Text] = None,
    *,
    releases_at: Optional[float] = None,
    held_since: Optional[float] = None,
) -> Text:
    """``idle_since``: the card's reservation has not been used since then;
    ``spark``: the utilisation line, where the tile has room for it;
    ``releases_at``: the node releases the card's reservation then unless used;
    ``held_since``: the card's job has been idle-held since then."""
    who = who_words(card, stale)
    if stale:
        # the banner says why: polls failing, or the node's agent not answering
        note, note_style = UNKNOWN_UNTIL_READ, "grey62"
        summary_style = "grey62"
    else:
        note, note_style = tile_note(card, now)
        summary_style = SUMMARY_STYLE.get(card.state, "bold")

    f = card.facts
    lines = [
        _head(card, width, now, stale, idle_since, releases_at, held_since),
        Text(fit(who, width), style=summary_style),
        memory_bar(f.memory_used_mib if f else None, f.memory_total_mib if f else None, width, stale),
        slice_strip(card, width, stale)
        if card.slices
        else Text(fit(readings(card), width), style="grey62" if stale else ""),
    ]
    if spark is not None:
        lines.append(Text(spark.plain, style="grey50") if stale else spark)
    lines.append(Text(fit(note, width), style=note_style))
    return Text("\n").join(lines)
