"""The accounts behind a request: their groups, the owner an operator names, whom a job runs as,
and the account a uid is now."""

from __future__ import annotations

import grp
import os
import pwd
from typing import Optional

from tpnode_tui.host.identity import Caller, account_groups
from tpnode_tui.model.jobs import RunAs


def group_names(gids: tuple[int, ...]) -> list[str]:
    names = []
    for gid in gids:
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return names


def account(user: str) -> Optional[Caller]:
    """The account an operator named as a job's owner; None when the name has
    no account here (the job then has no owner uid)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    return Caller(uid=entry.pw_uid, gid=entry.pw_gid, user=user, groups=account_groups(entry.pw_uid, entry.pw_gid))


def account_of(uid: int) -> Optional[RunAs]:
    """The account ``uid`` is now (name, primary group, groups), as a process of it
    is started; None when no account has that uid."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return None
    groups = account_groups(uid, entry.pw_gid)
    return RunAs(uid=uid, gid=entry.pw_gid, groups=groups, user=entry.pw_name, home=entry.pw_dir)


def run_as(caller: Caller) -> Optional[RunAs]:
    """The account a process job must switch to: none when it is this process's own."""
    if caller.uid == os.getuid():
        return None
    try:
        home = pwd.getpwuid(caller.uid).pw_dir
    except KeyError:
        home = "/"
    return RunAs(uid=caller.uid, gid=caller.gid, groups=caller.groups, user=caller.user, home=home)
