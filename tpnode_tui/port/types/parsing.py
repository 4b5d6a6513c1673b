"""How a request's fields are read, for every request type: the limits, a card, a run id, a command, its environment."""

from __future__ import annotations

from typing import Any, Optional

from tpnode_tui.config.sections import LimitSettings
from tpnode_tui.model.errors import BadRequest
from tpnode_tui.model.topology import PLACEMENTS
from tpnode_tui.model.validation import check_job_key, check_profile, check_run_id
from tpnode_tui.port.fields import Query, kib, over, text, utf8_size, valid_text, whole
from tpnode_tui.port.wire.reader import Reader
from tpnode_tui.text.printable import shown

Limits = Optional[LimitSettings]


#: more cards than any node has: a request for more is refused by the node in its
#: own words, as one for a card more than it has is, and never queued
MOST_CARDS = 65536


#: a card index as the API takes one
CARD_INDEX_WORDS = "a card index"


#: the highest pid Linux gives (PID_MAX_LIMIT on 64-bit)
PID_MAX = 4_194_304


#: the longest image reference taken: Docker's own is a 255-character name, a tag and a digest
IMAGE_MOST = 512


#: the last second of year 9999 (UTC): the latest time a request may name
LATEST_TIME = 253_402_300_799.0


def read_moment(q: Query, key: str) -> float:
    """A time a span needs, in unix seconds from 1970 to the end of year 9999:
    a later one cannot be written as a date, and a report would fail to say it."""
    value = q.time(key)
    if value is None:
        raise BadRequest(f"{q.path} needs {key}: a time, in unix seconds")
    if not 0 <= value <= LATEST_TIME:
        raise BadRequest(f"{key}={shown(q.items[key], 30)} is not a time from 1970 to 9999 (unix seconds)")
    return value


def asked_fields(**fields: Optional[str]) -> dict[str, str]:
    return {k: v for k, v in fields.items() if v is not None}


def longest(limits: Limits) -> Optional[float]:
    return None if limits is None else limits.duration_s


def page_limit(limits: Limits) -> Optional[int]:
    return None if limits is None else limits.page


def given_fields(**values: object) -> dict[str, Any]:
    """A GET request's fields that are given (its query string's, once written)."""
    return {k: v for k, v in values.items() if v is not None}


def read_what(r: Reader) -> tuple[int, Optional[str], Optional[str]]:
    """Whole cards, or one MIG slice of a profile, and how the cards must sit."""
    cards = r.whole("cards")
    if cards < 1:
        raise BadRequest(f"a job needs at least 1 card, not {cards}")
    slice_ = text(r, "slice")
    if slice_ is not None:
        check_profile(slice_)
        if cards != 1:
            raise BadRequest(f"a job gets one MIG slice, not {cards}: ask for one {slice_} slice, or for whole cards")
    placement = text(r, "placement")
    if placement is not None and placement not in PLACEMENTS:
        raise BadRequest(f"{shown(placement)} is not a placement: use {' or '.join(PLACEMENTS)}")
    if placement is not None and slice_ is not None:
        raise BadRequest(f"a MIG slice ({slice_}) is one device: it has no placement ({placement}) to ask for")
    return cards, slice_, placement


def read_run_id(r: Reader) -> Optional[str]:
    run_id = text(r, "run_id")
    return None if run_id is None else check_run_id(run_id)


def read_job_key(r: Reader) -> str:
    return check_job_key(text(r, "run_id", required=True) or "")


def read_card(r: Reader) -> int:
    return whole(r, "card", 0, 999_999, CARD_INDEX_WORDS)


def read_command(r: Reader, limits: Limits) -> tuple[str, ...]:
    """The command's words (an argv, never a shell line), each text a program
    can take, within TUNEPLANE_MAX_COMMAND_ARGS words and _KIB together."""
    words = r.texts("command")
    for n, word in enumerate(words):
        valid_text(word, f"{r.where}.command[{n}]")
    if limits is not None:
        if len(words) > limits.command_args:
            raise over(
                f"the command has {len(words)} words",
                str(limits.command_args),
                "TUNEPLANE_MAX_COMMAND_ARGS",
                limits.command_args,
            )
        size = sum(utf8_size(w) for w in words)
        if size > limits.command_kib * 1024:
            raise over(
                f"the command is {kib(size)}",
                f"{limits.command_kib} KiB",
                "TUNEPLANE_MAX_COMMAND_KIB",
                limits.command_kib,
            )
    return words


def read_env(r: Reader, limits: Limits) -> Optional[tuple[tuple[str, str], ...]]:
    """The command's environment: names a program can be given (not empty, no
    "=" or NUL) and text values, within TUNEPLANE_MAX_ENV_VARS and _KIB."""
    doc = r.doc.get("env")
    if doc is None:
        return None
    if not isinstance(doc, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        raise BadRequest(f"{r.where}.env is not an object of text values")
    for name, value in doc.items():
        valid_text(name, f"{r.where}.env name {shown(name, 30)}")
        if not name or "=" in name:
            raise BadRequest(
                f"environment variable name {shown(name)} is not valid (it must be non-empty, without '=')"
            )
        valid_text(value, f"{r.where}.env.{name[:30]}")
    if limits is not None:
        if len(doc) > limits.env_vars:
            raise over(
                f"the environment has {len(doc)} variables",
                str(limits.env_vars),
                "TUNEPLANE_MAX_ENV_VARS",
                limits.env_vars,
            )
        size = sum(utf8_size(k) + utf8_size(v) + 2 for k, v in doc.items())
        if size > limits.env_kib * 1024:
            raise over(
                f"the environment is {kib(size)}", f"{limits.env_kib} KiB", "TUNEPLANE_MAX_ENV_KIB", limits.env_kib
            )
    return tuple(doc.items())


def read_cwd(r: Reader, limits: Limits) -> Optional[str]:
    cwd = text(r, "cwd")
    if cwd is None:
        return None
    if not cwd.startswith("/"):
        raise BadRequest(f"working directory {shown(cwd)} is not an absolute path")
    if limits is not None and utf8_size(cwd) > limits.cwd_bytes:
        raise over(
            f"the working directory is {utf8_size(cwd)} bytes",
            f"{limits.cwd_bytes} bytes",
            "TUNEPLANE_MAX_CWD_BYTES",
            limits.cwd_bytes,
        )
    return cwd
