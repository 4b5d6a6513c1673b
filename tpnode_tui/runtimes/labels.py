"""The ``tuneplane.*`` labels: their names, how they are written and how they are read.

Labels are the only record of which cards a platform container holds, so they
are read from containers this process did not create too: ones an earlier
process made, and ones an operator labelled by hand. Reading therefore never
raises. Whatever cannot be understood is reported as a problem in plain words
next to what could be, because a label nobody can read still belongs to a
container that may be holding cards: dropping it silently would show those
cards as free.

Pure: no I/O, so the process runtime, the probes and the tests can share it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional

from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.jobs import JOB_KINDS, JobSpec, SliceRef
from tpnode_tui.model.validation import MIG_UUID_PATTERN, PROFILE_PATTERN, RUN_ID_PATTERN, RUN_ID_RULE, check_run_id

#: Every platform container carries it (it is what ``ps`` lists by): the cards
#: it holds whole, "0,1", or empty for a job that holds a MIG slice instead.
GPUS = "tuneplane.gpus"
#: the MIG slices it holds: "CARD:MIG-UUID:PROFILE" ("1:MIG-5e6f...:1g.18gb"),
#: comma-separated; the profile may be left out
SLICES = "tuneplane.slices"
RUN_ID = "tuneplane.run_id"
KIND = "tuneplane.kind"
OWNER = "tuneplane.owner"
EXPIRES = "tuneplane.expires"
#: the allocation lock's lease token when the cards were picked: of two jobs
#: found on one card (only possible if a lock was lost) the later one backs off
LEASE_TOKEN = "tuneplane.lease_token"
#: the lease token's label on a container an earlier version made: read where
#: the new one is missing, never written
OLD_LEASE_TOKEN = "tuneplane.fence"
#: the owner's uid, so that rules compare accounts, not names a label could repeat
UID = "tuneplane.uid"
#: uids are 32-bit: (uid_t)-1 and above name no account
_MAX_UID = 2**32 - 2

#: A card index with more significant digits than this is not a card on any
#: machine. The cap also keeps ``int()`` away from Python's limit on converting
#: very long digit strings, which raises instead of answering.
_MAX_INDEX_DIGITS = 6

#: A label can be any length; a list of problems shown in a dashboard cell cannot.
_MAX_PROBLEMS = 5

_DIGITS = re.compile(r"[0-9]+")
_UNIX_SECONDS = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")


def _show(text: str, limit: int = 24) -> str:
    """A piece of a label, quoted and cut short, safe to put in a message."""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def _capped(problems: list[str]) -> tuple[str, ...]:
    if len(problems) <= _MAX_PROBLEMS:
        return tuple(problems)
    rest = len(problems) - _MAX_PROBLEMS + 1
    return (*problems[: _MAX_PROBLEMS - 1], f"{GPUS}: and {rest} more problems like these")


def parse_gpus_label(text: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The card indices a ``tuneplane.gpus`` label names, and what is wrong with it.

    Indices come back sorted and once each. Only plain ASCII digits count:
    ``int()`` alone would also take ``+1``, ``1_0`` or other scripts' digits,
    which no tool writes and which would make a typo look like a real card.
    An index beyond the node's last card is kept, not dropped: the allocator
    compares against the card count and reports it, and a card a label names
    is never treated as free because the number looked odd here.
    """
    if not isinstance(text, str) or not text.strip():
        return (), (f"{GPUS} is empty, so it does not say which cards the job holds",)
    found: set[int] = set()
    problems: list[str] = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            problems.append(f"{GPUS}={_show(text)} has an empty entry between commas")
            continue
        significant = piece.lstrip("0") or "0"
        if not _DIGITS.fullmatch(piece) or len(significant) > _MAX_INDEX_DIGITS:
            problems.append(
                f"{GPUS}: {_show(piece)} is not a card index (use whole numbers from 0, separated by commas)"
            )
            continue
        index = int(significant)
        if index in found:
            problems.append(f"{GPUS}: card {index} is listed more than once")
        found.add(index)
    return tuple(sorted(found)), _capped(problems)


def parse_slices_label(text: Optional[str]) -> tuple[tuple[SliceRef, ...], tuple[str, ...]]:
    """The MIG slices a ``tuneplane.slices`` label names, and what is wrong with it.

    No label, or an empty one, is no slice. Each entry is ``CARD:UUID`` or
    ``CARD:UUID:PROFILE``; one that cannot be read is a problem, never
    dropped silently: a slice a label names is held, whatever else it says.
    """
    if text is None or not text.strip():
        return (), ()
    found: list[SliceRef] = []
    problems: list[str] = []
    for piece in text.split(","):
        piece = piece.strip()
        parts = piece.split(":")
        card_text = parts[0].lstrip("0") or "0"
        if (
            not piece
            or len(parts) not in (2, 3)
            or not _DIGITS.fullmatch(parts[0])
            or len(card_text) > _MAX_INDEX_DIGITS
            or not MIG_UUID_PATTERN.fullmatch(parts[1])
            or (len(parts) == 3 and parts[2] and not PROFILE_PATTERN.fullmatch(parts[2]))
        ):
            problems.append(
                f"{SLICES}: {_show(piece)} is not a MIG slice (write CARD:MIG-UUID or "
                "CARD:MIG-UUID:PROFILE, separated by commas)"
            )
            continue
        ref = SliceRef(int(card_text), parts[1], parts[2] if len(parts) == 3 else "")
        if any(f.uuid == ref.uuid for f in found):
            problems.append(f"{SLICES}: {ref.uuid} is listed more than once")
            continue
        found.append(ref)
    return tuple(found), tuple(problems[:_MAX_PROBLEMS])


def slices_label(slices: tuple[SliceRef, ...]) -> str:
    """The ``tuneplane.slices`` value for ``slices``; BadRequest for one that would not read back."""
    pieces = []
    for ref in slices:
        if (
            type(ref.card) is not int
            or ref.card < 0
            or not MIG_UUID_PATTERN.fullmatch(ref.uuid or "")
            or (ref.profile and not PROFILE_PATTERN.fullmatch(ref.profile))
        ):
            raise BadRequest(f"{ref!r} is not a MIG slice that can be written in a label")
        pieces.append(f"{ref.card}:{ref.uuid}" + (f":{ref.profile}" if ref.profile else ""))
    text = ",".join(pieces)
    if parse_slices_label(text)[1]:
        raise BadRequest(f"MIG slices {text!r} cannot be written in a label")
    return text


def parse_expires(text: Optional[str]) -> tuple[Optional[float], tuple[str, ...]]:
    """A ``tuneplane.expires`` value as unix seconds, and what is wrong with it.

    No label is no expiry (an ordinary job), not a problem. Only plain decimal
    seconds are accepted: ``float()`` would also take ``inf`` or ``nan``, and a
    reservation that "never ends" because of a typo would hold its cards in the
    dashboard's eyes forever.
    """
    if text is None or not text.strip():
        return None, ()
    value = text.strip()
    if not _UNIX_SECONDS.fullmatch(value):
        return None, (f"{EXPIRES}: {_show(value)} is not a time in unix seconds",)
    return float(value), ()


def parse_kind(text: Optional[str]) -> tuple[str, tuple[str, ...]]:
    """The job kind a ``tuneplane.kind`` label names; no label means an ordinary job.

    An unknown kind is read as "job": both kinds hold their cards the same way,
    so the cards stay held either way, and the problem says what was not understood.
    """
    if text is None or not text.strip():
        return "job", ()
    kind = text.strip().lower()
    if kind in JOB_KINDS:
        return kind, ()
    choices = " or ".join(JOB_KINDS)
    return "job", (f"{KIND}: {_show(text)} is not {choices}; shown as a job",)


@dataclass(frozen=True)
class LabelFacts:
    """What a container's labels say about the platform job it runs."""

    run_id: str
    gpus: tuple[int, ...]
    kind: str
    owner: str
    expires_at: Optional[float]
    problems: tuple[str, ...]
    lease_token: Optional[int] = None
    uid: Optional[int] = None
    slices: tuple[SliceRef, ...] = ()


def parse_labels(labels: Mapping[str, str], default_run_id: str) -> LabelFacts:
    """Read every ``tuneplane.*`` label at once; never raises.

    ``default_run_id`` (the container name) stands in for a missing run id, so a
    container labelled by hand with only ``tuneplane.gpus`` is still named.
    """
    gpus, slices, held_problems = _holding(labels)
    kind, kind_problems = parse_kind(labels.get(KIND))
    expires_at, expires_problems = parse_expires(labels.get(EXPIRES))
    run_id, run_id_problems = _parse_run_id(labels.get(RUN_ID), default_run_id)
    unknown_end: tuple[str, ...] = ()
    if kind == "reservation" and expires_at is None and not expires_problems:
        unknown_end = (f"a reservation without {EXPIRES}: when it ends is not known",)
    token_label = LEASE_TOKEN if LEASE_TOKEN in labels else OLD_LEASE_TOKEN
    lease_token, token_problems = _parse_lease_token(token_label, labels.get(token_label))
    uid, uid_problems = _parse_uid(labels.get(UID))
    problems = held_problems + kind_problems + expires_problems + run_id_problems + unknown_end
    return LabelFacts(
        run_id=run_id,
        gpus=gpus,
        kind=kind,
        owner=(labels.get(OWNER) or "").strip(),
        expires_at=expires_at,
        problems=problems + token_problems + uid_problems,
        lease_token=lease_token,
        uid=uid,
        slices=slices,
    )


def _holding(labels: Mapping[str, str]) -> tuple[tuple[int, ...], tuple[SliceRef, ...], tuple[str, ...]]:
    """The cards and MIG slices the labels hold, and what is wrong with them."""
    slices, slice_problems = parse_slices_label(labels.get(SLICES))
    gpus_text = labels.get(GPUS, "")
    if slices and not (gpus_text or "").strip():  # a job that holds a MIG slice holds no whole card
        return (), slices, slice_problems
    gpus, problems = parse_gpus_label(gpus_text)
    return gpus, slices, problems + slice_problems


def _parse_run_id(text: Optional[str], default_run_id: str) -> tuple[str, tuple[str, ...]]:
    run_id = (text or "").strip() or default_run_id
    if not RUN_ID_PATTERN.fullmatch(run_id):
        return run_id, (f"{RUN_ID}: {_show(run_id)} is not a valid run id ({RUN_ID_RULE})",)
    return run_id, ()


def _parse_lease_token(label: str, text: Optional[str]) -> tuple[Optional[int], tuple[str, ...]]:
    token_text = (text or "").strip()
    token = int(token_text) if token_text.isascii() and token_text.isdigit() and len(token_text) <= 20 else None
    if token_text and token is None:
        return None, (f"{label}: {_show(token_text)} is not a lease token",)
    return token, ()


def _parse_uid(text: Optional[str]) -> tuple[Optional[int], tuple[str, ...]]:
    uid_text = (text or "").strip()
    uid = int(uid_text) if _DIGITS.fullmatch(uid_text) and len(uid_text) <= 10 else None
    if uid is not None and uid > _MAX_UID:
        uid = None
    if uid_text and uid is None:
        return None, (f"{UID}: {_show(uid_text)} is not a uid",)
    return uid, ()


def _seconds(value: float) -> str:
    """Unix seconds as a label: whole seconds when exact, milliseconds otherwise."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}"


def job_labels(spec: JobSpec, gpus: list[int] | tuple[int, ...]) -> dict[str, str]:
    """The labels that make a container hold ``gpus`` (and ``spec.slices``) for ``spec``.

    Only checked values are written, so the labels always read back without
    problems: a run id or expiry that could not be read back is refused here
    (BadRequest) instead of being written for every later reader to stumble on.
    """
    labels = {
        GPUS: ",".join(str(i) for i in gpus),
        RUN_ID: check_run_id(spec.run_id),
        KIND: spec.kind,
    }
    if spec.slices:
        labels[SLICES] = slices_label(spec.slices)
    if spec.owner:
        labels[OWNER] = spec.owner
    if spec.lease_token is not None:
        labels[LEASE_TOKEN] = str(spec.lease_token)
    if spec.uid is not None:
        if type(spec.uid) is not int or not 0 <= spec.uid <= _MAX_UID:
            raise BadRequest(f"uid {spec.uid!r} is not a uid")
        labels[UID] = str(spec.uid)
    if spec.expires_at is not None:
        text = _seconds(spec.expires_at)
        if parse_expires(text)[1]:
            raise BadRequest(f"expiry {spec.expires_at!r} is not a time in unix seconds")
        labels[EXPIRES] = text
    return labels
