"""Evicting a squatter: SIGTERM to a process that is on a card without being its holder.

``stop`` ends platform jobs only, so an operator evicts what squats on a
card: its external processes, its intruders, or the one pid named, judged on
the card as just read (on a MIG card, each on its slice); never a platform
job's, a reservation owner's, an unseen pid, pid 1 or this process. A pid is
signalled only while it is the process that was read. See
docs/architecture.md, section 'Triage' ("Evict").
"""

from __future__ import annotations

import os
import signal
import time
from typing import Optional

import psutil

from tpnode_tui.model.errors import Conflict, JobNotFound
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.views import EXTERNAL, HOLDER, INTRUDER, UNKNOWN, CardView, Evicted, HolderInfo
from tpnode_tui.text.refusals import nothing_to_evict

#: how often the grace period looks whether the processes have ended
_POLL_S = 0.05
#: how long a SIGKILLed process is given to be gone
KILL_WAIT_S = 5.0
#: the processes a refusal says why of (in its one line)
REASONS_GIVEN = 8
#: two readings of one process's start time differ by less (they come from boot-time ticks)
START_SLACK_S = 0.01

LISTED, ENDED, KILLED, RUNNING, GONE, FAILED = "listed", "ended", "killed", "running", "gone", "failed"


def _holder_of(card: CardView, pid: int) -> tuple[Optional[JobState], Optional[str], str]:
    """The job, run id and words for where ``pid`` runs: its slice's on a MIG card, else the card's."""
    for s in card.slices:
        if any(h.pid == pid for h in s.holders):
            where = f"slice {s.index} ({s.facts.profile or 'profile unknown'}) of card {card.index}"
            return s.job, s.run_id, where
    return card.job, card.run_id, f"card {card.index}"


def _refusal(card: CardView, holder: HolderInfo) -> Optional[str]:
    """Why ``holder`` may not be evicted from ``card``; None when it may."""
    if holder.pid == 1:
        return "pid 1 is the system's init process; it is never evicted"
    if holder.pid == os.getpid():
        return f"pid {holder.pid} is this node's own service"
    if not holder.visible or holder.belongs == UNKNOWN:
        return (
            f"pid {holder.pid} cannot be looked at from this machine (another PID namespace, "
            "or its owner cannot be read), so it cannot be told apart from the card's holder; "
            "it is not signalled"
        )
    if holder.started_at is None:
        return (
            f"pid {holder.pid}'s start time cannot be read, so it could not be told from another "
            "process given the same pid later; it is not signalled"
        )
    if holder.job_elsewhere is not None:
        return (
            f"pid {holder.pid} is part of platform job {holder.job_elsewhere}, using card {card.index} "
            f"though it was not given it; end the job with: tpnode-tui stop {holder.job_elsewhere}"
        )
    if holder.belongs == HOLDER:
        job, run_id, where = _holder_of(card, holder.pid)
        if job is not None and job.kind == "reservation":
            return (
                f"pid {holder.pid} belongs to {job.owner or 'the owner'}, whose reservation "
                f"{run_id} holds {where}: it is not a squatter"
            )
        return (
            f"pid {holder.pid} is part of platform job {run_id} on {where}; end the job with: tpnode-tui stop {run_id}"
        )
    return None


def targets(card: CardView, pid: Optional[int] = None, started_at: Optional[float] = None) -> list[HolderInfo]:
    """The processes evict acts on: ``pid``, or every external or intruding one.

    ``started_at`` is the start time of ``pid`` when it was shown to whoever
    asked (a confirmation can take minutes): a pid that changed hands since
    is refused, even when its new process would be evicted too, because
    nobody was asked about that one.
    """
    if pid is not None:
        holder = next((h for h in card.holders if h.pid == pid), None)
        if holder is None:
            raise JobNotFound(
                f"pid {pid} is not on card {card.index} (the driver lists "
                f"{', '.join(str(h.pid) for h in card.holders) or 'no process'} there)"
            )
        if started_at is not None and (
            holder.started_at is None or abs(holder.started_at - started_at) > START_SLACK_S
        ):
            raise Conflict(
                f"not evicted: pid {pid} on card {card.index} is no longer the process that "
                "was listed (it has ended and its pid was given to another); look again"
            )
        why = _refusal(card, holder)
        if why is not None:
            raise Conflict(f"not evicted: {why}")
        return [holder]
    found = [h for h in card.holders if h.belongs in (EXTERNAL, INTRUDER) and _refusal(card, h) is None]
    if not found:
        # why each is not, in one answer: asking pid by pid would log a refusal for each
        reasons = [_refusal(card, h) or f"pid {h.pid} ({h.belongs})" for h in card.holders[:REASONS_GIVEN]]
        if len(card.holders) > REASONS_GIVEN:
            reasons.append(f"and {len(card.holders) - REASONS_GIVEN} more processes")
        said = f": {'; '.join(reasons)}" if reasons else ""
        raise JobNotFound(nothing_to_evict(card.index, card.run_id or "") + said)
    return found


def _ended(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """The processes still running after at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    alive = [p for p in procs if not _ended(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        alive = [p for p in alive if not _ended(p)]
    return alive


def evict(card: CardView, holders: list[HolderInfo], *, grace_s: float, kill: bool) -> list[Evicted]:
    """SIGTERM each holder, wait ``grace_s``, SIGKILL what is left when ``kill``.

    Blocking (it waits out the grace period): run it off the event loop.
    """
    fates: dict[int, tuple[str, str]] = {}
    procs: dict[int, psutil.Process] = {}
    for h in holders:
        try:
            proc = psutil.Process(h.pid)
            if h.started_at is not None and abs(proc.create_time() - h.started_at) > START_SLACK_S:
                fates[h.pid] = (
                    GONE,
                    f"pid {h.pid} now belongs to another process, started after the card was read; not signalled",
                )
                continue
            proc.send_signal(signal.SIGTERM)  # psutil checks it is still the same process first
            procs[h.pid] = proc
        except psutil.NoSuchProcess:
            fates[h.pid] = (GONE, "it had ended before it was signalled")
        except psutil.AccessDenied:
            fates[h.pid] = (
                FAILED,
                "not signalled: permission denied (evicting another account's process needs root, as the agent runs)",
            )
    alive = {p.pid for p in _wait(list(procs.values()), grace_s)}
    for pid in procs:
        if pid not in alive:
            fates[pid] = (ENDED, "ended after SIGTERM")
    if alive and kill:
        for pid in alive:
            try:
                procs[pid].send_signal(signal.SIGKILL)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        still = {p.pid for p in _wait([procs[pid] for pid in alive], KILL_WAIT_S)}
        for pid in alive:
            fates[pid] = (
                (RUNNING, f"still running {KILL_WAIT_S:g} s after SIGKILL (stuck in the kernel?)")
                if pid in still
                else (KILLED, f"did not end within {grace_s:g} s of SIGTERM; killed with SIGKILL")
            )
    elif alive:
        for pid in alive:
            fates[pid] = (
                RUNNING,
                f"still running {grace_s:g} s after SIGTERM; evict it again with kill to send SIGKILL",
            )
    return [described(card, h, *fates[h.pid]) for h in holders]


def described(card: CardView, h: HolderInfo, outcome: str, fate: str) -> Evicted:
    return Evicted(
        card=card.index,
        pid=h.pid,
        user=h.user,
        uid=h.uid,
        command=h.command,
        belongs=h.belongs,
        used_memory_mib=h.used_memory_mib,
        outcome=outcome,
        fate=fate,
        started_at=h.started_at,
    )


def listed(card: CardView, holders: list[HolderInfo], kill: bool) -> list[Evicted]:
    """What a dry run says it would do."""
    then = "SIGTERM, then SIGKILL if it has not ended" if kill else "SIGTERM"
    return [described(card, h, LISTED, f"would be sent {then}") for h in holders]
