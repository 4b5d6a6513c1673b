"""One account churning jobs of a moment: real accounts against a real agent run as root.

One account looping ``launch --cards 1 -- /bin/true`` was found to pile up
exited jobs without bound (their records, their logs, every status, the
agent's idle CPU), and their endings, written to the node's shared shelf of
the log, pushed an operator's drain and an intruder seen out of it. Each
test here does what that account did, as a real process of its own speaking
raw HTTP on the agent's socket (tests/helpers/door.py), on a node with small
limits, and checks what the node keeps afterwards.
"""

from __future__ import annotations

import json
import time

from helpers.agents import SharedNode
from helpers.door import requests_as
from helpers.services import write_scene
from helpers.waiting import until


def quick(run_id: str, *command: str) -> tuple[str, str, dict]:
    """A 1-card job that ends at once (or runs ``command``), queued while the cards
    are busy, as a script loops it."""
    body = {"cards": 1, "command": list(command or ["/bin/true"]), "cwd": "/", "run_id": run_id, "queue": True}
    return ("POST", "/v1/launch", body)


#: room in the queue for the whole churn: what waits there while the cards are busy is not what is tested
ROOMY_QUEUE = {"TUNEPLANE_MAX_QUEUED_PER_USER": "1000", "TUNEPLANE_MAX_QUEUED": "1000"}


def churn(node: SharedNode, who, run_ids: list[str], *command: str) -> None:
    """``who`` launches each, four at a time; each placed (200) or queued (202)."""
    answers = requests_as(who, node.socket, [quick(r, *command) for r in run_ids], parallel=4)
    assert {status for status, _doc, _s in answers} <= {200, 202}, [d for s, d, _ in answers if s >= 300][:3]


def jobs_of(status: dict, owner: str) -> list[dict]:
    return [j for j in status["jobs"] if j["owner"] == owner]


def settled(node: SharedNode, watcher, owner: str, most: int | None = None) -> dict | None:
    """The node's status once ``owner`` has nothing queued or live (and at most ``most`` jobs listed)."""
    status = node.status(watcher)
    mine = jobs_of(status, owner)
    queued = [q for q in status["queue"] if q["owner"] == owner]
    done = not queued and all(j["status"] == "exited" for j in mine) and len(mine) <= (most or len(mine))
    return status if done else None


def test_an_accounts_exited_jobs_are_kept_to_its_limit_the_rest_in_the_ledger_and_their_logs_gone(accounts):
    """700 exited jobs of one account made jobs.json 530 KB, every status 485 KB,
    the idle agent 84 % of a core, and reclaim left every log behind."""
    alice, bob = accounts.alice, accounts.bob
    limits = {"TUNEPLANE_MAX_EXITED_PER_USER": "5", "TUNEPLANE_USAGE_HOLDS_PER_USER": "30", **ROOMY_QUEUE}
    with SharedNode.started(accounts, "tpn-churn3-", **limits) as node:
        churn(node, alice, ["a0", "a1"])
        churn(node, bob, [f"q{n:02d}" for n in range(40)])
        status = until(lambda: settled(node, alice, bob.name, 5), "bob's jobs to end and the oldest to go", 90)
        assert sorted(j["run_id"] for j in jobs_of(status, bob.name)) == [f"q{n}" for n in range(35, 40)]
        assert sorted(j["run_id"] for j in jobs_of(status, alice.name)) == ["a0", "a1"]  # not bob's to push out

        records = json.loads((node.state / "jobs.json").read_text())["jobs"]
        assert sorted(records) == ["a0", "a1", "q35", "q36", "q37", "q38", "q39"]
        logs = sorted(p.name for p in (node.state / "logs").iterdir())
        assert logs == sorted(f"{r}.log" for r in records)  # each went with its record

        # every job bob ran is in the usage ledger, up to its bound of 30 (the newest)
        done = node.cli(bob, "usage", "--by", "job", "--since", "1h", "--json")
        assert done.returncode == 0, done.stderr
        ledger = sorted(row["run_id"] for row in json.loads(done.stdout)["rows"] if row["user"] == bob.name)
        assert ledger == [f"q{n:02d}" for n in range(10, 40)]

        reclaimed = node.cli(bob, "reclaim", "q37")
        assert reclaimed.returncode == 0, reclaimed.stderr
        assert not (node.state / "logs" / "q37.log").exists()  # reclaim takes the log too


def test_an_accounts_job_endings_cannot_push_an_operators_drain_or_an_intruder_out_of_the_node_log(accounts):
    """With a small log limit, 600 quick jobs of one account left no trace of an
    operator's drain, nor of the evidence that an intruder had been seen."""
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    small = {"TUNEPLANE_LOG_MAX_MB": "0.01", "TUNEPLANE_LOG_ACCOUNT_MB": "0.01", **ROOMY_QUEUE}  # 10 KB a file
    with SharedNode.started(accounts, "tpn-churn4-", **small) as node:
        assert node.cli(alice, "reserve", "--cards", "1", "--for", "1h", "--run-id", "alices").returncode == 0
        intruder = bob.spawn(["sleep", "300"], env=bob.env())
        try:
            cards = json.loads(node.scene.read_text())["cards"]
            cards[0]["processes"] = [{"pid": intruder.pid, "used_memory_mib": 4096}]
            write_scene(node.scene, cards)  # bob's process on alice's card
            until(lambda: _kinds(node, carol, "intruder"), "the intruder to be seen")
        finally:
            intruder.kill()
            intruder.wait()
        assert node.cli(carol, "drain", "7", "--reason", "fan failing").returncode == 0

        # as long as a run id may be, each seen running (a poll is 0.2 s): 170 endings are 55 KB
        long_ids = [f"{n:03d}-" + "x" * 58 for n in range(170)]
        churn(node, bob, long_ids, "/bin/sleep", "0.5")
        until(lambda: settled(node, carol, bob.name), "bob's jobs to end", 90)
        time.sleep(1.0)  # the last endings logged

        seen = _kinds(node, carol, "intruder", "drain", "ended")
        assert ("intruder", "seen") in seen and ("drain", None) in seen, seen
        node_shelf = "".join(p.read_text() for p in node.state.glob("events.jsonl*"))
        assert long_ids[0] not in node_shelf and '"ended"' not in node_shelf  # bob's endings are his own
        bobs = _kinds(node, bob, "ended")
        assert bobs and all(kind == "ended" for kind, _ in bobs)
        assert not [e for e in _events(node, alice) if e["kind"] == "ended"]  # alice reads her shelf and the node's


def _events(node: SharedNode, who) -> list[dict]:
    done = node.cli(who, "events", "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _kinds(node: SharedNode, who, *kinds: str) -> list[tuple[str, str | None]]:
    return [(e["kind"], e.get("state")) for e in _events(node, who) if e["kind"] in kinds]
