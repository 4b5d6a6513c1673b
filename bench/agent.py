"""Section 6: one agent, many dashboards. ``tpnode-tui agent`` runs as its own
process on a simulated node of 8 and of 64 idle cards (the process runtime, a
temporary state dir, a 1 s interval), its probe reads counted.

- Probe reads: bench/agent_counted.py is the real agent (``tpnode_tui.cli``'s
  ``agent``) with ``SimulatedProbe.read`` wrapped to append one byte to a file
  per read; the file's size is the count. The API's snapshot encodings are
  counted the same way. The window runs from one read to the read after it
  has lasted ``window`` seconds, so no partial interval is counted at either end.
- Dashboards: bench/agent_streams.py holds 0, 1 or 20 real AgentNode streams
  (``GET /v1/stream``, each reading decoded as a dashboard decodes it) in a
  process of its own, and counts the readings and seqs each receives; the
  agent's accepted connections on its socket are counted too, so a stream that
  silently went away would show. Once, on 8 cards, 20 real ``tpnode-tui``
  dashboards (``TUNEPLANE_AGENT=on``) in the windows of a private tmux server.
- CPU: the agent process's user + system time (psutil) over the same window,
  idle, as a percentage of one core; its resident memory at the end.
- ``tpnode-tui status --json``: the console script through the agent and in-process
  (``TUNEPLANE_AGENT=off``, the same node and state dir), in turn
  round by round, each a whole process from exec to exit; median and p90. Beside them,
  an interpreter that only imports ``tpnode_tui.cli`` (what both pay first) and one
  that does nothing (``python -c pass``, a bare Python start): the goal is both
  under 3 times that. Whether the package is installed editable is noted: an
  editable install's import hook is part of every start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import psutil
from dashboard import COLUMNS, LINES, _cpu_seconds, _frame_complete

from common import BENCH, Limit, Ratio, Row, Section, percentile
from helpers.services import write_scene
from helpers.waiting import until

TITLE = "6. The agent: one probe read per interval for every dashboard, idle CPU, status"
INTERVAL_S = 1.0
START_TIMEOUT_S = 60.0
SETTLE_S = 2.0
#: long enough after a probe read for its reading to reach every stream, well short of the interval
DELIVERED_S = 0.3
#: how many streams each node is measured with; ``--quick`` only the ones the targets need
STREAMS = {8: (0, 1, 20), 64: (0, 1, 20)}
QUICK_STREAMS = {8: (1, 20), 64: (20,)}
DASHBOARDS = 20


def _node_env(tmp: Path, cards: int) -> dict[str, str]:
    """The node's settings, and nothing else of this shell's TUNEPLANE_*."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/"),
        "LANG": "C.UTF-8",
        "TUNEPLANE_PROBE": f"simulated:{tmp / f'node{cards}.json'}",
        "TUNEPLANE_RUNTIME": "process",
        "TUNEPLANE_STATE_DIR": str(tmp / f"state{cards}"),
        # short: a Unix socket's path is limited to 107 bytes
        "TUNEPLANE_AGENT_SOCKET": str(tmp / f"a{cards}.sock"),
    }


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class Agent:
    """The real agent, as its own process, with its probe reads counted."""

    def __init__(self, tmp: Path, cards: int) -> None:
        write_scene(tmp / f"node{cards}.json", cards)
        self.env = _node_env(tmp, cards)
        self.socket = Path(self.env["TUNEPLANE_AGENT_SOCKET"])
        self._reads = tmp / f"reads{cards}"
        self._encodes = tmp / f"encodes{cards}"
        self._log = open(tmp / f"agent{cards}.log", "wb")
        self._proc = subprocess.Popen(
            [
                sys.executable,
                str(BENCH / "agent_counted.py"),
                str(self._reads),
                str(self._encodes),
                "--interval",
                f"{INTERVAL_S:g}",
                "agent",
            ],
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.process = psutil.Process(self._proc.pid)
        try:
            until(
                lambda: self._proc.poll() is None and self.socket.exists() and self.reads() > 0,
                "the agent to start and read the node",
                START_TIMEOUT_S,
                every=0.02,
                error=TimeoutError,
            )
        except TimeoutError:
            self.close()
            raise RuntimeError(f"the agent did not start: {Path(self._log.name).read_text()[-2000:]}") from None

    def reads(self) -> int:
        """Probe reads so far."""
        return _size(self._reads)

    def encodes(self) -> int:
        """Snapshots made into JSON for clients so far."""
        return _size(self._encodes)

    def connections(self) -> int:
        """Clients connected to the agent's socket now: its sockets bound to that
        path, less the one it listens on (Linux gives Unix sockets no state to
        tell them apart by)."""
        return sum(1 for c in self.process.net_connections(kind="unix") if c.laddr == str(self.socket)) - 1

    def after_next_read(self) -> tuple[int, float, float]:
        """(reads, agent CPU seconds, time) just after the next probe read begins."""
        start = self.reads()
        until(lambda: self.reads() > start, "a probe read", 10 * INTERVAL_S, every=0.02, error=TimeoutError)
        return self.reads(), _cpu_seconds(self.process), time.perf_counter()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()


class Streams:
    """``n`` AgentNode streams in a process of their own (bench/agent_streams.py)."""

    def __init__(self, socket: Path, n: int) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(BENCH / "agent_streams.py"), str(socket), str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self._proc.stdout.readline()
        if line.strip() != "ready":
            self.close()
            raise RuntimeError(f"the streams did not start (they said {line!r})")

    def counts(self) -> dict[str, list[int]]:
        self._proc.stdin.write("\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the streams' process ended: a stream was cut")
        return json.loads(line)

    def close(self) -> None:
        try:
            self._proc.stdin.close()
            self._proc.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()


class Dashboards:
    """``n`` real dashboards on the agent, one per window of a private tmux server."""

    def __init__(self, n: int, env: dict[str, str]) -> None:
        self._tmux = shutil.which("tmux")
        if self._tmux is None:
            raise FileNotFoundError("tmux is not installed")
        self.socket = f"tpb-agent-{os.getpid()}"
        self.n = n
        exports = [f"{k}={v}" for k, v in {**env, "TERM": "tmux-256color", "TUNEPLANE_AGENT": "on"}.items()]
        command = ["env", "-i", *exports, sys.executable, "-m", "tpnode_tui", "--interval", f"{INTERVAL_S:g}"]
        self._run("new-session", "-d", "-s", "bench", "-n", "d0", "-x", str(COLUMNS), "-y", str(LINES), *command)
        try:
            for i in range(1, n):
                self._run("new-window", "-d", "-t", "bench", "-n", f"d{i}", *command)
        except RuntimeError:
            self.close()
            raise

    def _run(self, *args: str) -> str:
        done = subprocess.run([self._tmux, "-L", self.socket, *args], capture_output=True, text=True, timeout=20)
        if done.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {done.stderr.strip()}")
        return done.stdout

    def screens(self) -> list[str]:
        return [self._run("capture-pane", "-p", "-t", f"bench:d{i}") for i in range(self.n)]

    def all_show(self, cards: int, socket: Path) -> bool:
        """Every dashboard shows the whole node, served by the agent."""
        return all(_frame_complete(s, cards) and f"agent at {socket}" in s for s in self.screens())

    def close(self) -> None:
        """Quit each as a user would (through the agent nothing asks first),
        then end the tmux server and any dashboard that outlived it."""
        procs = []
        try:
            for line in self._run("list-panes", "-s", "-t", "bench", "-F", "#{pane_pid}").split():
                procs.append(psutil.Process(int(line)))
            for i in range(self.n):
                self._run("send-keys", "-t", f"bench:d{i}", "q")
            psutil.wait_procs(procs, timeout=20)
        except (RuntimeError, subprocess.SubprocessError, OSError, psutil.Error):
            pass
        subprocess.run([self._tmux, "-L", self.socket, "kill-server"], capture_output=True, timeout=20)
        for proc in procs:
            if proc.is_running():
                proc.kill()


def _window(agent: Agent, window_s: float, streams: Optional[Streams] = None) -> dict:
    """Probe reads per second, the agent's CPU, its encodings and what each
    stream received, from read to read.

    Encodings and streams are counted a moment after each of the two reads,
    once its reading has been encoded and has reached them: what happened in
    between is what the reads in between made, one encoding for all and one
    reading per stream if every stream gets every reading.
    """
    load0 = os.getloadavg()[0]
    reads0, cpu0, t0 = agent.after_next_read()
    time.sleep(DELIVERED_S)
    encodes0, before = agent.encodes(), streams.counts() if streams else None
    time.sleep(window_s - DELIVERED_S)
    reads1, cpu1, t1 = agent.after_next_read()
    time.sleep(DELIVERED_S)
    encodes1, after = agent.encodes(), streams.counts() if streams else None
    elapsed = t1 - t0
    out = {
        "reads_per_s": (reads1 - reads0) / elapsed,
        "reads": reads1 - reads0,
        "encodes": encodes1 - encodes0,
        "cpu_pct": (cpu1 - cpu0) / elapsed * 100,
        "rss_mb": agent.process.memory_info().rss / 1e6,
        "connections": agent.connections(),
        "elapsed": elapsed,
        "load": (load0, os.getloadavg()[0]),
    }
    if before and after:
        got = [b - a for a, b in zip(before["received"], after["received"])]
        seqs = [b - a for a, b in zip(before["seq"], after["seq"])]
        out.update(received_min=min(got), received_max=max(got), every_seq=got == seqs)
    return out


def _status_command() -> list[str]:
    """The console script where it is installed beside this interpreter, as a user types it."""
    script = Path(sys.executable).with_name("tpnode-tui")
    args = ["status", "--json"]  # what a script asks, and the agent's document handed on as it wrote it
    return [str(script), *args] if script.exists() else [sys.executable, "-m", "tpnode_tui", *args]


def _status_times(env: dict[str, str], rounds: int) -> dict[str, list[float]]:
    """Wall time of whole ``tpnode-tui status --json`` processes, through the agent and
    in-process, and of an interpreter that only imports the CLI (what both pay
    before the node is asked anything), each round in a rotated order."""
    status = _status_command()
    ways = {
        "agent": (status, {**env, "TUNEPLANE_AGENT": "on"}, '"via": "agent"'),
        "local": (status, {**env, "TUNEPLANE_AGENT": "off"}, '"via": "local"'),
        "import": ([sys.executable, "-c", "import tpnode_tui.cli"], env, ""),
        "bare": ([sys.executable, "-c", "pass"], env, ""),
    }
    order = list(ways)
    times: dict[str, list[float]] = {way: [] for way in ways}
    load0 = os.getloadavg()[0]
    for n in range(rounds + 1):  # the first round warms the page cache and is thrown away
        for way in order[n % len(order) :] + order[: n % len(order)]:
            command, way_env, says = ways[way]
            start = time.perf_counter()
            done = subprocess.run(command, env=way_env, capture_output=True, text=True, timeout=120)
            elapsed = time.perf_counter() - start
            if done.returncode != 0 or says not in done.stdout:
                said = (done.stderr or done.stdout).strip()[-500:]
                raise RuntimeError(f"tpnode-tui status --json ({way}) exited {done.returncode}: {said}")
            if n:
                times[way].append(elapsed)
    times["load"] = [load0, os.getloadavg()[0]]
    return times


def _install_kind() -> str:
    """ "editable" when this interpreter imports the package from a work tree."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        direct = distribution("tpnode-tui").read_text("direct_url.json") or "{}"
    except PackageNotFoundError:
        return "nowhere (imported from the work tree)"
    return "editable" if json.loads(direct).get("dir_info", {}).get("editable") else "as a copy (not editable)"


def _window_s(quick: bool) -> float:
    return 3.0 if quick else 30.0


def _node(cards: int, tmp: Path, quick: bool, section: Section, results: dict) -> None:
    window = _window_s(quick)
    settle = 1.0 if quick else SETTLE_S
    agent = Agent(tmp, cards)
    try:
        time.sleep(settle)
        for n in (QUICK_STREAMS if quick else STREAMS)[cards]:
            streams = Streams(agent.socket, n) if n else None
            try:
                time.sleep(settle)
                results[cards, n] = _window(agent, window, streams)
            finally:
                if streams is not None:
                    streams.close()
        # before the real dashboards: twenty of them starting load the machine for a while after
        results[cards, "status"] = _status_times(agent.env, 3 if quick else 20)
        if cards == 8 and quick:
            section.notes.append("--quick runs no real dashboards: only the full run does")
        elif cards == 8 and shutil.which("tmux"):
            dashboards = Dashboards(DASHBOARDS, agent.env)
            try:
                until(
                    lambda: dashboards.all_show(cards, agent.socket),
                    "every dashboard to show the node through the agent",
                    3 * START_TIMEOUT_S,
                    every=0.02,
                    error=TimeoutError,
                )
                time.sleep(SETTLE_S)
                results[cards, "tui"] = _window(agent, window)
                if not dashboards.all_show(cards, agent.socket):
                    raise RuntimeError("a dashboard stopped showing the node during the window")
                results[cards, "tui"]["dashboards"] = dashboards.n
            finally:
                dashboards.close()
        elif cards == 8:
            section.notes.append("tmux is not installed: no real dashboards were run")
    finally:
        agent.close()


def _clients(n: int) -> str:
    return f"{n} client{'s' if n != 1 else ''}"


def _load(before_after) -> str:
    return f"load average (1 min) {before_after[0]:.2f} before, {before_after[1]:.2f} after"


def run(quick: bool) -> Section:
    section = Section(TITLE)
    window = _window_s(quick)
    results: dict = {}
    # short: the agent's socket lives here
    with tempfile.TemporaryDirectory(prefix="tpb-a", dir="/tmp") as tmp:
        for cards in (8, 64):
            _node(cards, Path(tmp), quick, section, results)

    rows: dict[str, Row] = {}
    for cards in (8, 64):
        for n in (QUICK_STREAMS if quick else STREAMS)[cards]:
            r = results[cards, n]
            who = {0: "no dashboard", 1: "1 dashboard stream"}.get(n, f"{n} dashboard streams")
            rows[f"reads{cards}_{n}"] = Row(
                f"agent_probe_reads_per_s_{n}" + ("" if cards == 8 else f"_{cards}"),
                f"probe reads per second, {cards} cards, {who}",
                [r["reads_per_s"]],
                unit="/s",
            )
            rows[f"cpu{cards}_{n}"] = Row(
                f"agent_cpu_pct_{cards}" + ("" if n == 20 else f"_{n}_streams"),
                f"agent CPU, {cards} cards, {who}, over {window:g} s",
                [r["cpu_pct"]],
                unit="%",
            )
            received = ""
            if n:
                ok = "every stream got every reading" if r["every_seq"] else "SOME STREAM MISSED A READING"
                received = f"each stream received {r['received_min']}-{r['received_max']} readings ({ok}); "
            section.notes.append(
                f"{cards} cards, {who}: {r['reads']} probe reads and {r['encodes']} snapshot encodings in "
                f"{r['elapsed']:.1f} s; {received}{_clients(r['connections'])} on the agent's socket; "
                f"{_load(r['load'])}"
            )
        rows[f"rss{cards}"] = Row(
            f"agent_rss_mb_{cards}",
            f"agent resident memory, {cards} cards, 20 streams",
            [results[cards, 20]["rss_mb"]],
            unit="MB",
        )
    if (8, "tui") in results:
        r = results[8, "tui"]
        d = r["dashboards"]
        rows["reads_tui"] = Row(
            "agent_probe_reads_per_s_tui",
            f"probe reads per second, 8 cards, {d} real dashboards in tmux",
            [r["reads_per_s"]],
            unit="/s",
        )
        rows["cpu_tui"] = Row(
            "agent_cpu_pct_8_tui",
            f"agent CPU, 8 cards, {d} real dashboards, over {window:g} s",
            [r["cpu_pct"]],
            unit="%",
        )
        section.notes.append(
            f"8 cards, {d} real dashboards: {r['reads']} probe reads and {r['encodes']} snapshot "
            f"encodings in {r['elapsed']:.1f} s; "
            f"{_clients(r['connections'])} on the agent's socket; {_load(r['load'])}"
        )
    for cards in (8, 64):
        times = results[cards, "status"]
        suffix = "" if cards == 8 else f"_{cards}"
        rows[f"status_agent{cards}"] = Row(
            f"status_agent_ms{suffix}", f"tpnode-tui status --json through the agent, {cards} cards", times["agent"]
        )
        rows[f"status_local{cards}"] = Row(
            f"status_local_ms{suffix}",
            f"tpnode-tui status --json in-process (TUNEPLANE_AGENT=off), {cards} cards",
            times["local"],
        )
        p90 = {way: percentile(times[way], 90) * 1000 for way in ("agent", "local")}
        section.notes.append(
            f"tpnode-tui status --json, {cards} cards, p90: through the agent {p90['agent']:.0f} ms, "
            f"in-process {p90['local']:.0f} ms; {_load(times['load'])}"
        )
    rows["import"] = Row(
        "cli_import_ms",
        "of which: Python starting and importing tpnode_tui.cli",
        results[8, "status"]["import"] + results[64, "status"]["import"],
    )
    rows["bare"] = Row(
        "python_start_ms",
        "a bare Python start (python -c pass)",
        results[8, "status"]["bare"] + results[64, "status"]["bare"],
    )
    section.rows += rows.values()
    bare = rows["bare"].median
    if bare is not None:
        section.limits += [
            Limit("status --json via the agent, 8 cards, ms: under 3 bare starts", rows["status_agent8"], 3 * bare),
            Limit("status --json in-process, 8 cards, ms: under 6 bare starts", rows["status_local8"], 6 * bare),
        ]
    section.notes.append(f"the package is installed {_install_kind()} in {sys.prefix}")
    section.ratios += [
        Ratio(
            "agent_reads_20_over_1",
            "probe reads with 20 streams / with 1, 8 cards",
            rows["reads8_20"],
            rows["reads8_1"],
        ),
        Ratio(
            "status_local_over_agent",
            "status in-process / through the agent, 8 cards",
            rows["status_local8"],
            rows["status_agent8"],
        ),
        Ratio(
            "status_agent_over_bare",
            "status through the agent / a bare Python start, 8 cards",
            rows["status_agent8"],
            rows["bare"],
        ),
        Ratio(
            "status_local_over_bare",
            "status in-process / a bare Python start, 8 cards",
            rows["status_local8"],
            rows["bare"],
        ),
    ]
    section.limits += [
        Limit("probe reads per second, 8 cards, 20 streams", rows["reads8_20"], 1.05, inclusive=True),
        Limit("agent CPU % of one core, 8 cards, 20 streams", rows["cpu8_20"], 3),
    ]
    section.notes.append("CPU is the agent process's own user + system time; MB are 10^6 bytes")
    return section
