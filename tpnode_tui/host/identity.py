"""Who is asking: an account as the kernel names it, never as a client says.

On a shared node the agent runs as root and everyone else talks to it over a
Unix socket, so what a request may do depends on who sent it. A name or uid
in the request body is whatever the client chose to write; the kernel's
answer for the connected socket (``SO_PEERCRED``: the peer's pid, uid and gid
when it connected, and ``SO_PEERGROUPS``: its supplementary groups) is the
only thing a local user cannot forge. The in-process allocator asks the
kernel about itself the same way, so both modes apply the same rules.

Operators are root and the members of one group (``tpnode-operators`` by
default). A group that does not exist makes only root an operator: a missing
group must never read as "everyone".
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import socket
import struct
from dataclasses import dataclass
from typing import Optional

from tpnode_tui.config.sections import DEFAULT_OPERATORS_GROUP

#: Linux's number for SO_PEERGROUPS (4.13 and later); Python does not name it.
_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_MAX_GROUPS = 65536
#: the most bytes Python's socket.getsockopt reads
_PY_GETSOCKOPT_MOST = 1024


@dataclass(frozen=True)
class Caller:
    """One account, as the kernel identified it, and what that makes it here."""

    uid: int
    gid: int
    #: the account's name, or its uid as text when the account database has none
    user: str
    #: supplementary groups, as the kernel had them when the caller connected
    groups: tuple[int, ...] = ()
    #: the calling process (None for the in-process allocator's own account)
    pid: Optional[int] = None
    operator: bool = False

    def describe(self) -> str:
        role = ", operator" if self.operator else ""
        return f"{self.user} (uid {self.uid}{role})"


@dataclass(frozen=True)
class Operators:
    """Who may act on anyone's jobs: root, and the members of one group."""

    group: str = DEFAULT_OPERATORS_GROUP

    def gid(self) -> Optional[int]:
        """The group's id, looked up afresh: membership changes while the agent runs."""
        try:
            return grp.getgrnam(self.group).gr_gid
        except KeyError:
            return None

    def includes(self, uid: int, gid: int, groups: tuple[int, ...]) -> bool:
        if uid == 0:
            return True
        wanted = self.gid()
        return wanted is not None and (gid == wanted or wanted in groups)

    def describe(self) -> str:
        """Who they are, for refusals: "root, group tpnode-operators". Said
        inside parentheses too ("an operator (...)"), so it holds none of its own."""
        if self.gid() is None:
            return f"root, as there is no group {self.group} on this node"
        return f"root, group {self.group}"


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def account_groups(uid: int, gid: int) -> tuple[int, ...]:
    """The account's supplementary groups from the account database, as a
    login would get them; () when the account has no entry."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return ()
    return tuple(sorted(set(os.getgrouplist(name, gid))))


def this_process(operators: Operators) -> Caller:
    """The account this process runs as: the caller of an in-process allocator."""
    uid, gid = os.getuid(), os.getgid()
    groups = tuple(sorted(set(os.getgroups())))
    return Caller(
        uid=uid,
        gid=gid,
        user=user_name(uid),
        groups=groups,
        pid=os.getpid(),
        operator=operators.includes(uid, gid, groups),
    )


def _peer_groups(sock: socket.socket) -> bytes:
    """The peer's supplementary groups as the kernel recorded them when it
    connected (``SO_PEERGROUPS``), as the raw array of gids.

    Python's ``getsockopt`` reads at most 1024 bytes (256 groups); a peer in
    more gets ERANGE there, and is asked again through libc with the room the
    kernel says it needs."""
    try:
        return sock.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, _PY_GETSOCKOPT_MOST)
    except OSError as e:
        if e.errno != errno.ERANGE:
            raise
    import ctypes  # here: only a peer in more than 256 groups needs it

    libc = ctypes.CDLL(None, use_errno=True)
    size = ctypes.c_uint32(4 * _MAX_GROUPS)
    buf = ctypes.create_string_buffer(size.value)
    if libc.getsockopt(sock.fileno(), socket.SOL_SOCKET, _SO_PEERGROUPS, buf, ctypes.byref(size)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return buf.raw[: size.value]


def peer_of(sock: socket.socket, operators: Operators) -> Caller:
    """The account at the other end of a connected Unix socket, from the kernel.

    Raises OSError when the socket is not a connected Unix socket: without an
    identity there is no caller, and nothing may be done on its behalf.
    """
    pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    try:
        raw = _peer_groups(sock)
        groups = tuple(sorted(set(struct.unpack(f"{len(raw) // 4}I", raw))))
    except OSError as e:
        if e.errno not in (errno.ENOPROTOOPT, errno.EINVAL):
            raise
        # A kernel before 4.13: the account database's groups stand in for the
        # kernel's record (they differ only for a login older than a change).
        groups = account_groups(uid, gid)
    return Caller(
        uid=uid, gid=gid, user=user_name(uid), groups=groups, pid=pid, operator=operators.includes(uid, gid, groups)
    )
