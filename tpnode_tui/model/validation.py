"""What a run id, a MIG profile and a MIG uuid may look like, checked where they come in.

A value from outside the node (a request, a label, a record on disk) is
checked against these patterns before it is used, so a name can never carry
a path, a shell word or terminal control characters further in.
"""

from __future__ import annotations

import re

from tpnode_tui.model.errors import BadRequest

#: A run id names a job in labels, state files and container names, so it is
#: kept to what all three accept literally: no spaces, quotes or shell syntax.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


RUN_ID_RULE = "1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"


#: What names a job that is asked to stop, extend, reclaim or cancel: its run id,
#: or the name of a container labelled by hand (Docker's names use the same
#: letters, and may be longer). Anything else names no job, and is not echoed.
JOB_KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")


#: A MIG profile as NVIDIA names it ("1g.18gb", "1c.3g.71gb", "1g.5gb+me"). A job
#: asks for one by name, and it is written into labels and records, so it is kept
#: to what NVIDIA's names use: no spaces, commas or colons.
PROFILE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]{0,39}")


PROFILE_RULE = "a MIG profile as nvidia-smi -L names it, such as 1g.18gb or 2g.35gb"


#: A MIG device's uuid as CUDA_VISIBLE_DEVICES takes it: "MIG-<uuid>", or on older
#: drivers "MIG-GPU-<card uuid>/<GPU instance>/<compute instance>".
MIG_UUID_PATTERN = re.compile(r"MIG-[A-Za-z0-9][A-Za-z0-9/_.-]{0,120}")


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(run_id or ""):
        shown = run_id if len(run_id) <= 80 else run_id[:77] + "..."
        raise BadRequest(f"run id {shown!r} is not valid: use {RUN_ID_RULE}")
    return run_id


def check_job_key(key: str) -> str:
    """``key`` when it can name a job (a run id, or a container's name); BadRequest otherwise."""
    if not JOB_KEY_PATTERN.fullmatch(key or ""):
        shown = key if len(key) <= 80 else key[:77] + "..."
        raise BadRequest(f"{shown!r} names no job: a run id is {RUN_ID_RULE}")
    return key


def check_profile(profile: str) -> str:
    """``profile`` when it can name a MIG profile; BadRequest saying what one looks like."""
    if not isinstance(profile, str) or not PROFILE_PATTERN.fullmatch(profile):
        shown = repr(profile) if not isinstance(profile, str) or len(profile) <= 60 else repr(profile[:57] + "...")
        raise BadRequest(f"{shown} is not a MIG profile: give {PROFILE_RULE}")
    return profile
