"""A job as JSON, and back: in the snapshot, and in the answers to launch, reserve, shell and logs; a job's fence."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Optional

from tpnode_tui.model.jobs import (
    FENCE_MECHANISMS,
    DeviceFence,
    JobOutput,
    JobState,
    Launched,
    QueuedLaunch,
    ShellEntry,
    SliceRef,
)
from tpnode_tui.port.wire.reader import Reader, WireError


def fence_to_json(f: DeviceFence, prefix: str = "") -> dict[str, Any]:
    """``{"fenced": true, "mechanism": ...}`` or ``{"fenced": false, "problem": ...}``:
    the other key is left out, so a reader never sees a fenced job with a reason
    it is not, nor an unfenced one without a reason. ``prefix`` names the two
    among a job's other keys ("fence_mechanism", "fence_problem")."""
    if f.fenced:
        return {"fenced": True, f"{prefix}mechanism": f.mechanism}
    return {"fenced": False, f"{prefix}problem": f.problem}


def read_fence(r: Reader, prefix: str = "") -> DeviceFence:
    """What :func:`fence_to_json` wrote, strictly: a fenced one names a known
    mechanism and no problem, an unfenced one a problem and no mechanism. A
    document from before the fence says nothing, and reads as not said."""
    mechanism, problem = f"{prefix}mechanism", f"{prefix}problem"
    if "fenced" not in r.doc:
        if mechanism in r.doc or problem in r.doc:
            raise WireError(f"{r.where} has {mechanism!r} or {problem!r} but no 'fenced'")
        return DeviceFence()
    if r.flag("fenced"):
        if problem in r.doc:
            raise WireError(f"{r.where} is fenced, so it has no {problem!r}")
        return DeviceFence.by(r.choice(mechanism, tuple(FENCE_MECHANISMS)))
    if mechanism in r.doc:
        raise WireError(f"{r.where} is not fenced, so it has no {mechanism!r}")
    why = r.text(problem)
    if not why:
        raise WireError(f"{r.where}.{problem} is empty: a job that is not fenced says why")
    return DeviceFence.missing(why)


def job_to_json(j: JobState) -> dict[str, Any]:
    return {
        "run_id": j.run_id,
        "name": j.name,
        "status": j.status,
        "gpus": list(j.gpus),
        "kind": j.kind,
        "owner": j.owner,
        "uid": j.uid,
        "image": j.image,
        "command": list(j.command),
        "started_at": j.started_at,
        "expires_at": j.expires_at,
        "exit_code": j.exit_code,
        "pid": j.pid,
        "lease_token": j.lease_token,
        "problems": list(j.problems),
        "note": j.note,
        "container_id": j.container_id,
        "cgroup": j.cgroup,
        "slices": [asdict(ref) for ref in j.slices],
        **fence_to_json(j.device_fence, prefix="fence_"),
        "shell_processes": j.shell_processes,
        "log": j.log,
    }


def read_job(r: Reader) -> JobState:
    return JobState(
        name=r.text("name"),
        run_id=r.text("run_id"),
        gpus=r.wholes("gpus"),
        status=r.text("status"),
        kind=r.text("kind", "job"),
        owner=r.text("owner", ""),
        uid=r.opt_whole("uid"),
        image=r.opt_text("image"),
        command=r.texts("command"),
        started_at=r.opt_number("started_at"),
        expires_at=r.opt_number("expires_at"),
        exit_code=r.opt_whole("exit_code"),
        pid=r.opt_whole("pid"),
        lease_token=_lease_token(r),
        problems=r.texts("problems"),
        note=r.text("note", ""),
        container_id=r.opt_text("container_id"),
        cgroup=r.opt_text("cgroup"),
        slices=tuple(r.each("slices", read_slice_ref, [])),
        device_fence=read_fence(r, prefix="fence_"),
        shell_processes=r.whole("shell_processes", 0),
        log=r.text("log", ""),
    )


def _lease_token(r: Reader) -> Optional[int]:
    """A job's lease token; an agent from before it was called so sends it as "fence"."""
    return r.opt_whole("lease_token" if "lease_token" in r.doc else "fence")


def read_slice_ref(r: Reader) -> SliceRef:
    r.only("card", "uuid", "profile")
    return SliceRef(card=r.whole("card"), uuid=r.text("uuid"), profile=r.text("profile", ""))


def read_queued(r: Reader) -> QueuedLaunch:
    return QueuedLaunch(
        run_id=r.text("run_id"),
        cards=r.whole("cards"),
        owner=r.text("owner", ""),
        queued_at=r.number("queued_at"),
        kind=r.text("kind", "job"),
        command=r.texts("command"),
        image=r.opt_text("image"),
        uid=r.opt_whole("uid"),
        state=r.text("state", "queued"),
        waiting_for=r.opt_text("waiting_for"),
        slice=r.opt_text("slice"),
        placement=r.opt_text("placement"),
    )


def job_from_json(doc: Any, where: str = "job") -> JobState:
    return read_job(Reader(doc, where))


def queued_to_json(q: QueuedLaunch) -> dict[str, Any]:
    return asdict(q) | {"command": list(q.command)}


def queued_from_json(doc: Any, where: str = "queued launch") -> QueuedLaunch:
    return read_queued(Reader(doc, where))


def shell_to_json(entry: ShellEntry) -> dict[str, Any]:
    """What the agent answers ``shell``: the exports, and whether the caller is fenced."""
    return {
        "run_id": entry.run_id,
        "env": [[key, value] for key, value in entry.env],
        "cgroup": entry.cgroup,
        "gpus": list(entry.gpus),
        "slices": [asdict(ref) for ref in entry.slices],
        **fence_to_json(entry.device_fence),
    }


def _pair(item: Any, where: str) -> tuple[str, str]:
    if not (isinstance(item, list) and len(item) == 2 and all(isinstance(part, str) for part in item)):
        raise WireError(f"{where} is not a name and a value")
    return item[0], item[1]


def shell_from_json(doc: Any, where: str = "shell") -> ShellEntry:
    r = Reader(doc, where)
    return ShellEntry(
        run_id=r.text("run_id"),
        env=tuple(_pair(item, f"{where}.env[{n}]") for n, item in enumerate(r.items("env"))),
        device_fence=read_fence(r),
        cgroup=r.text("cgroup", ""),
        gpus=r.wholes("gpus"),
        slices=tuple(r.each("slices", read_slice_ref)),
    )


def output_to_json(page: JobOutput) -> dict[str, Any]:
    """A page of a job's output as the agent answers it: its text as the log holds
    it (made printable only where it reaches a terminal)."""
    return asdict(page)


def output_from_json(doc: Any, where: str = "answer") -> JobOutput:
    r = Reader(doc, where)
    return JobOutput(
        text=r.text("text"),
        after=r.text("after"),
        more=r.flag("more", False),
        ended=r.flag("ended", False),
        log=r.text("log", ""),
    )


def launched_to_json(result: Launched) -> dict[str, Any]:
    """What ``launch --json`` and ``reserve --json`` print, and the agent answers."""
    return {
        "run_id": result.job.run_id,
        "name": result.job.name,
        "gpus": list(result.gpus),
        "existing": result.existing,
        "expires_at": result.job.expires_at,
        "warning": result.warning,
        "job": job_to_json(result.job),
        "slices": [asdict(ref) for ref in result.slices],
    }


def launched_from_json(doc: Any, where: str = "launch") -> Launched:
    r = Reader(doc, where)
    return Launched(
        gpus=r.wholes("gpus"),
        job=read_job(Reader(r.obj("job"), f"{where}.job")),
        existing=r.flag("existing", False),
        warning=r.opt_text("warning"),
        slices=tuple(r.each("slices", read_slice_ref, [])),
    )
