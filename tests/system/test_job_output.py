"""A job's output, as real accounts meet it through a real agent run as root.

The log file is the job's account's and readable by it alone; the agent reads
it for whoever may see it (the job's owner, an operator) and for nobody else,
a page at a time, and follows it while the job writes. What a terminal would
obey in it (an escape sequence) reaches the terminal escaped.
"""

from __future__ import annotations

import os
import stat
import subprocess

from helpers.accounts import runnable
from helpers.agents import SharedNode
from helpers.waiting import until

#: a Python job that prints, then waits to be stopped: what it printed must be in its
#: log though its buffer never filled (the process runtime runs Python unbuffered)
TALKER = "import time\nprint('epoch 1 loss 0.5 \\x1b[2J done')\ntime.sleep(300)\n"


def launch(node: SharedNode, who, run_id: str, *argv: str) -> subprocess.CompletedProcess:
    done = node.cli(who, "launch", "--cards", "1", "--run-id", run_id, "--", *argv)
    assert done.returncode == 0, done.stderr
    return done


def test_a_jobs_output_is_its_owners_and_the_operators_to_read_and_no_one_elses(shared_node, accounts):
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    launched = launch(shared_node, alice, "talk", runnable().python, "-c", TALKER)
    log = shared_node.state / "logs" / "talk.log"
    assert launched.stdout.splitlines()[1] == (
        f"its output goes to its log {log}: tpnode-tui logs talk shows it (-f follows it)"
    )
    said = until(lambda: "epoch 1" in log.read_text() and log.read_text(), "the job to print")
    assert said == "epoch 1 loss 0.5 \x1b[2J done\n"  # as written: unbuffered, though the job still runs
    seen = os.stat(log)
    assert (seen.st_uid, stat.S_IMODE(seen.st_mode)) == (alice.uid, 0o600)  # hers alone

    for reader in (alice, carol):  # the owner, and an operator
        shown = shared_node.cli(reader, "logs", "talk")
        assert (shown.returncode, shown.stdout, shown.stderr) == (0, "epoch 1 loss 0.5 \\x1b[2J done\n", "")

    refused = shared_node.cli(bob, "logs", "talk")
    assert (refused.returncode, refused.stdout) == (77, "")
    assert refused.stderr == (
        f"tpnode-tui: talk (card 0) belongs to {alice.name}; only {alice.name} or an operator may read the "
        f"output of it; the operators here: root, group {accounts.operators_group}\n"
    )
    followed = shared_node.cli(bob, "logs", "talk", "-f")
    assert followed.returncode == 77 and followed.stdout == ""
    directly = bob.run(["cat", str(log)], env=bob.env())
    assert directly.returncode != 0 and "Permission denied" in directly.stderr
    audit = shared_node.cli(carol, "audit", "--json").stdout
    assert audit.count('"action": "logs"') == 1 and audit.count('"action": "follow_logs"') == 1  # bob's, refused

    assert shared_node.cli(alice, "stop", "talk").returncode == 0
    after = shared_node.cli(alice, "logs", "talk")  # stopped: what it printed is kept
    assert after.stdout.startswith("epoch 1 loss 0.5 \\x1b[2J done\n")


def test_following_a_job_prints_as_it_writes_and_ends_with_it(shared_node, accounts):
    alice = accounts.alice
    count = "import time\nfor n in range(3):\n    print('step', n)\n    time.sleep(0.5)\n"
    launch(shared_node, alice, "count", runnable().python, "-c", count)
    followed = shared_node.cli(alice, "logs", "count", "-f")  # returns once the job has ended
    assert (followed.returncode, followed.stdout) == (0, "step 0\nstep 1\nstep 2\n")
    until(lambda: shared_node.status(alice)["jobs"][0]["status"] == "exited", "the agent to read the job ended")


def test_a_log_longer_than_a_page_comes_whole_and_no_character_is_cut(shared_node, accounts):
    """The agent answers at most a page (64 KiB) at a time: the CLI asks page after
    page, and a character the page's end would cut starts the next page instead."""
    alice = accounts.alice
    text = "é" * 100_001 + "\nend\n"  # 200,007 bytes: four pages, each ending inside an "é" but the last
    write = "import sys\nsys.stdout.write('\\u00e9' * 100_001 + '\\nend\\n')\n"
    launch(shared_node, alice, "long", runnable().python, "-c", write)
    until(lambda: shared_node.status(alice)["jobs"][0]["status"] == "exited", "the job to end")
    shown = shared_node.cli(alice, "logs", "long")
    assert shown.returncode == 0 and shown.stdout == text and shown.stderr == ""
