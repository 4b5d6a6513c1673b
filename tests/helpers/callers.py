"""The callers the tests name by hand: two ordinary accounts and an operator.

Where what is under test is what the rules decide from an identity, the
identity is built here rather than asked of the kernel (the agent's tests
use real accounts, helpers/accounts.py). The uids are none a test machine
gives its accounts; the pids are only what the node's log records.
"""

from __future__ import annotations

from tpnode_tui.host.identity import Caller

ALICE = Caller(uid=5001, gid=5001, user="alice", pid=11)
BOB = Caller(uid=5002, gid=5002, user="bob", pid=12)
ROOT = Caller(uid=0, gid=0, user="root", operator=True, pid=13)
