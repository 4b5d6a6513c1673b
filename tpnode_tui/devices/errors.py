"""Why a job's devices cannot be fenced, as an error that carries the words."""

from __future__ import annotations

import errno
import os

from tpnode_tui.model.errors import TpnodeError


class CannotFence(TpnodeError):
    """A fence that cannot be made or applied: the message says what was refused and why.

    Raised inside this package only; :func:`tpnode_tui.devices.fence.fence`
    turns it into a :class:`~tpnode_tui.devices.fence.Fenced` that says "not
    fenced, because ...", since a node that cannot fence is a state to show,
    not a failure to crash on.
    """


def errno_words(code: int) -> str:
    """What a system call's errno means, and its name for a search: "Operation not permitted, EPERM"
    (no parentheses: these words go inside a reason that may be in parentheses itself)."""
    return f"{os.strerror(code)}, {errno.errorcode.get(code, str(code))}"
