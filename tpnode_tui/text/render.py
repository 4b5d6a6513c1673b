"""Plain-text wording shared by the CLI and the dashboard, so both say the same thing."""

from __future__ import annotations

import shlex
import time
from typing import Any, Mapping, Optional

from tpnode_tui.model.errors import no_running_job
from tpnode_tui.model.facts import SliceFacts
from tpnode_tui.model.jobs import DeviceFence, JobState, holding_words, visible_devices
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.model.views import CardView, HolderInfo, SliceView
from tpnode_tui.model.words import card_ranges, cards_words

__all__ = [
    "NA",
    "card_ranges",
    "cards_words",
    "holding_words",
    "show_command",
    "format_mib",
    "format_duration",
    "describe_holder",
    "unseen_use",
    "card_summary",
    "slices_summary",
    "slice_name",
    "slice_summary",
    "env_lines",
    "event_words",
]

NA = "N/A"


def show_command(argv: tuple[str, ...]) -> str:
    """An argv on one line, quoted for reading rather than pasting: a script given
    with -c keeps its newlines visible as \\n instead of breaking the line."""
    words = []
    for arg in argv:
        shown = arg.replace("\n", "\\n")
        if arg and not any(ch.isspace() or ch in "'\"\\$`;&|<>()*?" for ch in arg):
            words.append(shown)
        elif '"' not in arg:
            words.append(f'"{shown}"')
        else:
            words.append(shlex.quote(arg).replace("\n", "\\n"))
    return " ".join(words)


def fence_words(fence: DeviceFence) -> str:
    """Whether a job is fenced, in words: "fenced by a cgroup v2 device program" or "not fenced: WHY"."""
    return f"fenced by {fence.how}" if fence.fenced else f"not fenced: {fence.problem}"


def node_fence_words(fence: DeviceFence) -> str:
    """Whether a node fences its jobs: "jobs are fenced by a cgroup v2 device program" or "jobs are not fenced: WHY"."""
    return f"jobs are {fence_words(fence)}"


def format_mib(mib: Optional[int]) -> str:
    if mib is None:
        return NA
    if mib >= 1024:
        return f"{mib / 1024:.1f} GiB"
    return f"{mib} MiB"


def format_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def clock_time(when: float, now: float) -> str:
    """A moment as a person reads it on this node's clock: "14:00" within the
    day, "Tue 14:00" within the week, "3 Mar 14:00" beyond."""
    ahead = abs(when - now)
    moment = time.localtime(when)
    if ahead < 20 * 3600:
        return time.strftime("%H:%M", moment)
    if ahead < 6 * 86400:
        return time.strftime("%a %H:%M", moment)
    return f"{moment.tm_mday} {time.strftime('%b %H:%M', moment)}"


def describe_holder(holder: HolderInfo) -> str:
    """One holder in plain words, including the one this machine cannot see."""
    mem = f": {format_mib(holder.used_memory_mib)} in use" if holder.used_memory_mib is not None else ""
    if not holder.visible:
        return f"a process this machine cannot see (pid {holder.pid} from another PID namespace){mem}"
    who = holder.user or "unknown user"
    what = holder.command or "command not readable"
    where = ""
    if holder.container:
        image = f" ({holder.container_image})" if holder.container_image else ""
        where = f" in container {holder.container_name or holder.container[:12]}{image}"
    elsewhere = f" (part of platform job {holder.job_elsewhere}, not given this card)" if holder.job_elsewhere else ""
    return f"pid {holder.pid} ({who}){where}{elsewhere}: {what}{mem}"


def unseen_use(memory_used_mib: Optional[int] = None, long: bool = False) -> str:
    """Memory in use on a card whose driver lists no process at all.

    Something this machine cannot see holds it (another container's or VM's
    process). The short form fits a tile or a table cell, next to where the
    memory is shown; the long form is the sentence that explains it.
    """
    if not long:
        return "in use, no process seen"
    return (
        f"{format_mib(memory_used_mib)} of memory in use, no process seen: something this "
        "machine cannot see holds the card (another container's or VM's process)."
    )


def card_summary(card: CardView) -> str:
    """Who or what holds the card, or why it is not free, in a few words."""
    if card.state in ("job", "reservation"):
        owner = f" ({card.job.owner})" if card.job and card.job.owner else ""
        warn = ""
        if card.intruders:
            warn = " ! intruder"
        elif card.drain is not None:
            warn = " ! drained"
        elif card.warning:
            warn = " ! unhealthy"
        return f"{card.run_id}{owner}{warn}"
    if card.state in ("unhealthy", "drained"):
        return card.reason or card.state
    if card.state == "external":
        visible = [h for h in card.holders if h.visible]
        if visible:
            h = visible[0]
            cmd = (h.command or "").split(" ")[0]
            return f"pid {h.pid} {h.user or ''} {cmd}".strip()
        if card.holders:
            return f"pid {card.holders[0].pid} (not visible here)"
        return unseen_use()
    if card.state == "unverified":
        return "not probed"
    if card.state == "mig":
        return slices_summary(card) if card.slices else (card.reason or "MIG")
    return ""


def slices_summary(card: CardView) -> str:
    """A MIG card's slices in the few words a tile has room for: "2 of 5 MIG slices free"."""
    free = sum(1 for s in card.slices if s.state == "free")
    return f"{free} of {len(card.slices)} MIG slice{'s' if len(card.slices) != 1 else ''} free"


def slice_name(card: int, index: int) -> str:
    """A MIG slice as a person names it: "1:3", card 1's MIG device 3 (as
    ``docker run --gpus device=1:3`` and ``nvidia-smi -L`` number them)."""
    return f"{card}:{index}"


def slice_summary(s: SliceView) -> str:
    """Who or what holds a MIG slice, or why it is not free, in a few words
    (as :func:`card_summary` says it of a card)."""
    if s.state in ("job", "reservation"):
        owner = f" ({s.job.owner})" if s.job and s.job.owner else ""
        warn = " ! intruder" if s.intruders else (" ! " + s.warning if s.warning else "")
        return f"{s.run_id}{owner}{warn}"
    if s.state == "external":
        visible = [h for h in s.holders if h.visible]
        if visible:
            h = visible[0]
            return f"pid {h.pid} {h.user or ''} {(h.command or '').split(' ')[0]}".strip()
        if s.holders:
            return f"pid {s.holders[0].pid} (not visible here)"
        return unseen_use()
    return s.reason or ("" if s.state == "free" else s.state)


def env_lines(snap: NodeSnapshot, run_id: str) -> list[str]:
    """``export`` lines that point CUDA at a live job's cards, for ``eval``:
    what the job itself was given (:func:`visible_devices`), so a shell beside
    a reservation and a job on it see the same cards; the one difference is that
    a fenced job counts its cards from 0 in ``CUDA_VISIBLE_DEVICES``, where a
    shell outside the fence must name them as the node does."""
    job = next((j for j in snap.jobs if j.key == run_id and j.live), None)
    if job is None:
        raise no_running_job(run_id)
    return [f"export {name}={shlex.quote(value)}" for name, value in visible_devices(job.gpus, job.slices).items()]


def ended_words(job: JobState, *facts: str) -> str:
    """An ended job's kind, ``facts`` and how it ended, in parentheses: "(reservation,
    stopped)", "(job, exit code 3)". How it ended is its record's words where it
    has them (a stop, a kill), else its command's exit code; words that hold a
    parenthesis of their own follow a colon, so no parenthesis holds another."""
    how = job.note or f"exit code {'unknown' if job.exit_code is None else job.exit_code}"
    inside = ", ".join([job.kind, *facts])
    return f"({inside}): {how}" if "(" in how else f"({inside}, {how})"


def intruder_words(
    holder: HolderInfo,
    card: int,
    job: Optional[JobState],
    run_id: str,
    now: Optional[float] = None,
    on: Optional[SliceFacts] = None,
) -> str:
    """ "bob (pid 4242, python train.py, 30.0 GiB) is using card 1, reserved by alice until 14:00";
    on a slice (``on``): "... is using slice 3 (1g.18gb) of card 1, held by ..."."""
    who = holder.user or (f"uid {holder.uid}" if holder.uid is not None else "someone")
    where = f"card {card}" if on is None else f"slice {on.index} ({on.profile or 'profile unknown'}) of card {card}"
    return f"{who} ({process_words(holder)}) is using {where}, {_held_words(job, run_id, now)}"


def process_words(holder: HolderInfo) -> str:
    """ "pid 4242, python train.py, in container web, 30.0 GiB"."""
    what = [f"pid {holder.pid}"]
    if holder.command:
        command = holder.command if len(holder.command) <= 60 else holder.command[:57] + "..."
        what.append(command)
    if holder.container:
        name = holder.container_name or holder.container[:12]
        what.append(f"in container {name}")
    if holder.used_memory_mib is not None:
        what.append(format_mib(holder.used_memory_mib))
    return ", ".join(what)


def _held_words(job: Optional[JobState], run_id: str, now: Optional[float]) -> str:
    """ "reserved by alice until 14:00", "held by nb-1 of bob"."""
    owner = job.owner if job is not None and job.owner else None
    if job is not None and job.kind == "reservation":
        held = f"reserved by {owner or 'nobody recorded'}"
        if job.expires_at is not None:
            held += f" until {clock_time(job.expires_at, now if now is not None else time.time())}"
        return held
    return f"held by {run_id}" + (f" of {owner}" if owner else "")


def event_words(entry: Mapping[str, Any]) -> str:
    """A log entry's message as a line that names its cards already shows it:
    without the cards it begins with ("card 7: XID 79 ..." under card 7 reads
    "card 7: card 7: XID 79"). The message kept in the log is whole, to be
    read on its own."""
    message = entry.get("message")
    if not isinstance(message, str):
        return ""
    cards = entry.get("cards")
    if isinstance(cards, list) and cards and all(isinstance(c, int) and not isinstance(c, bool) for c in cards):
        return message.removeprefix(f"{cards_words(cards)}: ")
    return message
