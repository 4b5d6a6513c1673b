"""Drain, undrain, evict and events from the command line, against a real agent.

The agent runs as root as under systemd; an operator and an ordinary account
use the CLI as real processes of their own, and the squatters are real
processes of a real account, put on a card of the simulated node.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time

from helpers.accounts import runnable
from helpers.agents import SharedNode
from helpers.load import BOUND_S
from helpers.services import write_scene
from helpers.waiting import until


def squat(node: SharedNode, card: int, *procs: subprocess.Popen) -> None:
    cards = [{"memory_total_mib": 143771} for _ in range(8)]
    cards[card].update(
        memory_used_mib=20000 * len(procs), processes=[{"pid": proc.pid, "used_memory_mib": 20000} for proc in procs]
    )
    write_scene(node.scene, cards)


def read_until(fd: int, wanted: str, timeout_s: float = BOUND_S) -> str:
    """What a program wrote on its terminal, up to ``wanted`` (or its end)."""
    got = b""
    deadline = time.monotonic() + timeout_s
    while wanted.encode() not in got:
        left = deadline - time.monotonic()
        assert left > 0, f"waited for {wanted!r}; the terminal showed {got.decode(errors='replace')!r}"
        if select.select([fd], [], [], left)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the program has ended and closed the terminal
                break
            if not chunk:
                break
            got += chunk
    return got.decode(errors="replace")


def card(status: dict, index: int) -> dict:
    return status["cards"][index]


def test_an_operator_drains_and_undrains_cards_and_nobody_else_may(shared_node, accounts):
    carol, bob = accounts.carol, accounts.bob
    drained = shared_node.cli(carol, "drain", "2,3", "--reason", "fan noise, card to be reseated")
    assert drained.returncode == 0, drained.stderr
    assert "drained card 2: fan noise, card to be reseated" in drained.stdout
    status = shared_node.status(bob)
    assert [card(status, i)["state"] for i in (2, 3)] == ["drained", "drained"]
    assert card(status, 2)["drain"]["by"] == carol.name and card(status, 2)["drain"]["source"] == "operator"
    full = shared_node.cli(bob, "reserve", "--cards", "7", "--for", "10m")
    assert full.returncode == 75  # drained cards are never handed out

    refused = shared_node.cli(bob, "undrain", "2")
    assert refused.returncode == 77 and "operator" in refused.stderr
    assert shared_node.cli(bob, "drain", "1", "--reason", "mine").returncode == 77

    back = shared_node.cli(carol, "undrain", "2,3", "--json")
    assert back.returncode == 0, back.stderr
    assert [json.loads(line)["card"] for line in back.stdout.splitlines()] == [2, 3]
    assert card(shared_node.status(bob), 2)["state"] == "free"
    kinds = [
        e["kind"]
        for e in json.loads(
            "[" + ",".join(shared_node.cli(bob, "events", "--json", "--card", "2").stdout.splitlines()) + "]"
        )
    ]
    assert "drain" in kinds and "undrain" in kinds


def test_evict_asks_first_names_what_it_signals_and_kills_only_when_told(shared_node, accounts):
    carol, bob = accounts.carol, accounts.bob
    stubborn = bob.spawn(["sh", "-c", "trap '' TERM; while :; do sleep 1; done"], env=bob.env())
    try:
        squat(shared_node, 4, stubborn)
        until(lambda: card(shared_node.status(carol), 4)["state"] == "external", "the squatter to be seen")

        unasked = shared_node.cli(carol, "evict", "4")  # no terminal to ask on
        assert unasked.returncode == 2 and "give --yes" in unasked.stderr
        assert stubborn.poll() is None  # nothing was signalled

        assert shared_node.cli(bob, "evict", "4", "--yes").returncode == 77  # operators only

        termed = shared_node.cli(carol, "evict", "4", "--yes")
        assert termed.returncode == 0, termed.stderr
        assert f"pid {stubborn.pid} ({bob.name}, external" in termed.stdout
        assert stubborn.poll() is None  # it ignores SIGTERM: still there, and said so

        killed = shared_node.cli(carol, "evict", "4", "--yes", "--kill")
        assert killed.returncode == 0, killed.stderr
        assert stubborn.wait(BOUND_S) == -signal.SIGKILL
        events = shared_node.cli(carol, "events", "--card", "4")
        assert events.returncode == 0, events.stderr
        log = events.stdout
        assert "evict" in log and str(stubborn.pid) in log
    finally:
        if stubborn.poll() is None:
            stubborn.kill()
        stubborn.wait()


def test_events_follow_prints_what_happens_as_it_happens(shared_node, accounts):
    carol = accounts.carol
    # --since, so the first drain is printed whether the follower was listening
    # yet or not (one starting on a loaded machine may be slower than the drain);
    # once it printed that, it is listening, and the second can only come live.
    follower = carol.spawn(
        runnable().argv("events", "--follow", "--since", "1h", "--json"),
        env=shared_node.env(carol),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[dict] = []

    def printed(card: int) -> bool:
        seen.append(json.loads(follower.stdout.readline()))
        return any(e["kind"] == "drain" and e.get("cards") == [card] for e in seen)

    try:
        assert shared_node.cli(carol, "drain", "5", "--reason", "follow me").returncode == 0
        until(lambda: printed(5), "the first drain to be printed")
        assert shared_node.cli(carol, "drain", "6", "--reason", "and me").returncode == 0
        until(lambda: printed(6), "the second drain to be printed as it happened")
    finally:
        follower.kill()
        follower.wait()


def test_evict_asked_on_a_terminal_signals_what_it_listed_and_nothing_that_came_since(shared_node, accounts):
    carol, bob = accounts.carol, accounts.bob
    listed = bob.spawn(["sleep", "300"], env=bob.env())
    later = bob.spawn(["sleep", "301"], env=bob.env())
    master, terminal = os.openpty()
    try:
        squat(shared_node, 5, listed)
        until(lambda: card(shared_node.status(carol), 5)["state"] == "external", "the squatter to be seen")
        asking = carol.spawn(
            runnable().argv("evict", "5"), env=shared_node.env(carol), stdin=terminal, stdout=terminal, stderr=terminal
        )
        os.close(terminal)
        question = read_until(master, "[y/N]")
        assert f"pid {listed.pid} ({bob.name}, external" in question and "sleep 300" in question, question

        squat(shared_node, 5, listed, later)  # a second squatter arrives while carol reads the question
        until(lambda: len(card(shared_node.status(carol), 5)["holders"]) == 2, "the second squatter to be seen")
        os.write(master, b"y\n")
        answer = read_until(master, "\x00never")  # to the end
        assert asking.wait(BOUND_S) == 0, answer
        assert f"pid {listed.pid}" in answer and "ended after SIGTERM" in answer, answer
        assert listed.wait(BOUND_S) == -signal.SIGTERM
        assert later.poll() is None, "signalled without being asked about"
        assert str(later.pid) not in answer
    finally:
        os.close(master)
        for proc in (listed, later):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_a_card_that_fell_off_the_bus_is_undrained_only_after_a_reboot_and_a_check_passed_since(accounts, tmp_path):
    """XID 79 drains a card until the node reboots: undrain refuses it, saying why and
    what to do, until the boot id has changed and the card has passed a check since;
    a check is an operator's, and says what it found."""
    boot = tmp_path / "boot_id"
    boot.write_text("boot-a\n")
    with SharedNode.started(accounts, "tpn-check-", TUNEPLANE_BOOT_ID=str(boot)) as node:
        carol, bob = accounts.carol, accounts.bob
        cards = [{"memory_total_mib": 143771} for _ in range(8)]
        cards[7]["xid_events"] = [{"id": "off-the-bus", "xid": 79}]
        write_scene(node.scene, cards)
        until(lambda: card(node.status(bob), 7)["state"] == "drained", "XID 79 to drain card 7")

        refused = node.cli(carol, "undrain", "7")
        assert refused.returncode == 1, refused.stdout
        assert "card 7 stays drained until the node has rebooted: XID 79: GPU has fallen off the bus" in refused.stderr
        assert "reboot it, then check the card (tpnode-tui check 7)" in refused.stderr
        assert card(node.status(bob), 7)["state"] == "drained"

        assert node.cli(bob, "check", "7").returncode == 77  # operators only
        before = node.cli(carol, "check", "7")
        assert before.returncode == 1 and "card 7 failed its check" in before.stdout, before.stdout + before.stderr
        assert "the node has not rebooted since the drain" in before.stdout

        boot.write_text("boot-b\n")  # the node has rebooted
        unchecked = node.cli(carol, "undrain", "7")
        assert unchecked.returncode == 1 and "no check of the card has passed since" in unchecked.stderr
        after = node.cli(carol, "check", "7", "--json")
        assert after.returncode == 0, after.stdout + after.stderr
        assert json.loads(after.stdout)["outcome"] == "passed"
        assert card(node.status(bob), 7)["check"]["outcome"] == "passed"

        back = node.cli(carol, "undrain", "7")
        assert back.returncode == 0 and "card 7 is back in service" in back.stdout, back.stderr
        assert card(node.status(bob), 7)["state"] == "free"
        entries = [json.loads(line) for line in node.cli(bob, "events", "--json", "--card", "7").stdout.splitlines()]
        assert {"drain", "check", "undrain"} <= {e["kind"] for e in entries}
        # the XID that drained the card is the drain's own entry, said once
        [drained] = [e for e in entries if e["kind"] == "drain"]
        assert drained["xid"] == 79 and "XID 79" in drained["message"], drained
