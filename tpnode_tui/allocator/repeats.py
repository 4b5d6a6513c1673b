"""A launch asked again: whether it is the same request, and what it then gets back.

A launch whose answer was lost (a dropped connection, a killed client) is
retried with the same run id. Handing it a second set of cards would hold
twice what was asked for; handing back a job asked for differently would
start the wrong thing silently. So the same request gets its job back
unchanged, and a different one under a taken run id is a Conflict naming
each difference.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional, Sequence

from tpnode_tui.model.errors import Conflict
from tpnode_tui.model.jobs import JobSpec, JobState, Launched, holding_words
from tpnode_tui.text.render import cards_words, format_duration, show_command


def repeated(spec: JobSpec, jobs: Sequence[JobState], hold_for_s: Optional[float]) -> Optional[Launched]:
    """What a launch of ``spec`` gets when its run id is taken among ``jobs``;
    None when it is not.

    The live job back, unchanged, when the request is the same (a retry); a
    Conflict naming the difference when it was asked for differently, or
    while the job is created but not started. A run id taken by an exited
    job is refused too: its record would be overwritten. ``hold_for_s`` is a
    reservation's length, counted from now as the new request's would be.
    """
    mine = [j for j in jobs if j.key == spec.run_id]
    live = [j for j in mine if j.live]
    if not live:
        if mine:
            raise Conflict(
                f"run id {spec.run_id} belongs to an exited job that has not been "
                f"reclaimed; reclaim it (tpnode-tui reclaim {spec.run_id}) or choose another"
            )
        return None
    job = live[0]
    if job.status == "created":
        raise Conflict(
            f"{spec.run_id} is created but not started: another launch of it is "
            "starting it now, or its launcher died. If it stays created, stop and "
            f"reclaim it (tpnode-tui stop {spec.run_id}; tpnode-tui reclaim "
            f"{spec.run_id}) before launching it again"
        )
    expires_at = time.time() + hold_for_s if hold_for_s is not None else spec.expires_at
    if differences := request_differences(replace(spec, expires_at=expires_at), job):
        raise Conflict(
            f"run id {spec.run_id} is taken by a {job.status} {job.kind} asked for "
            f"differently: {'; '.join(differences)}. Stop it first (tpnode-tui stop "
            f"{spec.run_id}) or choose another run id"
        )
    return Launched(tuple(job.gpus), job, existing=True, slices=job.slices)


def expiry_tolerance_s(duration_s: float) -> float:
    """How far a repeated reservation's expiry may lie from the existing one's
    and still be the same request: a minute, or a tenth of the duration.

    Asking again a few seconds or minutes later (a retry after a lost answer,
    a script run twice) moves the asked-for expiry by that much, while a
    different request differs by far more; a tenth scales with the length, so
    ``--for 1d`` repeated an hour later is the same and ``--for 1h`` is not ``--for 2h``.
    """
    return max(60.0, duration_s / 10)


def request_differences(spec: JobSpec, job: JobState) -> list[str]:
    """How ``spec`` differs from what the live ``job`` with its run id was asked
    for, in plain words; empty when it is the same request.

    Compared: the kind, the card count, and for jobs the image and the command
    (a container's command as the engine reports it starts with the image's
    entrypoint, so there the asked-for command only has to end it); for
    reservations the expiry, within :func:`expiry_tolerance_s`. A reservation's
    own workload (a sleep) is the runtime's, not something anyone asked for.
    """
    held = _holding_differences(spec, job)
    if spec.kind != job.kind:
        return [f"it is a {job.kind}, not a {spec.kind}", *held]
    if spec.kind == "reservation":
        return held + _expiry_differences(spec, job)
    return held + _workload_differences(spec, job)


def _holding_differences(spec: JobSpec, job: JobState) -> list[str]:
    """Whole cards against a MIG slice, how many cards, which slice profile."""
    held = sorted({s.profile or "of a profile not recorded" for s in job.slices})
    if spec.slice is not None:
        if not job.slices:
            return [f"it holds {holding_words(job.gpus)}, not a {spec.slice} MIG slice"]
        if held != [spec.slice]:
            return [f"it holds a {', '.join(held)} MIG slice, not a {spec.slice} one"]
        return []
    if job.slices:
        return [f"it holds a {', '.join(held)} MIG slice, not {cards_words(spec.cards)}"]
    if spec.cards != len(job.gpus):
        return [f"it holds {cards_words(len(job.gpus))}, not {spec.cards}"]
    return []


def _expiry_differences(spec: JobSpec, job: JobState) -> list[str]:
    """A reservation's end, when it lies further from the asked-for one than a retry's would."""
    if spec.expires_at is None or job.expires_at is None:
        return []
    now = time.time()
    if abs(spec.expires_at - job.expires_at) <= expiry_tolerance_s(max(spec.expires_at - now, 0)):
        return []
    ends, asked = format_duration(round(job.expires_at - now)), format_duration(round(spec.expires_at - now))
    return [f"it ends in {ends}, not {asked}"]


def _workload_differences(spec: JobSpec, job: JobState) -> list[str]:
    """A job's image and command, where the request names them."""
    found = []
    if spec.image is not None and _image(spec.image) != _image(job.image):
        found.append(f"its image is {job.image or 'none'}, not {spec.image}")
    if spec.command:
        asked, ran = spec.command, job.command
        same = ran == asked or (job.image is not None and ran[len(ran) - len(asked) :] == asked)
        if not same:
            found.append(f"its command is {_cut(show_command(ran)) or 'none'}, not {_cut(show_command(asked))}")
    return found


def _cut(text: str, most: int = 120) -> str:
    """A command as a refusal quotes it: it may be kilobytes long, and is echoed to whoever asked."""
    return text if len(text) <= most else text[: most - 1] + "…"


def _image(name: Optional[str]) -> Optional[str]:
    """An image name as the engine reads it: no tag means ":latest"."""
    if not name or "@" in name or ":" in name.rsplit("/", 1)[-1]:
        return name
    return f"{name}:latest"
