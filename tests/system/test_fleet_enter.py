"""The fleet's enter, for real: a node's own dashboard drawn on the operator's terminal over SSH.

bob runs ``tpnode-tui fleet`` on a pseudo-terminal, as he would in his shell;
a real agent publishes its node (with its SSH address) to a real redis-server,
and a real sshd lets bob in. Enter must hand the terminal to the node's
dashboard (drawn where bob can see it, not into a pipe), and quitting it must
give the terminal back to the fleet.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import struct
import subprocess
import termios
import threading
import time

import pytest

from helpers.accounts import runnable
from helpers.agents import SharedNode
from helpers.ssh import Sshd
from helpers.waiting import until
from tpnode_tui.runtimes.jobprocs import process_stat

pytestmark = pytest.mark.redis
NODE = "tpn-fleet-node"
#: an escape sequence: CSI (with its parameters), OSC, or a two-byte one
_ESCAPE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


class Terminal:
    """A pseudo-terminal of 120x40 running a process of an account, and what it drew."""

    def __init__(self, who, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.chown(os.ttyname(slave), who.uid, -1)
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=who.home,
            user=who.uid,
            group=who.gid,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # its controlling terminal, as a login's
        )
        os.close(slave)
        self._drawn: list[bytes] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._drawn.append(data)

    def mark(self) -> int:
        with self._lock:
            return len(self._drawn)

    def text(self, since: int = 0) -> str:
        """What was drawn since ``since`` (a mark), its escape sequences taken out."""
        with self._lock:
            raw = b"".join(self._drawn[since:])
        return _ESCAPE.sub("", raw.decode(errors="replace"))

    def shows(self, words: str, since: int = 0, what: str = "") -> None:
        until(lambda: words in self.text(since), what or f"the terminal to show {words!r}", 60)

    def press(self, keys: str) -> None:
        time.sleep(0.3)  # a key sent before the app reads keys would be lost
        os.write(self.master, keys.encode())

    def close(self) -> None:
        """End the fleet and whatever it started on this terminal (the node's dashboard
        it ran, if a test fails while that is up), then the terminal."""
        for pid in _session(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)
        os.close(self.master)


def _session(sid: int) -> list[int]:
    """The processes of session ``sid`` that have not ended."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = process_stat(int(entry))
            if stat is not None and stat.session == sid and not stat.ended:
                found.append(int(entry))
    return found


@pytest.fixture
def published(accounts, redis_url):
    """A node whose agent publishes to the fleet with its SSH address, and an sshd bob may log in through."""
    settings = {
        "TUNEPLANE_FLEET_URL": redis_url,
        "TUNEPLANE_NODE_NAME": NODE,
        "TUNEPLANE_SSH_ADDRESS": NODE,
        "TUNEPLANE_FLEET_PUBLISH_S": "1",
    }
    with SharedNode.started(accounts, "tpn-fleet-enter-", **settings) as node:
        sshd = Sshd(node.root, node.socket)
        sshd.start()
        try:
            sshd.let_in(accounts.bob, NODE)
            yield node, redis_url, sshd
        finally:
            sshd.end_logins(accounts.bob)
            sshd.stop()


def test_enter_draws_the_node_s_dashboard_on_the_terminal_and_q_or_a_failure_comes_back_to_the_fleet(
    published, accounts
):
    _node, redis_url, sshd = published
    bob = accounts.bob
    env = bob.env(TUNEPLANE_FLEET_URL=redis_url, TUNEPLANE_AGENT_SOCKET="/nonexistent/a.sock", TERM="xterm-256color")
    term = Terminal(bob, runnable().argv("fleet"), env)
    try:
        term.shows("1 node: 1 up", what="the fleet to show the node up")
        term.shows("Dashboard", what="the footer to offer enter")
        before = term.mark()
        term.press("\r")
        # the node's own dashboard, drawn here: its header names bob and where it reads
        term.shows(f"{bob.name} │ agent on {NODE} over ssh", before, "the node's dashboard on the terminal")
        back = term.mark()
        term.press("q")
        term.shows("enter: a node's dashboard · g: its cards", back, "the fleet to draw itself again")
        assert "press enter to go back" not in term.text(back)  # quit is not a failure
        # the node cannot be reached now: what SSH said stays on the terminal until enter
        sshd.end_logins(bob)
        sshd.stop()
        failed = term.mark()
        term.press("\r")
        term.shows("press enter to go back to the fleet", failed, "the failure to wait for enter")
        assert f"tpnode-tui: cannot reach {NODE} over ssh" in term.text(failed), term.text(failed)[-2000:]
        again = term.mark()
        term.press("\r")
        term.shows("enter: a node's dashboard · g: its cards", again, "the fleet to draw itself again after it")
        term.shows("exit code 1, for the reason it gave", again, "the fleet to say the dashboard failed")
        term.press("q")
        assert term.proc.wait(30) == 0
    finally:
        term.close()
