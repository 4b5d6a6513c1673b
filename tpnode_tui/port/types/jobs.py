"""The requests about a job: launch, stop, reclaim, cancel a queued launch, read its log; and what a launch answers."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.jobs import Launched, QueuedLaunch
from tpnode_tui.model.validation import check_job_key
from tpnode_tui.port.fields import Query, known_fields, text
from tpnode_tui.port.types.parsing import (
    IMAGE_MOST,
    Limits,
    asked_fields,
    given_fields,
    read_command,
    read_cwd,
    read_env,
    read_job_key,
    read_run_id,
    read_what,
)
from tpnode_tui.port.wire.reader import Reader
from tpnode_tui.text.printable import shown


def new_run_id(prefix: str = "run") -> str:
    """A run id that sorts by time and does not collide between two launches in one second
    (the random part is the kernel's, as secrets.token_hex's is, without loading hashlib)."""
    return f"{prefix}-{time.strftime('%m%d-%H%M%S')}-{os.urandom(2).hex()}"


@dataclass(frozen=True)
class LaunchRequest:
    """A launch as a client asks for it; the node fills in who and how."""

    cards: int
    command: tuple[str, ...] = ()
    image: Optional[str] = None
    run_id: Optional[str] = None
    #: another owner than the caller: operators only
    owner: str = ""
    #: the command's environment and working directory, for a process job. A
    #: client of an agent sends its own (the job runs as the caller, as a launch
    #: from their shell would); None in-process: the job gets this process's
    env: Optional[tuple[tuple[str, str], ...]] = None
    cwd: Optional[str] = None
    #: wait in the queue when the node has no room now, instead of refusing
    queue: bool = False
    #: how the cards must sit on the node's topology: None (the best set free now),
    #: "same-switch" or "contiguous" (a launch waits for such a set)
    placement: Optional[str] = None
    #: a MIG profile ("1g.18gb"): one MIG slice of it instead of whole cards
    #: (``cards`` is then 1); None: whole cards, never a card in MIG mode
    slice: Optional[str] = None

    FIELDS: ClassVar[tuple[str, ...]] = (
        "cards",
        "command",
        "image",
        "run_id",
        "owner",
        "env",
        "cwd",
        "queue",
        "slice",
        "placement",
    )

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> LaunchRequest:
        known_fields(r, *cls.FIELDS)
        cards, slice_, placement = read_what(r)
        image = text(r, "image")
        if image is not None and len(image) > IMAGE_MOST:
            raise BadRequest(f"image {shown(image)} is not an image reference (at most {IMAGE_MOST} characters)")
        return cls(
            cards=cards,
            command=read_command(r, limits),
            image=image,
            run_id=read_run_id(r),
            owner=text(r, "owner", "") or "",
            env=read_env(r, limits),
            cwd=read_cwd(r, limits),
            queue=r.flag("queue", False),
            placement=placement,
            slice=slice_,
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "cards": self.cards,
            "command": list(self.command),
            "image": self.image,
            "run_id": self.run_id,
            "owner": self.owner,
            "cwd": self.cwd,
            "queue": self.queue,
            "env": None if self.env is None else dict(self.env),
        }
        # only when asked for: an older agent refuses a key it does not know
        return doc | asked_fields(slice=self.slice, placement=self.placement)


@dataclass(frozen=True)
class StopRequest:
    run_id: str

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> StopRequest:
        known_fields(r, "run_id")
        return cls(read_job_key(r))

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id}


@dataclass(frozen=True)
class ReclaimRequest:
    """Remove one exited job's record (None: every exited job the caller may remove)."""

    run_id: Optional[str] = None

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> ReclaimRequest:
        known_fields(r, "run_id")
        return cls(None if r.doc.get("run_id") is None else read_job_key(r))

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id}


@dataclass(frozen=True)
class CancelRequest:
    """Drop a queued launch, or one still waiting for the allocation lock."""

    run_id: str

    @classmethod
    def parse(cls, r: Reader, limits: Limits) -> CancelRequest:
        known_fields(r, "run_id")
        return cls(read_job_key(r))

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id}


#: the most of a job's output one answer holds: a page; the client asks for the next
LOG_PAGE_BYTES = 64 * 1024


@dataclass(frozen=True)
class LogsRequest:
    """A page of a job's output (at most LOG_PAGE_BYTES) from ``after``, where
    the last page said the next starts (None: its beginning); ``follow``: then
    each new piece as it is written, until the job has ended."""

    run_id: str
    after: Optional[str] = None
    follow: bool = False

    @classmethod
    def parse(cls, q: Query, limits: Limits) -> LogsRequest:
        q.only("run_id", "after", "follow")
        return cls(check_job_key(q.text("run_id", 256, required=True) or ""), q.text("after", 64), q.flag("follow"))

    def to_json(self) -> dict[str, Any]:
        return given_fields(run_id=self.run_id, after=self.after, follow=True if self.follow else None)


@dataclass(frozen=True)
class LaunchResult:
    """What a launch got: cards now, or a place in the queue."""

    launched: Optional[Launched] = None
    queued: Optional[QueuedLaunch] = None
