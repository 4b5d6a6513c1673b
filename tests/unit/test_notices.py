"""What the node says and to whom (service/notices.py's table), and a terminal written only where it may be.

The table is checked against its reference (docs/notifications.md), and its
words against what someone else wrote into an entry. A terminal is a real
pseudo-terminal of this process's own (os.openpty): written where it is the
account's character device with messages allowed, never a file or a link
that only looks like one.
"""

from __future__ import annotations

import os
import re

from helpers.paths import CHECKOUT
from tpnode_tui.host.terminals import message, write_line
from tpnode_tui.service.notices import INTRUDER, NOTICES, OWNER, notice_of


def test_the_reference_lists_every_notice_with_whom_it_tells():
    text = (CHECKOUT / "docs" / "notifications.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| .*? \| ([a-z, ]+) \| .*\|$", text, re.M))
    assert rows == {tell.event: ", ".join(tell.to) for tell in NOTICES}


def test_a_notice_is_the_entrys_sentence_made_printable_with_what_its_role_reads():
    [intruder] = [tell for tell in NOTICES if tell.event == "intruder"]
    entry = {
        "kind": "intruder",
        "state": "seen",
        "message": "bob (pid 42, \x1b]0;owned\x07) is using card 3, reserved by alice",
        "cards": [3],
        "pid": 42,
        "intruder_uid": 1001,
        "owner_uid": 1000,
    }
    to_bob, to_alice = notice_of(intruder, entry, INTRUDER), notice_of(intruder, entry, OWNER)
    assert to_bob.title == to_alice.title == "an intruder on card 3"
    assert "\x1b" not in to_bob.text and "\\x1b]0;owned\\x07" in to_bob.text
    assert to_bob.text.endswith(
        "That card is not yours: end pid 42, and ask for cards of your own (tpnode-tui reserve)."
    )
    assert to_alice.text.endswith("An operator can end it: tpnode-tui evict 3 --pid 42.")
    assert to_bob.kind == "warning"


def test_a_terminal_is_written_only_where_it_is_the_accounts_own_with_messages_allowed(tmp_path):
    uid = os.getuid()
    controller, terminal = os.openpty()
    path = os.ttyname(terminal)
    os.set_blocking(controller, False)
    line = message("job j ended", "job j ended (exit 3)", 0.0)
    try:
        os.chmod(path, 0o620)
        assert write_line(path, uid, line)
        assert b"job j ended (exit 3)" in os.read(controller, 4096)
        assert not write_line(path, uid + 1, line)  # someone else's
        os.chmod(path, 0o600)  # mesg n
        assert not write_line(path, uid, line)
        os.chmod(path, 0o620)
        link = tmp_path / "tty"
        link.symlink_to(path)
        assert not write_line(link, uid, line)  # a link that only points at one
        plain = tmp_path / "plain"
        plain.write_text("")
        plain.chmod(0o620)
        assert not write_line(plain, uid, line) and plain.read_text() == ""
        try:
            os.read(controller, 4096)
            raise AssertionError("a terminal written where it should not have been")
        except BlockingIOError:
            pass
    finally:
        os.close(controller)
        os.close(terminal)
