"""What the detail pane says about the selected card: everything known about it, in full sentences.

This is where triage happens ("who is on card 5?"), so nothing is left out for
lack of a name: a holder this machine cannot see is still listed with its pid
and memory, and memory in use with no process at all is said out loud.
"""

from __future__ import annotations

from typing import Optional, Sequence

from rich.cells import cell_len
from rich.text import Text

from tpnode_tui.model.checks import CardCheck
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.views import EXTERNAL, HOLDER, INTRUDER, UNKNOWN, CardView, Drain, HolderInfo, SliceView
from tpnode_tui.text.badges import STALE_BADGE, STATE_MEANING, badge
from tpnode_tui.text.cards import drain_until, readings
from tpnode_tui.text.render import (
    NA,
    describe_holder,
    fence_words,
    format_duration,
    format_mib,
    show_command,
    slice_name,
    slice_summary,
    unseen_use,
)
from tpnode_tui.text.render import clock_time as moment
from tpnode_tui.tui.wording.marks import DRAINED_TEXT, ERROR, PASSED_TEXT, WARNING
from tpnode_tui.tui.wording.times import clock_time

#: whose a process on the card is (HolderInfo.belongs), as the pane marks it
BELONGS_MARK = {
    HOLDER: ("holder", "#66bb6a"),
    INTRUDER: ("intruder", f"bold {ERROR}"),
    EXTERNAL: ("external", WARNING),
    UNKNOWN: ("unknown", "grey62"),
}


#: the key column of the pane's rows ("  memory  ")
KEY_WIDTH = 10


def workload(job: JobState) -> str:
    """What a job runs, on one line. A reservation's workload is only a wait."""
    if job.kind == "reservation":
        return "holds its cards until it expires"
    parts = []
    if job.image:
        parts.append(f"image {job.image}")
    if job.command:
        parts.append(show_command(job.command))
    return " ".join(parts) or NA


def _times(job: JobState, now: float) -> str:
    """Since and until when: "started 10:00:00 (5m00s ago) · expires 12:00:00 (in 1h55m)"."""
    times = []
    if job.started_at:
        times.append(f"started {clock_time(job.started_at)} ({format_duration(now - job.started_at)} ago)")
    if job.expires_at:
        left = job.expires_at - now
        when = f"in {format_duration(left)}" if left > 0 else "passed; it is ending"
        times.append(f"expires {clock_time(job.expires_at)} ({when})")
    return " · ".join(times)


def job_lines(job: JobState, now: float) -> list[tuple[str, str]]:
    """A job in a few lines: who and where, what it runs, since and until when,
    and whether it can open only its own cards' device files (and if not, why not)."""
    status = job.status if job.exit_code is None else f"{job.status} (exit code {job.exit_code})"
    facts = [f"{job.run_id or job.name}", status + (f", pid {job.pid}" if job.pid else "")]
    facts.append(f"owner {job.owner or 'not recorded'}")
    facts.append(job.holding)
    rows = [("run id", " · ".join(facts)), ("runs", workload(job))]
    times = _times(job, now)
    if times:
        rows.append(("time", times))
    rows.append(("fence", fence_words(job.device_fence)))
    if job.shell_processes:
        n = job.shell_processes
        rows.append(("shell", f"{n} process{'es' if n > 1 else ''} in its shell (tpnode-tui shell): in use"))
    rows.extend(("problem", problem) for problem in job.problems)
    return rows


def drain_source(
    drain: Drain,
    now: float,
    check: Optional[CardCheck] = None,
    returns: Optional[bool] = None,
    boot: Optional[str] = None,
) -> str:
    """Who drained the card and when, and until when it stays out of service
    (text/cards.py drain_until): "by ana, an operator, at 10:00 (2h00m ago); it stays ..."."""
    when = f"at {moment(drain.at, now)} ({format_duration(now - drain.at)} ago)"
    until = drain_until(drain, check, returns, boot)
    if drain.source == "xid":
        xid = f" on XID {drain.xid}" if drain.xid is not None else ""
        return f"by the XID watcher{xid}, {when}; {until}"
    if drain.source == "check":
        return f"by the node, {when}, for a failed check; {until}"
    return f"by {drain.by}, an operator, {when}; {until}"


#: how the pane colours a check, by how it ended
CHECK_STYLE = {"passed": PASSED_TEXT, "failed": f"bold {ERROR}", "unknown": f"bold {WARNING}"}


def check_rows(check: CardCheck, now: float) -> list[tuple[str, str, str]]:
    """The card's last check: how it ended, when and by whom, what the node did
    with the card after it, then each criterion it did not pass (key, value, style)."""
    when = f"{moment(check.at, now)} ({format_duration(now - check.at)} ago), by {check.by}"
    head = "passed" if check.passed else "failed" if check.outcome == "failed" else "could not tell"
    effect = f"; {check.effect}" if check.effect else ""
    rows = [("check", f"{head} at {when}{effect}", CHECK_STYLE.get(check.outcome, ""))]
    rows += [("", f"{f.name}: {f.words}", "") for f in check.against]
    if check.command is not None and not check.passed and check.command.tail:
        rows.append(("", f"its command said: {check.command.tail[-1]}", "grey62"))
    return rows


def holder_text(holder: HolderInfo) -> Text:
    """A process on the card, marked with whose it is."""
    mark, style = BELONGS_MARK.get(holder.belongs, (holder.belongs, ""))
    out = Text()
    out.append(f"{mark:<9}", style=style)
    out.append(describe_holder(holder))
    return out


def slice_lines(out: Text, card: int, piece: SliceView) -> None:
    """One MIG slice in the pane: "1:3  JOB  1g.18gb  nb (bob)  13 MiB of 16.0 GiB", then why
    and what is wrong, its processes, and its uuid (what CUDA_VISIBLE_DEVICES names)."""
    label, colour = badge(piece.state)
    out.append(f"  {slice_name(card, piece.index):<{KEY_WIDTH - 2}}", style="grey62")
    out.append(f" {label} ", style=f"bold white on {colour}")
    f = piece.facts
    # who holds it on this line; why one is not free goes on the next, in full
    summary = slice_summary(piece) if piece.state in ("job", "reservation", "external") else ""
    out.append(f"  {f.profile or 'profile unknown'}" + (f"  {summary}" if summary else ""))
    out.append(f"  {format_mib(f.memory_used_mib)} of {format_mib(f.memory_total_mib)}\n", style="grey62")
    pad = " " * KEY_WIDTH
    if piece.warning:
        out.append(f"{pad}! {piece.warning}\n", style=f"bold {ERROR}" if piece.intruders else f"bold {WARNING}")
    elif piece.reason and piece.state not in ("job", "reservation") and not piece.holders:
        out.append(f"{pad}{piece.reason}\n", style="grey62")  # its processes, where it has some, say why
    for holder in piece.holders:
        out.append(pad)
        out.append_text(holder_text(holder))
        out.append("\n")
    if f.uuid:
        out.append(f"{pad}{f.uuid}\n", style="grey50")


def _row(out: Text, key: str, value: str, style: str = "") -> None:
    """One line of the pane: a key in the key column, then its value."""
    out.append(f"  {key:<{KEY_WIDTH - 2}}", style="grey62")
    out.append(value + "\n", style=style)


def _headline(out: Text, card: CardView, stale: Optional[str]) -> None:
    """The card, its badge and what the state means; stale, what the last good reading said, and why."""
    label, colour = badge(card.state)
    out.append(f"Card {card.index}  ", style="bold")
    if stale:
        out.append(f" {STALE_BADGE[0]} ", style=f"bold white on {STALE_BADGE[1]}")
        out.append(f"  unknown now; the last good reading said {label.lower()}: {STATE_MEANING.get(card.state, '')}\n")
        out.append(f"  {stale}\n", style="bold #ef5350")
    else:
        out.append(f" {label} ", style=f"bold white on {colour}")
        out.append(f"  {STATE_MEANING.get(card.state, '')}\n")


def _holding_rows(out: Text, card: CardView, now: float) -> None:
    """Who holds the card: its job, or at least its run id."""
    if card.job is not None:
        for key, value in job_lines(card.job, now):
            _row(out, key, value, "bold" if key == "run id" else "")
    elif card.run_id:
        _row(out, "run id", card.run_id, "bold")


def _attention_rows(out: Text, card: CardView, now: float, returns: Optional[bool], boot: Optional[str]) -> None:
    """What needs attention first: why the card is out of service and until when, or what is wrong on it."""
    if card.state == "unhealthy":
        _row(out, "health", f"not handed out: {card.reason}", f"bold {ERROR}")
    if card.warning:
        _row(out, "warning", card.warning, f"bold {ERROR}" if card.intruders else f"bold {WARNING}")
    if card.drain is not None:
        _row(out, "drained", card.drain.reason, f"bold {DRAINED_TEXT}")
        _row(out, "", drain_source(card.drain, now, card.check, returns, boot))
    if card.check is not None:
        for key, value, style in check_rows(card.check, now):
            _row(out, key, value, style)
    if card.state == "unverified" and card.reason:
        _row(out, "why", card.reason)


def _unused_rows(
    out: Text, card: CardView, now: float, releases_at: Optional[float], held_since: Optional[float]
) -> None:
    """What the node says of the holder not using the card: when it releases the
    reservation (the countdown, and how to keep it), or since when the job has
    held its cards idle (a mark only: it is never stopped for it)."""
    job = card.job
    owner = (job.owner if job is not None else "") or "its owner"
    if releases_at is not None:
        left = releases_at - now
        when = f"in {format_duration(left)}" if left > 0 else "now"
        _row(
            out,
            "release",
            f"by the node at {moment(releases_at, now)} ({when}), left unused, unless {owner} uses it "
            "or extends it (+)",
            f"bold {ERROR}",
        )
    if held_since is not None:
        _row(
            out,
            "idle",
            f"idle-held: every card of it at 0 % with memory held since {moment(held_since, now)} "
            f"({format_duration(now - held_since)}); it keeps running",
            f"bold {WARNING}",
        )


def _process_rows(out: Text, card: CardView, mem_busy_mib: int) -> None:
    """Whose each process is. On a MIG card each slice lists its own processes
    (below); the card lists only those no slice could be told for, so none is
    shown twice or lost. With none, why: the list could not be read, or memory
    is in use with no process this machine can see."""
    f = card.facts
    on_slices = {h.pid for piece in card.slices for h in piece.holders}
    holders = [h for h in card.holders if h.pid not in on_slices]
    if holders:
        for holder in holders:
            out.append(f"  {'process':<{KEY_WIDTH - 2}}", style="grey62")
            out.append_text(holder_text(holder))
            out.append("\n")
    elif f is not None and f.processes is None:
        out.append("  The driver's process list could not be read.\n", style="#ffb300")
    elif card.slices:
        pass  # memory in use on a MIG card is its slices', said with each
    elif f is not None and f.memory_used_mib is not None and f.memory_used_mib >= mem_busy_mib:
        out.append(f"  {unseen_use(f.memory_used_mib, long=True)}\n", style="#ffb300")


def _env_rows(out: Text, run_id: str, env: Sequence[str], width: int) -> None:
    """The exports that point CUDA at the job's cards, each on one line of the
    ``width`` the text gets (0: any): a line that would wrap could not be
    pasted, so one too long is named instead, with the command that prints it."""
    room = width - KEY_WIDTH if width > 0 else None
    fits = [line for line in env if room is None or cell_len(line) <= room]
    for n, line in enumerate(fits):
        _row(out, "env" if n == 0 else "", line, "#4fc3f7")
    for line in env:
        if line not in fits:
            name = line.removeprefix("export ").split("=", 1)[0]
            _row(
                out,
                "env" if not fits else "",
                f"{name} is too long to show here: tpnode-tui env {run_id} prints it",
                "grey62",
            )


def _fact_rows(out: Text, card: CardView) -> None:
    """The card's memory, readings and identity, as the probe reported them."""
    f = card.facts
    if f is not None:
        _row(
            out,
            "memory",
            f"{format_mib(f.memory_used_mib)} used of {format_mib(f.memory_total_mib)} · {readings(card)}",
        )
        _row(out, "card", f"{f.name or NA} · uuid {f.uuid or NA} · PCI {f.pci_bus_id or NA}")
    else:
        out.append("  The probe reported nothing about this card.\n", style="grey62")


#: where a fact is cut when it has to be: between two facts, else between two words
BREAKS = (" · ", " ")


def _break_at(plain: str, start: int, room: int) -> int:
    """Where the line from ``start`` ends so that it takes at most ``room``
    cells: after the last " · " that fits, else the last space, else at the
    edge (one word longer than the line)."""
    window = plain[start : start + room + 1]
    for mark in BREAKS:
        at = window.rfind(mark)
        if at > 0:
            cut = start + at + len(mark)
            while cut < len(plain) and plain[cut] == " ":  # spaces end the line above, never start the next
                cut += 1
            return cut
    return start + room


def hang(line: Text, width: int) -> list[Text]:
    """``line`` in lines of at most ``width`` cells, each one after the first
    under the value column (a row's key stays alone on its left), broken
    between two facts where it can be: a uuid, a PCI address or an export is
    never split from its name or over two lines, as the terminal's own
    wrapping would, back at the pane's left edge."""
    plain = line.plain
    indent = KEY_WIDTH if plain.startswith(" ") else 2
    if width <= indent + 8 or cell_len(plain) <= width:
        return [line]
    cuts, start, room = [], 0, width
    while cell_len(plain[start:]) > room:
        start = _break_at(plain, start, room)
        cuts.append(start)
        room = width - indent
    pieces = line.divide(cuts)
    out = [pieces[0]]
    for piece in pieces[1:]:
        piece.rstrip()
        out.append(Text(" " * indent) + piece)
    for piece in out[:-1]:
        piece.rstrip()
    return out


def describe_card(
    card: CardView,
    now: float,
    mem_busy_mib: int,
    stale: Optional[str] = None,
    env: Sequence[str] = (),
    width: int = 0,
    *,
    releases_at: Optional[float] = None,
    held_since: Optional[float] = None,
    returns: Optional[bool] = None,
    boot: Optional[str] = None,
) -> Text:
    """Everything known about ``card``: who holds it, what needs attention, whose
    each process is, then its slices and its facts. ``stale``: why it may be out
    of date; ``env``: the lines that point CUDA at the card's job, for its owner
    to copy into a shell, each on one line of the ``width`` the text gets (0: any);
    ``releases_at``: the node releases its reservation then unless used;
    ``held_since``: its job has been idle-held since then; ``returns`` and ``boot``:
    what lifts a drain on this node (the snapshot's return_after_check and boot)."""
    out = Text()
    _headline(out, card, stale)
    _holding_rows(out, card, now)
    # What needs attention first, then whose each process is: this is where
    # "who is on card 5, and why is it out of service?" is answered.
    _attention_rows(out, card, now, returns, boot)
    if not stale:
        _unused_rows(out, card, now, releases_at, held_since)
    _process_rows(out, card, mem_busy_mib)
    if card.job is not None:
        _env_rows(out, card.job.key, env, width)
    for piece in card.slices:
        slice_lines(out, card.index, piece)
    _fact_rows(out, card)
    out.rstrip()
    if width <= 0:
        return out
    return Text("\n").join(piece for line in out.split("\n") for piece in hang(line, width))
