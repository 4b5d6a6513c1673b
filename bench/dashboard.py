"""Section 4: the dashboard, run for real in a 120x40 tmux pane.

A private tmux server (its own socket, so no session of anyone else's is
touched) runs ``tpnode-tui`` on a simulated node (8 or 64 idle cards, the
process runtime, a temporary state dir) at the default 1 s poll.

- First full frame: from starting the pane to the capture showing the
  header's count of all cards, the footer, and the tiles: the last card's
  with 8 cards; with 64 (more than the pane has room for without scrolling)
  whole rows of tiles from card 0 down to the grid's edge. Captured every 50 ms.
- CPU: the dashboard process's (and any children's) user + system time over
  the window, idle, as a percentage of one core, measured with psutil from
  2 s after the first frame.
- Resident memory at the end of the window.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import psutil

from common import Limit, Row, Section
from helpers.services import write_scene

TITLE = "4. Dashboard, idle, 1 s poll, in a real 120x40 tmux pane"
COLUMNS, LINES = 120, 40
#: the first line of a free card's tile: its index and badge
_TILE = re.compile(r"[│┃] (\d+)\s+FREE ")
SETTLE_S = 2.0
FRAME_TIMEOUT_S = 60.0


class Pane:
    """One tmux pane running the dashboard, on a tmux server of its own."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.socket = f"tpb-{os.getpid()}"
        self._tmux = shutil.which("tmux")
        if self._tmux is None:
            raise FileNotFoundError("tmux is not installed")
        exports = [f"{k}={v}" for k, v in env.items()]
        self._proc: Optional[psutil.Process] = None
        self.started = time.perf_counter()
        self._run(
            "new-session", "-d", "-s", "bench", "-x", str(COLUMNS), "-y", str(LINES), "env", "-i", *exports, *command
        )
        self._socket_path = self._run("display-message", "-p", "#{socket_path}").strip()

    def _run(self, *args: str) -> str:
        done = subprocess.run([self._tmux, "-L", self.socket, *args], capture_output=True, text=True, timeout=20)
        if done.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {done.stderr.strip()}")
        return done.stdout

    def capture(self) -> str:
        return self._run("capture-pane", "-p", "-t", "bench")

    def process(self) -> psutil.Process:
        if self._proc is None:
            pid = int(self._run("list-panes", "-t", "bench", "-F", "#{pane_pid}").strip())
            self._proc = psutil.Process(pid)
        return self._proc

    def close(self) -> None:
        """Quit the dashboard as a user would; then end the tmux server, and the
        dashboard itself should it outlive its terminal."""
        try:
            self.process()
            self._run("send-keys", "-t", "bench", "q")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self._proc.is_running():
                time.sleep(0.1)
        except (RuntimeError, subprocess.SubprocessError, OSError, psutil.Error):
            pass  # the pane is gone already
        subprocess.run([self._tmux, "-L", self.socket, "kill-server"], capture_output=True, timeout=20)
        if self._socket_path:
            Path(self._socket_path).unlink(missing_ok=True)
        if self._proc is not None and self._proc.is_running():
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except psutil.TimeoutExpired:
                self._proc.kill()


def _frame_complete(screen: str, cards: int) -> bool:
    """Whether the pane shows a whole first picture of ``cards`` idle cards.

    The header's count and the tiles are drawn by one redraw, but new tiles
    are mounted asynchronously and may appear a frame later, so the tiles are
    checked too: with 8 cards the last one; with more, whole rows of tiles
    from card 0 down to as many as the pane has room for, and the footer.
    """
    shown = [int(i) for i in _TILE.findall(screen)]
    if f"{cards}/{cards} free" not in screen or "Quit" not in screen or not shown:
        return False
    if cards <= 8:
        return cards - 1 in shown
    return sorted(shown) == list(range(len(shown))) and len(shown) >= 8 and len(shown) % 4 == 0


def _cpu_seconds(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def measure(cards: int, window_s: float, tmp: Path, command: Optional[list[str]] = None) -> tuple[float, float, float]:
    """(seconds to the first full frame, % of one core over the window, resident MB)
    of ``command`` (this checkout's dashboard unless given) on ``cards`` idle cards."""
    scene = write_scene(tmp / f"node{cards}.json", cards)
    state = tmp / f"state{cards}"
    # Only what the dashboard needs: no TUNEPLANE_* setting of this shell leaks in.
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/"),
        "LANG": "C.UTF-8",
        "TERM": "tmux-256color",
        "TUNEPLANE_PROBE": f"simulated:{scene}",
        "TUNEPLANE_RUNTIME": "process",
        "TUNEPLANE_STATE_DIR": str(state),
    }
    pane = Pane(command or [sys.executable, "-m", "tpnode_tui", "--interval", "1"], env)
    try:
        screen = ""
        while not _frame_complete(screen, cards):
            if time.perf_counter() - pane.started > FRAME_TIMEOUT_S:
                raise TimeoutError(f"no full frame of {cards} cards after {FRAME_TIMEOUT_S:g} s:\n{screen}")
            time.sleep(0.05)
            screen = pane.capture()
        first_frame = time.perf_counter() - pane.started
        proc = pane.process()
        time.sleep(SETTLE_S)
        cpu0, t0 = _cpu_seconds(proc), time.perf_counter()
        time.sleep(window_s)
        cpu1, t1 = _cpu_seconds(proc), time.perf_counter()
        rss = proc.memory_info().rss / 1e6
        if not _frame_complete(pane.capture(), cards):
            raise RuntimeError(f"the dashboard with {cards} cards stopped showing them during the window")
        return first_frame, (cpu1 - cpu0) / (t1 - t0) * 100, rss
    finally:
        pane.close()


#: dashboards started per card count; the rows are their medians (one run is
#: at the mercy of whatever else the machine does in its window)
RUNS = 3


def run(quick: bool) -> Section:
    section = Section(TITLE)
    window = 5.0 if quick else 30.0
    results: dict[int, list[tuple[float, float, float]]] = {8: [], 64: []}
    with tempfile.TemporaryDirectory(prefix="tpb-tui-") as tmp:
        for n in range(RUNS):  # the two sizes alternate, so a busy minute hits both
            where = Path(tmp) / f"run{n}"
            where.mkdir()
            for cards in (8, 64):
                results[cards].append(measure(cards, window, where))
    frame8, cpu8, rss8 = (list(x) for x in zip(*results[8]))
    frame64, cpu64, rss64 = (list(x) for x in zip(*results[64]))
    # The headline keys: first frame on the 8-card node, memory on the larger one.
    rows = {
        "cpu8": Row("tui_cpu_pct_8", f"CPU, 8 cards, over {window:g} s", cpu8, unit="%"),
        "cpu64": Row("tui_cpu_pct_64", f"CPU, 64 cards, over {window:g} s", cpu64, unit="%"),
        "frame8": Row("tui_first_frame_s", "start to first full frame, 8 cards", frame8, unit="s"),
        "frame64": Row("tui_first_frame_s_64", "start to first full frame, 64 cards", frame64, unit="s"),
        "rss8": Row("tui_rss_mb_8", "resident memory, 8 cards", rss8, unit="MB"),
        "rss64": Row("tui_rss_mb", "resident memory, 64 cards", rss64, unit="MB"),
    }
    section.rows += rows.values()
    section.limits += [
        Limit("CPU % of one core, 8 cards", rows["cpu8"], 3),
        Limit("CPU % of one core, 64 cards", rows["cpu64"], 10),
        Limit("first full frame, 8 cards (s)", rows["frame8"], 1.5),
        Limit("resident memory, 64 cards (MB)", rows["rss64"], 120),
    ]
    section.notes.append(
        f"medians of {RUNS} dashboards per card count, the sizes alternating; "
        "CPU is the dashboard's own user + system time; MB are 10^6 bytes"
    )
    return section


def available() -> Optional[str]:
    """Why this section cannot run here, or None."""
    return None if shutil.which("tmux") else "tmux is not installed"
