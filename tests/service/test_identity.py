"""Who is asking comes from the kernel: the groups a connected process has now,
never what the account database says it could have."""

from __future__ import annotations

import grp
import shutil
import socket
import subprocess

from helpers.accounts import runnable, shared_dir
from tpnode_tui.host.identity import Caller, Operators, peer_of

#: connects to the socket named by argv[1] and waits for it to be closed
CONNECT = "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.recv(1)"


def _peer(accounts, account, groups: list[int]) -> Caller:
    """What the agent would make of a process of ``account`` running with ``groups``."""
    where = shared_dir("tpn-peer-")
    path = where / "peer.sock"
    try:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(path))
            path.chmod(0o777)
            server.listen(1)
            server.settimeout(30)
            argv = [runnable().python, "-I", "-c", CONNECT, str(path)]
            child = subprocess.Popen(argv, user=account.uid, group=account.gid, extra_groups=groups)
            try:
                conn, _ = server.accept()
                with conn:
                    return peer_of(conn, Operators(group=accounts.operators_group))
            finally:
                child.wait(timeout=30)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_an_operator_whose_process_dropped_the_group_is_not_an_operator_there(accounts):
    carol = accounts.carol
    ops = grp.getgrnam(accounts.operators_group).gr_gid
    assert ops in carol.groups  # the account database makes her an operator
    dropped = _peer(accounts, carol, [])
    assert ops not in dropped.groups and not dropped.operator
    assert _peer(accounts, carol, [ops]).operator


def test_a_process_in_more_groups_than_one_read_holds_has_every_one_of_them_read(accounts):
    """Python's getsockopt reads 256 groups at most; a login can be in thousands."""
    many = list(range(70_000, 70_300))
    caller = _peer(accounts, accounts.alice, many)
    assert caller.groups == tuple(many)
    assert (caller.uid, caller.user) == (accounts.alice.uid, accounts.alice.name)
