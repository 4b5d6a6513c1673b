"""``tpnode-tui status`` of two installed copies side by side, beside a bare Python start.

    python bench/startup_compare.py OLD_PREFIX NEW_PREFIX [ROUNDS]

Each prefix is a virtual environment the package is installed in, not
editable (``python3 -m venv P && P/bin/pip install .`` at the commit to
compare), as a user installs it: an editable install's import hook is part of
every start. One agent, the new copy's, serves a simulated 8-card node with
the process runtime from a temporary directory; each copy's console script
asks it (``TUNEPLANE_AGENT=on``) and serves the node itself
(``TUNEPLANE_AGENT=off``), round by round in a rotated order, each a whole
process from exec to exit, beside ``python -c pass`` of the new environment.
Beside them, the new copy's interpreter importing what a status served
in-process cannot do without (asyncio, the settings, the model, the port) and
running nothing: the floor that making imports lazy cannot go below.
Prints each way's median and p90, and its ratio to the bare start.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the modules every status served in-process needs whatever else is made lazy:
#: the event loop, the settings, the snapshot's model, and the port's types and codec
FLOOR = (
    "import asyncio, json, tpnode_tui.config.settings, tpnode_tui.model.snapshot, tpnode_tui.model.views, "
    "tpnode_tui.model.jobs, tpnode_tui.port.types.jobs, tpnode_tui.port.types.readings, tpnode_tui.port.wire.snapshot"
)


def main(old: Path, new: Path, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tpb-s", dir="/tmp") as tmp:
        root = Path(tmp)
        card = {"name": "NVIDIA H200", "memory_total_mib": 143771, "memory_used_mib": 1}
        (root / "node.json").write_text(json.dumps({"cards": [card] * 8}))
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": tmp,
            "LANG": "C.UTF-8",
            "TUNEPLANE_PROBE": f"simulated:{root / 'node.json'}",
            "TUNEPLANE_RUNTIME": "process",
            "TUNEPLANE_STATE_DIR": str(root / "state"),
            "TUNEPLANE_AGENT_SOCKET": str(root / "a.sock"),
        }
        agent = subprocess.Popen(
            [str(new / "bin" / "tpnode-tui"), "agent"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 30
            while not (root / "a.sock").exists():
                if time.monotonic() > deadline or agent.poll() is not None:
                    raise SystemExit("the agent did not start")
                time.sleep(0.1)
            time.sleep(2)
            python = str(new / "bin" / "python")
            ways = {
                "bare Python start": ([python, "-c", "pass"], {}),
                # what serving the node here cannot start without, imported and nothing run:
                # the floor under "status in-process" while it reads the node on an event loop
                "new: imports only, asyncio + json": ([python, "-c", "import asyncio, json"], {}),
                "new: imports only, + settings, model, port": ([python, "-c", FLOOR], {}),
            }
            for name, prefix in (("old", old), ("new", new)):
                status = [str(prefix / "bin" / "tpnode-tui"), "status", "--json"]
                ways[f"{name}: status through the agent"] = (status, {"TUNEPLANE_AGENT": "on"})
                ways[f"{name}: status in-process"] = (status, {"TUNEPLANE_AGENT": "off"})
            times: dict[str, list[float]] = {way: [] for way in ways}
            order = list(ways)
            load = os.getloadavg()[0]
            for n in range(rounds + 1):  # the first round warms the page cache and is thrown away
                for way in order[n % len(order) :] + order[: n % len(order)]:
                    command, extra = ways[way]
                    start = time.perf_counter()
                    done = subprocess.run(command, env={**env, **extra}, capture_output=True)
                    elapsed = time.perf_counter() - start
                    if done.returncode != 0:
                        raise SystemExit(f"{way} exited {done.returncode}: {done.stderr[-300:]!r}")
                    if n:
                        times[way].append(elapsed)
        finally:
            agent.terminate()
            agent.wait(30)
    bare = statistics.median(times["bare Python start"])
    for way, samples in times.items():
        samples.sort()
        median = statistics.median(samples)
        p90 = samples[max(0, round(0.9 * len(samples)) - 1)]
        print(f"{way:43} median {median * 1000:5.0f} ms   p90 {p90 * 1000:5.0f} ms   {median / bare:5.1f} x bare")
    print(f"{rounds} rounds; load average (1 min) {load:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) == 4 else 20)
