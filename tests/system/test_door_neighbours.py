"""A hostile neighbour at the door, again: new connections as fast as one account can open them, and keys given twice.

As in test_door_accounts.py: real accounts (helpers/accounts.py) against a
real agent run as root (helpers/agents.py), each account a real process of its
own, the CLI or raw HTTP written by hand (helpers/door.py).
"""

from __future__ import annotations

import json
import subprocess

from helpers.accounts import runnable
from helpers.agents import SharedNode
from helpers.door import request_as, requests_as
from helpers.waiting import until

#: the flood: processes of one account, each opening new connections one after
#: another as fast as it can (each sends a request and goes), until told to stop
FLOODERS = 2
#: the flood's bounds, whatever happens: connections per process, and seconds
FLOOD_MOST, FLOOD_MOST_S = 2_000_000, 120
#: how many statuses the other account asks for while the flood goes on
STATUSES = 6

_FLOOD = r"""
import socket, sys, threading, time
path, most, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
end = time.monotonic() + seconds
made = 0
print("flooding", flush=True)
while made < most and not done.is_set() and time.monotonic() < end:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        made += 1
        s.send(b"GET /v1/whoami HTTP/1.1\r\nHost: x\r\n\r\n")
    except OSError:
        pass
    s.close()
print(made, flush=True)
"""


def test_a_flood_of_new_connections_leaves_another_accounts_status_answered(shared_node, accounts):
    """One account opening new connections as fast as it could filled the agent's
    queue: another account's status failed 49 of 53 times in 20 s, saying that no
    agent answers. The door now refuses the flood's connections at once and a
    client waits for room in a full queue, so every status is answered."""
    alice, bob = accounts.alice, accounts.bob
    floods = [
        bob.spawn(
            [runnable().python, "-I", "-c", _FLOOD, str(shared_node.socket), str(FLOOD_MOST), str(FLOOD_MOST_S)],
            env=bob.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(FLOODERS)
    ]
    try:
        assert all(flood.stdout.readline().strip() == "flooding" for flood in floods)
        shown = [shared_node.cli(alice, "status") for _ in range(STATUSES)]
        still = [flood.poll() is None for flood in floods]
    finally:
        made = [int(flood.communicate("", timeout=FLOOD_MOST_S)[0].strip() or 0) for flood in floods]
    assert all(still), "the flood ended before alice was done"
    assert [(done.returncode, done.stderr) for done in shown] == [(0, "")] * STATUSES
    assert all(done.stdout.strip() for done in shown)
    assert sum(made) > 10_000, made  # it was a flood: far past what the rate lets in
    # bob's own connections are let in again once his rate allows
    assert until(lambda: shared_node.cli(bob, "status").returncode == 0, "bob to be let in again")
    assert "Traceback" not in shared_node.log.read_text()


def test_an_account_past_its_connection_rate_is_refused_in_one_line_and_operators_are_not(accounts):
    """New connections are counted a second at a time: one more than
    TUNEPLANE_MAX_CONNECTION_RATE_PER_USER in a second is answered 429 and closed."""
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    with SharedNode.started(accounts, "tpn-rate-", TUNEPLANE_MAX_CONNECTION_RATE_PER_USER="2") as node:
        asked = [("GET", "/v1/whoami", None)] * 30
        answers = requests_as(bob, node.socket, asked)
        statuses = [status for status, _doc, _s in answers]
        assert statuses[:2] == [200, 200] and set(statuses) == {200, 429}, statuses
        refused = next(doc for status, doc, _s in answers if status == 429)
        assert refused == {
            "error": f"{bob.name} opened 2 new connections to the agent within a second, the most one account may "
            "(TUNEPLANE_MAX_CONNECTION_RATE_PER_USER=2); wait a moment and ask again",
            "exit_code": 2,
            "kind": "TooMany",
        }
        said = f"connections of uid {bob.uid} refused since this was last said: 1; the latest: {refused['error']}"
        assert said in node.log.read_text()  # the agent's log says it, at most once a minute
        assert {status for status, _d, _s in requests_as(carol, node.socket, asked)} == {200}  # an operator
        assert request_as(alice, node.socket, "GET", "/v1/whoami")[0] == 200  # another account's go on
        assert until(lambda: request_as(bob, node.socket, "GET", "/v1/whoami")[0] == 200, "bob's rate to allow him")


def test_a_key_given_twice_in_a_body_is_refused_at_any_depth_and_nothing_is_done(shared_node, accounts):
    """{"cards": 1, "cards": 2, ...} launched 2 cards: JSON's reader keeps the last
    of a key given twice. The door refuses it with a 400 that names the key, as a
    key given twice in a query string is."""
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    launch = '"command": ["/bin/sleep", "60"], "cwd": "/tmp", "run_id": "twice"'
    answers = requests_as(
        bob,
        shared_node.socket,
        [
            ("POST", "/v1/launch", '{"cards": 1, "cards": 2, ' + launch + "}"),
            ("POST", "/v1/launch", '{"cards": 1, ' + launch + ', "env": {"PATH": "/usr/bin", "PATH": "/tmp"}}'),
            ("POST", "/v1/reserve", '{"cards": 1, "duration_s": 60, "placement": {"x": [{"y": 1, "y": 2}]}}'),
        ],
    )
    assert [(status, doc) for status, doc, _s in answers] == [
        (
            400,
            {
                "error": f"the request body gives '{key}' more than once in one object",
                "exit_code": 2,
                "kind": "BadRequest",
            },
        )
        for key in ("cards", "PATH", "y")
    ]
    assert shared_node.status(alice)["jobs"] == []  # nothing launched, nothing held
    logged = json.loads(shared_node.cli(carol, "audit", "--json").stdout)["entries"]
    # audited as bob, as the kernel named him (the second launch refused folds into the first's line)
    assert {(e["action"], e["result"]) for e in logged if e["uid"] == bob.uid} == {
        ("launch", "bad request"),
        ("reserve", "bad request"),
    }
