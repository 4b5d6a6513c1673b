"""``status --json`` served in this process loads only what a reading runs: checked without a clock.

With no agent (``TUNEPLANE_AGENT=off``) the command reads the node through
the node's own service, as the agent would; what keeps that start short is
what it does not import: only the probe and the runtime the settings name,
and none of what only a polling service, a launch or the agent runs (the XID
watchers, the placement search, the usage ledger, the agent's client). And
the interpreter's last garbage collection, over everything those imports
made, is skipped at exit. How long it takes goes in bench/startup_compare.py
and docs/benchmarks.md.
"""

from __future__ import annotations

import json
import subprocess
import sys

from helpers.load import node_env

#: what a reading served here never needs: the other probes, the XID watchers,
#: the placement search, the usage ledger, the agent's client, and every
#: library of the dashboard, the agent, Docker, NVML and Redis
NOT_IMPORTED = {
    "tpnode_tui.probes.auto",
    "tpnode_tui.probes.nvml",
    "tpnode_tui.probes.smi",
    "tpnode_tui.triage.watch",
    "tpnode_tui.allocator.picking",
    "tpnode_tui.core.placement",
    "tpnode_tui.state.ledger",
    "tpnode_tui.state.usage",
    "sqlite3",
    "tpnode_tui.node.remote",
    "tpnode_tui.node.http",
    "tpnode_tui.node.ssh",
    "tpnode_tui.runtimes.docker",
    "tpnode_tui.locks.redis",
    "tpnode_tui.agent",
    "tpnode_tui.tui",
    "textual",
    "aiohttp",
    "aiodocker",
    "pynvml",
    "redis",
}
#: what shows that the node was served here, with the probe and runtime the settings name
SERVED_HERE = {
    "tpnode_tui.node.local",
    "tpnode_tui.service.node",
    "tpnode_tui.probes.simulated",
    "tpnode_tui.runtimes.process",
}


def status_json(scene, state_dir, *flags: str, code: str = "pass") -> subprocess.CompletedProcess[str]:
    """``tpnode-tui status --json`` with no agent, as a user runs it (``code``: run before it)."""
    argv = "sys.argv = ['tpnode-tui', 'status', '--json']"
    run = "; ".join(("import sys", code, argv, "from tpnode_tui.cli import main", "sys.exit(main())"))
    return subprocess.run(
        [sys.executable, *flags, "-c", run],
        capture_output=True,
        text=True,
        env=node_env(scene, state_dir, TUNEPLANE_AGENT="off"),
        timeout=60,
    )


def test_status_served_here_imports_only_what_a_reading_runs(scene, state_dir):
    done = status_json(scene, state_dir, "-X", "importtime")
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert SERVED_HERE <= loaded
    assert sorted(m for m in loaded if m in NOT_IMPORTED or m.split(".")[0] in NOT_IMPORTED) == []
    assert sorted(m for m in loaded if any(m.startswith(f"{n}.") for n in NOT_IMPORTED)) == []
    doc = json.loads(done.stdout)
    assert len(doc["cards"]) == 8 and doc["via"] != "agent"


def test_the_last_collection_at_exit_skips_what_the_imports_made(scene, state_dir):
    """An exit handler registered before the CLI's runs after it (they run last
    registered first), and finds the objects frozen: out of the last collection.
    The collector, paused while the command's modules were imported, is on again."""
    said = "print('frozen', gc.get_freeze_count(), 'collecting', gc.isenabled(), file=sys.stderr)"
    after = f"import atexit, gc; atexit.register(lambda: {said})"
    done = status_json(scene, state_dir, code=after)
    assert done.returncode == 0, done.stderr[-2000:]
    words = done.stderr.split()
    assert words[0] == "frozen" and int(words[1]) > 10_000 and words[2:] == ["collecting", "True"], done.stderr
    assert len(json.loads(done.stdout)["cards"]) == 8
