"""Section 9: the door. One account floods the agent; how quickly another's status answers, and the agent's memory.

``tpnode-tui agent`` runs as its own process (as root, the process runtime, a
simulated 8-card node, a 1 s interval) over a state dir whose log already
holds 40 MB that everyone may read (four files of 10 MB of card events, one
in ten with an 8 KB message, as a log kept before entries were cut short
could hold). Two accounts that are not root are played by two uids with no
entry in the account database (the kernel names a uid all the same), each a
process of its own speaking raw HTTP on the socket with the standard library
only, so nothing of the product's client is measured:

- quiet: the second uid asks ``GET /v1/snapshot`` one request at a time, each
  on a new connection; the time from connecting to the last byte.
- under load: the same, while the first uid keeps 30 requests in flight at
  once, each on its own connection, for the whole window: a page of the log
  (``/v1/events``, which reads every kept file of it), its own audit, and a
  64 KiB body nested past what Python reads.

Quiet and loaded samples are taken in turn, window by window, so the machine's
drift falls on both; the ratio is loaded over quiet medians. The agent's
resident memory is sampled all along (its peak is reported), and how many of
the flood's requests were answered, and how (200, 400, 429), is said.
"""

from __future__ import annotations

import inspect
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import psutil

from common import Limit, Ratio, Row, Section
from helpers.services import write_scene
from helpers.waiting import until
from tpnode_tui.agent.gate import LISTEN_BACKLOG
from tpnode_tui.config.sections import LimitSettings
from tpnode_tui.host import dial

TITLE = "10. The door: another account's status while one account floods the agent"
FLOODER, QUIET = 60_401, 60_402
IN_FLIGHT = 30
START_TIMEOUT_S = 60.0
#: the door's goals: another account's status within about a second, the agent under 300 MB
STATUS_S, RSS_MB = 1.0, 300.0

#: the flooder: keeps IN_FLIGHT requests going until told to stop (stdin closes), then prints its tally
_FLOOD = r"""
import collections, json, socket, sys, threading
path = sys.argv[1]
asked = [("GET", "/v1/events", b""), ("GET", "/v1/audit", b""), ("POST", "/v1/launch", b"[" * 65000)]
tally = collections.Counter()
stop = threading.Event()

def one(method, target, body):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(120)
    try:
        s.connect(path)
        s.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                  "Connection: close\r\n\r\n".encode() + body)
        head = s.recv(64)
        while s.recv(1 << 16):
            pass
        tally[head.split(b" ")[1].decode() if head else "closed"] += 1
    except OSError as e:
        tally[type(e).__name__] += 1
    finally:
        s.close()

def worker(n):
    while not stop.is_set():
        one(*asked[n % len(asked)])
        n += 1

threads = [threading.Thread(target=worker, args=(n,)) for n in range(int(sys.argv[2]))]
for t in threads:
    t.start()
print("flooding", flush=True)
sys.stdin.read()
stop.set()
for t in threads:
    t.join()
print(json.dumps(tally), flush=True)
"""

#: the quiet account: one status per line read from stdin, each answered with its seconds; it
#: connects as the product's client does, waiting for room in a full queue (host/dial.py, inlined)
_QUIET = (
    inspect.getsource(dial)
    + r"""
import sys
path = sys.argv[1]
for _ in sys.stdin:
    started = time.perf_counter()
    s = connect_unix(path, 5.0)
    s.sendall(b"GET /v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head = s.recv(64)
    while s.recv(1 << 16):
        pass
    s.close()
    ok = head.startswith(b"HTTP/1.1 200")
    print(f"{time.perf_counter() - started if ok else -1.0}", flush=True)
"""
)


def _python() -> str:
    """An interpreter another uid may run (the checkout's environment may sit where only root can enter)."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def _as(uid: int, script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [_python(), "-I", "-c", script, *args],
        user=uid,
        group=uid,
        extra_groups=[],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )


#: the connection-rate flood: processes of the first uid, each opening new connections one
#: after another as fast as it can (a request sent on each, no answer read), until stdin closes
CONNECTORS = 2
#: what the door is held to under it: another account's status median
CONNECT_FLOOD_STATUS_S = 0.1

_CONNECT_FLOOD = r"""
import socket, sys, threading
path = sys.argv[1]
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
made = 0
print("flooding", flush=True)
while not done.is_set():
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


def _old_log(state: Path) -> None:
    state.mkdir(mode=0o700)
    t = time.time() - 3600
    for name in ("events.jsonl.3", "events.jsonl.2", "events.jsonl.1", "events.jsonl"):
        with open(state / name, "w") as f:
            for n in range(12_000):
                t += 0.001
                said = "E" * (8000 if n % 10 == 0 else 20)
                f.write(json.dumps({"time": t, "kind": "health", "message": f"card {n % 8}: {said}", "cards": [n % 8]}))
                f.write("\n")


class _Agent:
    def __init__(self, tmp: Path, *, old_log: bool = True, **settings: str) -> None:
        """``old_log``: a state dir whose log holds 40 MB already; ``settings``: more TUNEPLANE_* variables."""
        write_scene(tmp / "node.json", 8)
        if old_log:
            _old_log(tmp / "state")
        self.socket = tmp / "a.sock"
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/"),
            "LANG": "C.UTF-8",
            "TUNEPLANE_PROBE": f"simulated:{tmp / 'node.json'}",
            "TUNEPLANE_RUNTIME": "process",
            "TUNEPLANE_STATE_DIR": str(tmp / "state"),
            "TUNEPLANE_AGENT_SOCKET": str(self.socket),
            "TUNEPLANE_OPERATORS_GROUP": "tpb-no-such-group",
            **settings,
        }
        self._log = open(tmp / "agent.log", "wb")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tpnode_tui", "--interval", "1", "agent"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.process = psutil.Process(self._proc.pid)
        until(
            lambda: self._proc.poll() is not None or self.socket.exists(),
            "the agent to start",
            START_TIMEOUT_S,
            every=0.05,
            error=TimeoutError,
        )
        if self._proc.poll() is not None:
            raise RuntimeError(f"the agent did not start: {Path(self._log.name).read_text()[-2000:]}")

    def rss_mb(self) -> float:
        return self.process.memory_info().rss / 2**20

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()


def _status(quiet: subprocess.Popen) -> float:
    assert quiet.stdin is not None and quiet.stdout is not None
    quiet.stdin.write("\n")
    quiet.stdin.flush()
    seconds = float(quiet.stdout.readline())
    if seconds < 0:
        raise RuntimeError("the quiet account's status was refused")
    return seconds


def run(quick: bool) -> Section:
    if os.geteuid() != 0:
        return Section(TITLE, skipped="needs root: the agent is root's, and two other uids play the accounts")
    section = Section(TITLE)
    windows, per_window = (2, 5) if quick else (5, 10)
    quiet_row = Row("door_status_quiet", "another account's status, nobody flooding")
    loaded_row = Row(
        "door_status_flooded", f"another account's status, one account with {IN_FLIGHT} requests in flight"
    )
    rss_row = Row("door_agent_rss_mb", "agent resident memory at its peak, under the flood", unit="MB")
    tallies: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="tpb-d", dir="/tmp") as tmp:
        Path(tmp).chmod(0o755)  # the two uids reach the socket through it
        agent = _Agent(Path(tmp))
        quiet = _as(QUIET, _QUIET, str(agent.socket))
        peak = agent.rss_mb()
        try:
            _status(quiet)  # the first reading, and a warm interpreter
            for _ in range(windows):
                quiet_row.samples += [_status(quiet) for _ in range(per_window)]
                flood = _as(FLOODER, _FLOOD, str(agent.socket), str(IN_FLIGHT))
                assert flood.stdout is not None and flood.stdin is not None
                if flood.stdout.readline().strip() != "flooding":
                    raise RuntimeError("the flood did not start")
                time.sleep(1.0)  # all thirty in flight
                for _ in range(per_window):
                    loaded_row.samples.append(_status(quiet))
                    peak = max(peak, agent.rss_mb())
                    time.sleep(0.2)
                flood.stdin.close()
                for status, n in json.loads(flood.stdout.readline()).items():
                    tallies[status] = tallies.get(status, 0) + n
                flood.wait(60)
            more = connection_flood(agent, quiet, windows, per_window)
        finally:
            quiet.kill()
            agent.close()
    rss_row.samples.append(peak)
    section.rows += [quiet_row, loaded_row, rss_row]
    section.ratios.append(Ratio("door_status_slowdown", "status flooded / quiet", loaded_row, quiet_row))
    section.limits += [
        Limit(f"flooded status under {STATUS_S:g} s (median, s)", _seconds(loaded_row), STATUS_S),
        Limit(f"agent memory under {RSS_MB:g} MB at its peak (MB)", rss_row, RSS_MB),
    ]
    said = ", ".join(f"{n} answered {status}" for status, n in sorted(tallies.items()))
    section.notes.append(f"the flood's requests over {windows} windows: {said}")
    section.rows += more.rows
    section.limits += more.limits
    section.notes += more.notes
    return section


def _queued(socket_path: Path) -> Optional[int]:
    """Connections in the agent's queue not yet accepted now (``ss``), if it can be read."""
    try:
        done = subprocess.run(["ss", "-xlnH", "src", str(socket_path)], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    fields = done.stdout.split()
    return int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else None


def connection_flood(agent: _Agent, quiet: subprocess.Popen, windows: int, per_window: int) -> Section:
    """Another account's status while the first opens new connections as fast as
    CONNECTORS processes can: what the door refuses at once, and the queue, full."""
    part = Section(TITLE)
    row = Row(
        "door_status_connect_flood",
        f"another account's status, one account opening new connections as fast as {CONNECTORS} processes can",
    )
    made, seconds, fullest = 0, 0.0, 0
    for _ in range(windows):
        floods = [_as(FLOODER, _CONNECT_FLOOD, str(agent.socket)) for _ in range(CONNECTORS)]
        for flood in floods:
            assert flood.stdout is not None
            if flood.stdout.readline().strip() != "flooding":
                raise RuntimeError("the connection flood did not start")
        started = time.monotonic()
        time.sleep(0.5)  # the queue full
        for _ in range(per_window):
            fullest = max(fullest, _queued(agent.socket) or 0)
            row.samples.append(_status(quiet))
            time.sleep(0.2)
        for flood in floods:
            assert flood.stdin is not None and flood.stdout is not None
            flood.stdin.close()
            made += int(flood.stdout.readline())
            flood.wait(60)
        seconds += time.monotonic() - started
    part.rows.append(row)
    part.limits.append(
        Limit(
            f"status under the connection flood under {CONNECT_FLOOD_STATUS_S * 1000:g} ms (median, s)",
            _seconds(row),
            CONNECT_FLOOD_STATUS_S,
        )
    )
    rate = LimitSettings().connection_rate_per_user
    part.notes.append(
        f"the connection flood opened {made / seconds:,.0f} connections a second over {windows} windows "
        f"(each refused at once past {rate} a second); the agent's queue held {fullest} of "
        f"{LISTEN_BACKLOG} not yet accepted at its fullest, as sampled"
    )
    return part


def _seconds(row: Row) -> Row:
    """``row`` in seconds, for a limit written in seconds (a ms row's median is in ms)."""
    return Row(row.key + "_s", row.label, row.samples, unit="s")


# ── section 11: exited records churned by one account ──────────────────────────

CHURN_TITLE = "11. Exited records: another account's status while one account churns quick jobs, and the idle agent"
CHURNER = 60_403
#: launches the churner keeps in flight: each is a launch of /bin/true, again as soon as it is answered
CHURNING = 2
#: exited records in the usage ledger's history, or listed, for the idle agent
HISTORY = 10_000
#: the targets: another account's status median under 100 ms during the churn, the idle
#: agent with 10,000 exited records in the history under 2 % of a core
CHURN_STATUS_S, IDLE_CPU_PCT = 0.1, 2.0

#: the churner: launches /bin/true on one card, CHURNING at once, until told to stop (stdin
#: closes), then prints its tally of answers by status
_CHURN = r"""
import collections, json, socket, sys, threading
path, window, threads_n = sys.argv[1], sys.argv[2], int(sys.argv[3])
tally = collections.Counter()
stop = threading.Event()

def one(run_id):
    body = json.dumps({"cards": 1, "command": ["/bin/true"], "cwd": "/", "run_id": run_id}).encode()
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(120)
    try:
        s.connect(path)
        s.sendall(f"POST /v1/launch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        head = s.recv(64)
        while s.recv(1 << 16):
            pass
        tally[head.split(b" ")[1].decode() if head else "closed"] += 1
    except OSError as e:
        tally[type(e).__name__] += 1
    finally:
        s.close()

def worker(t):
    n = 0
    while not stop.is_set():
        one(f"c{window}-{t}-{n}")
        n += 1

threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
for t in threads:
    t.start()
print("churning", flush=True)
sys.stdin.read()
stop.set()
for t in threads:
    t.join()
print(json.dumps(tally), flush=True)
"""


def _snapshot(socket_path: Path) -> dict:
    """``GET /v1/snapshot`` as this process (root) asks it: the document, and its size in ``_bytes``."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(socket_path))
        s.sendall(b"GET /v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        body = b"".join(body.split(b"\r\n")[1::2])
    return {**json.loads(body), "_bytes": len(body)}


def _cpu_pct(agent: _Agent, seconds: float) -> float:
    """The agent's CPU (user and system) over ``seconds`` of wall time, in % of a core."""
    before, started = agent.process.cpu_times(), time.monotonic()
    time.sleep(seconds)
    after, wall = agent.process.cpu_times(), time.monotonic() - started
    return 100.0 * ((after.user - before.user) + (after.system - before.system)) / wall


def _in_the_ledger(state: Path, count: int) -> None:
    """``count`` exited jobs of the churner in the usage ledger's history, as the agent
    records them (one reading that lists them all), an hour ago and before."""
    from helpers.usage import Scene
    from tpnode_tui.host.identity import Caller
    from tpnode_tui.state.ledger import UsageLedger

    churner = Caller(uid=CHURNER, gid=CHURNER, user=str(CHURNER))
    scene = Scene(8)
    started = time.time() - 3600 - count
    for n in range(count):
        scene.hold(f"old-{n}", churner, [n % 8], started_at=started + n)
        scene.exit(f"old-{n}")
    ledger = UsageLedger(state, holds_per_user=count)
    ledger.update(scene.snap(time.time() - 3600))
    ledger.close()


def _listed(state: Path, count: int) -> None:
    """``count`` exited jobs of the churner in the process runtime's state file, as
    they piled up before a limit removed them."""
    from tpnode_tui.runtimes.liveness import boot_id
    from tpnode_tui.runtimes.statefile import JobRecord, StateFile

    state.mkdir(mode=0o700, exist_ok=True)
    boot, started = boot_id(), time.time() - 3600 - count
    with StateFile(state).transaction() as jobs:
        for n in range(count):
            name = f"old-{n}"
            jobs[name] = JobRecord(
                name=name,
                run_id=name,
                gpus=(n % 8,),
                kind="job",
                owner=str(CHURNER),
                command=("/bin/true",),
                started_at=started + n,
                expires_at=None,
                pid=1,
                pid_start_ticks=0,
                boot_id=boot,
                log=str(state / "logs" / f"{name}.log"),
                exit_code=0,
                uid=CHURNER,
            )


def _idle_cpu(state_of, seconds: float, **settings: str) -> float:
    """The idle agent's CPU over ``seconds``, on a state dir ``state_of`` prepared before it starts."""
    with tempfile.TemporaryDirectory(prefix="tpb-c", dir="/tmp") as tmp:
        state_of(Path(tmp) / "state")
        agent = _Agent(Path(tmp), old_log=False, **settings)
        try:
            _snapshot(agent.socket)  # read once: a ledger taking in what it lists has done so
            time.sleep(3.0)
            return _cpu_pct(agent, seconds)
        finally:
            agent.close()


def churn(quick: bool) -> Section:
    """Another account's status while one account launches /bin/true in a loop; and the idle
    agent, with nothing, with 10,000 exited records in the ledger, and with 10,000 listed."""
    if os.geteuid() != 0:
        return Section(CHURN_TITLE, skipped="needs root: the agent is root's, and two other uids play the accounts")
    section = Section(CHURN_TITLE)
    windows, per_window, idle_s = (2, 5, 10.0) if quick else (5, 10, 30.0)
    quiet_row = Row("churn_status_quiet", "another account's status, nobody churning")
    churned_row = Row(
        "churn_status_churned", f"another account's status, one account launching /bin/true ({CHURNING} at once)"
    )
    rate_row = Row("churn_launches_per_s", "the churning account's launches answered", unit="/s")
    size_row = Row("churn_status_kib", "status --json after the churn", unit="KiB")
    tallies: dict[str, int] = {}
    churned_s = 0.0
    with tempfile.TemporaryDirectory(prefix="tpb-c", dir="/tmp") as tmp:
        Path(tmp).chmod(0o755)  # the two uids reach the socket through it
        agent = _Agent(Path(tmp), old_log=False)
        quiet = _as(QUIET, _QUIET, str(agent.socket))
        try:
            _status(quiet)
            for window in range(windows):
                quiet_row.samples += [_status(quiet) for _ in range(per_window)]
                churner = _as(CHURNER, _CHURN, str(agent.socket), str(window), str(CHURNING))
                assert churner.stdout is not None and churner.stdin is not None
                if churner.stdout.readline().strip() != "churning":
                    raise RuntimeError("the churn did not start")
                started = time.monotonic()
                time.sleep(1.0)
                for _ in range(per_window):
                    churned_row.samples.append(_status(quiet))
                    time.sleep(0.5)
                churner.stdin.close()
                for status, n in json.loads(churner.stdout.readline()).items():
                    tallies[status] = tallies.get(status, 0) + n
                churned_s += time.monotonic() - started
                churner.wait(60)
            time.sleep(3.0)  # the last jobs end, and the oldest go
            snap = _snapshot(agent.socket)
        finally:
            quiet.kill()
            agent.close()
    answered = sum(n for status, n in tallies.items() if status.isdigit())
    rate_row.samples.append(answered / churned_s if churned_s else 0.0)
    size_row.samples.append(snap["_bytes"] / 1024)
    listed = [j for j in snap["jobs"] if j.get("uid") == CHURNER]
    nothing_row = Row("churn_agent_cpu_pct_idle", "the idle agent, nothing listed or in the ledger", unit="%")
    history_row = Row(
        "churn_agent_cpu_pct_history", f"the idle agent, {HISTORY:,} exited jobs in the usage ledger", unit="%"
    )
    listed_row = Row(
        "churn_agent_cpu_pct_listed",
        f"the idle agent, {HISTORY:,} exited jobs listed (the limit lifted, as before it)",
        unit="%",
    )
    nothing_row.samples.append(_idle_cpu(lambda state: None, idle_s))
    history_row.samples.append(_idle_cpu(lambda state: _in_the_ledger(state, HISTORY), idle_s))
    listed_row.samples.append(
        _idle_cpu(lambda state: _listed(state, HISTORY), idle_s, TUNEPLANE_MAX_EXITED_PER_USER=str(HISTORY * 10))
    )
    section.rows += [quiet_row, churned_row, rate_row, size_row, nothing_row, history_row, listed_row]
    section.ratios.append(Ratio("churn_status_slowdown", "status churned / quiet", churned_row, quiet_row))
    section.limits += [
        Limit(f"status during the churn under {CHURN_STATUS_S:g} s (median, s)", _seconds(churned_row), CHURN_STATUS_S),
        Limit(f"idle agent, {HISTORY:,} in the ledger, under {IDLE_CPU_PCT:g} % of a core", history_row, IDLE_CPU_PCT),
    ]
    said = ", ".join(f"{n} answered {status}" for status, n in sorted(tallies.items()))
    section.notes.append(
        f"the churn's launches over {windows} windows ({churned_s:.0f} s): {said}; afterwards the node "
        f"listed {len(listed)} exited jobs of the churning account"
    )
    return section
