"""Section 11: the web page. Its first full render in a real browser, and what each open page costs.

``tpnode-tui agent`` runs as its own process (as root, the process runtime, a
simulated 8-card node read every second, whose first card's utilisation moves
every second, so every reading changes what the page says: a busy node), and
``tpnode-tui web`` as another uid over it, as the page is meant to run.

- First full render: Debian's chromium (headless, tests/helpers/browser.py)
  opens the page afresh, again and again; the time from the start of the
  navigation to the moment all 8 cards are drawn, as the page's own clock
  (``performance.now()``) says it: the HTML, its style sheet and script, the
  stream opened and its first page laid out.
- Each open page: bench/web_streams.py holds N ``GET /events`` streams (the
  standard library's sockets, counting events and bytes), N = 0 and 100 in
  turn, window by window, so the machine's drift falls on both. Over each
  window the agent's and the page server's CPU (user + system, % of a core)
  and their resident memory at its end; and what each open page was sent.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from common import BENCH, Row, Section
from helpers.accounts import runnable
from helpers.services import free_port, write_scene
from helpers.waiting import until

TITLE = "11. The web page: first full render, and the cost of each open page"
#: the page server's uid: an ordinary account, as the page refuses root
WEB_UID = 60_403
START_TIMEOUT_S = 60.0
OPEN = 100
CARDS = 8


class _Moving:
    """The simulated node's first card, its utilisation moving every second, until stopped."""

    def __init__(self, scene: Path) -> None:
        self.scene = scene
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._move, daemon=True)
        self._thread.start()

    def _move(self) -> None:
        n = 0
        while not self._stop.wait(1.0):
            n += 1
            cards = [{"name": "NVIDIA H200", "memory_total_mib": 143771} for _ in range(CARDS)]
            cards[0]["utilization_pct"] = n % 100
            os.replace(write_scene(self.scene.with_suffix(".new"), cards), self.scene)  # never read half-written

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class _Process:
    def __init__(self, argv: list[str], env: dict[str, str], log: Path, **kwargs) -> None:
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT, **kwargs)
        self.process = psutil.Process(self.proc.pid)
        self.log = log

    def cpu_s(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def rss_mb(self) -> float:
        return self.process.memory_info().rss / 2**20

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _start(tmp: Path) -> tuple[_Process, _Process, int]:
    write_scene(tmp / "node.json", CARDS)
    sock = tmp / "a.sock"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp),
        "LANG": "C.UTF-8",
        "TUNEPLANE_PROBE": f"simulated:{tmp / 'node.json'}",
        "TUNEPLANE_RUNTIME": "process",
        "TUNEPLANE_STATE_DIR": str(tmp / "state"),
        "TUNEPLANE_AGENT_SOCKET": str(sock),
        "TUNEPLANE_OPERATORS_GROUP": "tpb-no-such-group",
    }
    agent = _Process([sys.executable, "-m", "tpnode_tui", "--interval", "1", "agent"], env, tmp / "agent.log")
    until(lambda: agent.proc.poll() is not None or sock.exists(), "the agent", START_TIMEOUT_S, error=TimeoutError)
    port = free_port()
    product = runnable()  # where another uid can run it
    web = _Process(
        product.argv("web", "--listen", f"127.0.0.1:{port}"),
        env | {"TUNEPLANE_AGENT": "on", "PYTHONPATH": str(product.site)},
        tmp / "web.log",
        user=WEB_UID,
        group=WEB_UID,
        extra_groups=[],
        cwd="/",
    )
    until(lambda: web.proc.poll() is not None or _answers(port), "the page", START_TIMEOUT_S, error=TimeoutError)
    if web.proc.poll() is not None:
        raise RuntimeError(f"the page did not start: {web.log.read_text()[-2000:]}")
    return agent, web, port


#: resolves with the page's own clock once every card is drawn (ms since the navigation began)
_DRAWN = (
    "const done = arguments[arguments.length - 1];"
    "const check = () => document.querySelectorAll('.tile').length === arguments[0] ? done(performance.now())"
    " : requestAnimationFrame(check); check();"
)


def _renders(port: int, rounds: int) -> list[float]:
    from helpers.browser import chromium

    times = []
    with chromium() as browser:
        browser.set_script_timeout(60)
        for _ in range(rounds + 2):
            browser.get("about:blank")
            browser.get(f"http://127.0.0.1:{port}/")
            times.append(browser.execute_async_script(_DRAWN, CARDS) / 1000)
    return times[2:]  # the first two warm the browser's own caches up


class _Streams:
    def __init__(self, port: int, n: int) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(BENCH / "web_streams.py"), str(port), str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self._proc.stdout.readline().strip() != "ready":
            self.close()
            raise RuntimeError("the page's streams did not start")

    def counts(self) -> dict[str, list[int]]:
        self._proc.stdin.write("\n")
        self._proc.stdin.flush()
        return json.loads(self._proc.stdout.readline())

    def close(self) -> None:
        try:
            self._proc.stdin.close()
            self._proc.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()


def _window(agent: _Process, web: _Process, seconds: float, streams: _Streams | None) -> dict[str, float]:
    before = (agent.cpu_s(), web.cpu_s(), streams.counts() if streams else None)
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    after = (agent.cpu_s(), web.cpu_s(), streams.counts() if streams else None)
    said = {
        "agent_cpu": 100 * (after[0] - before[0]) / elapsed,
        "web_cpu": 100 * (after[1] - before[1]) / elapsed,
        "agent_rss": agent.rss_mb(),
        "web_rss": web.rss_mb(),
    }
    if streams:
        n = len(after[2]["pages"])
        for key in ("pages", "fresh", "bytes"):
            said[key] = sum(a - b for a, b in zip(after[2][key], before[2][key])) / n / elapsed
    return said


def run(quick: bool) -> Section:
    if os.geteuid() != 0:
        return Section(TITLE, skipped="needs root: the agent is root's, and another uid runs the page")
    rounds, windows, seconds = (5, 2, 5.0) if quick else (20, 4, 20.0)
    rows = {
        "render": Row("web_first_render_ms", "first full render of the page, 8 cards (chromium, navigation to drawn)"),
        **{
            f"{who}_{what}_{n}": Row(
                f"web_{'agent' if who == 'agent' else 'server'}_{what}_{n}",
                f"{'agent' if who == 'agent' else 'page server'} {'CPU' if what == 'cpu' else 'resident memory'}, "
                f"{n} open pages",
                unit="%" if what == "cpu" else "MB",
            )
            for who in ("agent", "web")
            for what in ("cpu", "rss")
            for n in (0, OPEN)
        },
        "pages": Row("web_pages_per_page_s", f"pages sent to each of {OPEN} open pages, per second", unit="/s"),
        "bytes": Row("web_bytes_per_page_s", f"bytes sent to each of {OPEN} open pages, per second", unit="B/s"),
    }
    with tempfile.TemporaryDirectory(prefix="tpb-web-") as tmp:
        Path(tmp).chmod(0o755)  # the page's uid reaches the agent's socket through it
        agent, web, port = _start(Path(tmp))
        moving = _Moving(Path(tmp) / "node.json")
        try:
            rows["render"].samples += _renders(port, rounds)
            for _ in range(windows):
                for n in (0, OPEN):
                    streams = _Streams(port, n) if n else None
                    try:
                        said = _window(agent, web, seconds, streams)
                    finally:
                        if streams:
                            streams.close()
                    for who in ("agent", "web"):
                        rows[f"{who}_cpu_{n}"].samples.append(said[f"{who}_cpu"])
                        rows[f"{who}_rss_{n}"].samples.append(said[f"{who}_rss"])
                    if n:
                        rows["pages"].samples.append(said["pages"])
                        rows["bytes"].samples.append(said["bytes"])
        finally:
            moving.close()
            web.close()
            agent.close()
    return Section(
        TITLE,
        rows=list(rows.values()),
        notes=[
            f"{windows} windows of {seconds:g} s with no page open and with {OPEN}, in turn; the node read every "
            "second, its first card's utilisation moving every second (every reading changes the page's words)",
            "the agent serves one stream to the page server however many pages are open: its figures with 100 "
            "open pages beside none are what 100 browsers cost the agent",
        ],
    )
