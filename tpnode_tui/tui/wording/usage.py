"""The usage view's picture: a bar per account of the card-hours it held, used and left idle, and the node's total.

A bar is drawn, not only numbers, so who sat on the cards shows at a glance:
its length is the card-hours held (the node's total is the longest), and it
is split into what was used (held time weighted by utilisation), what sat
idle (no process of the holder on the card, or under 5 %) and the rest of
the time held (a card worked below full utilisation, or not read). Each part
has its own mark as well as its own colour, so it reads without colour too.
The figures beside it are the report's, as ``tpnode-tui usage`` prints them.
"""

from __future__ import annotations

import time
from typing import Optional

from rich.text import Text

from tpnode_tui.model.usage import IDLE_UTIL_PCT, UsageFigures, UsageReport, UsageRow
from tpnode_tui.text.render import format_mib
from tpnode_tui.text.usage import intruders
from tpnode_tui.tui.wording.marks import ERROR, WARNING

#: (mark, colour) of each part of a bar: used, held but neither used nor idle, idle
USED = ("█", "#4fc3f7")
HELD = ("▒", "#1e63c4")
IDLE = ("░", WARNING)
#: the width of the accounts' names (a longer one is cut, ending "…")
NAME_MOST = 16
#: the figures' columns: (heading, width)
FIGURES = (("held", 9), ("used", 9), ("idle", 9))
SLICES = ("slices", 9)
#: shown where someone else's process was on a held card in the span
INTRUDED = ("intruded", 10)
COUNTS = (("jobs", 6), ("resv.", 6))
#: the fewest columns a bar is given, however narrow the view
BAR_LEAST = 8
GAP = "  "


def parts(figures: UsageFigures, scale: float, width: int) -> tuple[int, int, int]:
    """The columns of a bar ``width`` long, at ``scale`` card-hours to its full length:
    (used, held and neither, idle). Anything held shows as one column at least."""
    if scale <= 0 or width <= 0 or figures.held_card_hours <= 0:
        return (0, 0, 0)
    held = min(width, max(1, round(figures.held_card_hours / scale * width)))
    used = min(held, round(figures.used_card_hours / scale * width))
    idle = min(held - used, round(figures.idle_card_hours / scale * width))
    return used, held - used - idle, idle


def bar(figures: UsageFigures, scale: float, width: int) -> Text:
    """The bar, padded to ``width``."""
    out = Text()
    for (mark, colour), count in zip((USED, HELD, IDLE), parts(figures, scale, width)):
        out.append(mark * count, style=colour)
    out.append(" " * (width - len(out)))
    return out


def legend() -> Text:
    out = Text()
    for (mark, colour), words in (
        (USED, "used: held time × utilisation"),
        (HELD, "held, not used"),
        (IDLE, f"idle: no process of the holder, or under {IDLE_UTIL_PCT:g} %"),
    ):
        out.append(mark * 2, style=colour)
        out.append(f" {words}   ")
    out.append("In card-hours; the longest bar is the node's total.", style="grey62")
    return out


def when(at: float) -> str:
    return time.strftime("%d %b %H:%M", time.localtime(at))


def _name(row: Optional[UsageRow]) -> str:
    if row is None:
        return "total"
    name = row.user or "(no owner recorded)"
    return name if len(name) <= NAME_MOST else name[: NAME_MOST - 1] + "…"


def _columns(report: UsageReport) -> tuple[tuple[str, int], ...]:
    slices = any(f.held_slice_hours for f in (report.total, *(r.figures for r in report.rows)))
    return (*FIGURES, *((SLICES,) if slices else ()), *((INTRUDED,) if intruders(report) else ()), *COUNTS)


def _numbers(figures: UsageFigures, columns: tuple[tuple[str, int], ...]) -> str:
    values = {
        "held": f"{figures.held_card_hours:.2f}",
        "used": f"{figures.used_card_hours:.2f}",
        "idle": f"{figures.idle_card_hours:.2f}",
        "slices": f"{figures.held_slice_hours:.2f}",
        "intruded": f"{figures.intruded_card_hours:.2f}",
        "jobs": str(figures.jobs),
        "resv.": str(figures.reservations),
    }
    return "".join(values[heading].rjust(width) for heading, width in columns)


def span_lines(title: str, report: UsageReport, width: int) -> list[Text]:
    """One span's picture ``width`` columns wide: its heading, a bar per account
    (the caller's own, unless an operator asks), and the node's total."""
    heading = Text.assemble((title, "bold"), (f"   {when(report.since)} to {when(report.until)}", "grey62"))
    columns = _columns(report)
    bar_w = max(BAR_LEAST, width - len(GAP) - NAME_MOST - len(GAP) - sum(w for _, w in columns))
    head = " " * (len(GAP) + NAME_MOST + len(GAP) + bar_w) + "".join(h.rjust(w) for h, w in columns)
    named = [(_name(r), r.figures, "") for r in report.rows] + [(_name(None), report.total, "bold")]
    scale = max(f.held_card_hours for _, f, _ in named)
    lines = [heading, Text(head, style="grey62")]
    for name, figures, style in named:
        # the names as wide in every span, so that their bars start together
        line = Text(GAP + name.ljust(NAME_MOST) + GAP, style=style)
        line.append_text(bar(figures, scale, bar_w))
        line.append(_numbers(figures, columns), style=style)
        lines.append(line)
    if not report.rows:
        lines.insert(2, _note(f"{'nothing was held' if report.everyone else 'nothing of yours was held'} in this span"))
    if report.left_out:
        lines.append(_note(f"{report.left_out} smaller accounts are left out; the total counts them"))
    if intruders(report):
        lines.append(_intruded(report.total))
    for line in lines:  # cut, never wrapped: a bar broken over two lines reads as two
        line.no_wrap, line.overflow = True, "ellipsis"
    return lines


def _intruded(total: UsageFigures) -> Text:
    """Someone else's use of the held cards, said apart: it is never the holder's."""
    theirs = total.intruder_peak_memory_mib
    most = f", using up to {format_mib(theirs)}" if theirs is not None else ""
    return Text(
        GAP + f"intruded: someone else's process was on a held card for {total.intruded_card_hours:.2f} "
        f"card-hours{most}; not counted as its holder's use",
        style=f"bold {ERROR}",
    )


def _note(words: str) -> Text:
    return Text(GAP + words, style="grey62")


def whose_words(everyone: bool) -> str:
    """Whose rows the view shows, as the node decided."""
    if everyone:
        return "Every account's, as the node's agent recorded them (you operate this node)."
    return "Yours, and the whole node's total (an operator sees every account's), as the agent recorded them."


def read_words(at: float, reading: bool) -> str:
    if reading:
        return "Reading the node's usage…"
    return f"As of {time.strftime('%H:%M:%S', time.localtime(at))}. r reads again; escape closes."


def problem_text(problem: str) -> Text:
    """Why the node's usage cannot be shown, in the node's own words."""
    return Text.assemble(("Usage could not be read: ", "bold #ef5350"), problem)
