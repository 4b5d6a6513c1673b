"""The demo node: a simulated 8-card H200 machine that needs no GPU, Docker or Redis.

It is the real product over a simulated probe: the scene is a JSON file in a
temporary directory (read afresh on every poll, like a driver), jobs are real
local processes in a temporary state dir, and every launch goes through the
real allocator and lock. Only the cards are pretend.

The scene shows every card state at once: an external process that can be
attributed (a real ``sleep`` started by the demo), memory in use by a process
this machine cannot see (as host pids look from inside a container), an
unhealthy card, a platform job, a reservation, and free cards; a key toggles
"probe-blind" to show unverified cards.

A demo cleans up when it ends. One that was killed (``kill -9``) cannot, so
every demo first removes what dead demos left: its temporary directory is
named ``tpnode-demo-*`` and holds an owner file naming the demo's process by
pid *and* start time, so a directory is touched only when that very process
is gone, never a live demo's (whose pid, start and boot still match) and
never one without an owner file (one being made right now, or not a demo's).
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import psutil

from .config import Settings, load_settings
from .model import JobSpec, TpnodeError
from .runtimes.jobprocs import process_stat
from .runtimes.process import boot_id, liveness, pid_namespace
from .runtimes.statefile import StateFile

log = logging.getLogger(__name__)

#: the start of every demo's temporary directory's name
DEMO_PREFIX = "tpnode-demo-"
#: in it: which process made it (pid, start ticks, boot) and its squatter
OWNER_FILE = "owner.json"

CARDS = 8
CARD_NAME = "NVIDIA H200"
CARD_MIB = 143771
#: what a launch from the demo runs by default: harmless, prints, ends by itself
DEMO_COMMAND = (sys.executable, "-m", "tpnode_tui.demo", "train", "--steps", "3600")


def _die_with_parent() -> None:
    """Child set-up: end the demo's squatter when the demo ends, however it ends."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _unseen_pid() -> int:
    """A pid that does not exist here, standing in for a host pid seen from a container."""
    pid = 3_999_999
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


def _idle_card(i: int) -> dict:
    return {
        "name": CARD_NAME,
        "uuid": f"GPU-demo{i:04d}-7a1c-4f0e-9b2d-{i:012d}",
        "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
        "memory_total_mib": CARD_MIB,
        "memory_used_mib": 1,
        "utilization_pct": 0,
        "temperature_c": 31 + i % 3,
        "power_w": 74.5 + i,
        "processes": [],
    }


def scene(squatter_pid: int, unseen_pid: int) -> dict:
    cards = [_idle_card(i) for i in range(CARDS)]
    cards[2].update(memory_used_mib=18950, utilization_pct=97, temperature_c=61, power_w=512.3,
                    processes=[{"pid": squatter_pid, "used_memory_mib": 18432}])
    cards[5].update(memory_used_mib=30922, utilization_pct=64, temperature_c=55, power_w=388.0,
                    processes=[{"pid": unseen_pid, "used_memory_mib": 30720}])
    cards[6]["health"] = {"row_remap_pending": True}
    return {"blind": False, "cards": cards}


@dataclass
class Demo:
    root: Path
    scene_path: Path
    state_dir: Path
    squatter: subprocess.Popen[bytes]

    @property
    def settings_overrides(self) -> dict:
        return {"probe": f"simulated:{self.scene_path}", "runtime": "process",
                "state_dir": str(self.state_dir), "local_gpu_count": 0}

    def settings(self) -> Settings:
        """Demo settings. Everything that decides where the truth lives is the
        demo's own, so a TUNEPLANE_* left in the environment cannot point the
        demo at a real node."""
        return load_settings({}, **self.settings_overrides)

    def _edit(self, change) -> dict:
        data = json.loads(self.scene_path.read_text())
        change(data)
        tmp = self.scene_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.scene_path)  # a poll never reads half a file
        return data

    def toggle_blind(self) -> bool:
        """Flip "use from outside cannot be probed"; returns the new value."""
        return self._edit(lambda d: d.update(blind=not d.get("blind", False)))["blind"]

    def toggle_external(self, index: int) -> bool:
        """Put a squatter on card ``index``, or take it off; True when one is there now."""
        def change(data: dict) -> None:
            card = data["cards"][index]
            if card.get("processes") or card.get("memory_used_mib", 0) >= Settings().mem_busy_mib:
                card.update(processes=[], memory_used_mib=1, utilization_pct=0)
            else:
                card.update(processes=[{"pid": self.squatter.pid, "used_memory_mib": 12288}],
                            memory_used_mib=12806, utilization_pct=88)

        data = self._edit(change)
        return bool(data["cards"][index]["processes"])

    def opening_jobs(self) -> list[JobSpec]:
        """What the demo starts through the allocator, so jobs and reservations show."""
        import time

        return [
            JobSpec(run_id="demo-train-llama", cards=2, command=DEMO_COMMAND, owner="demo"),
            JobSpec(run_id="rsv-alice", cards=1, kind="reservation", owner="alice",
                    expires_at=time.time() + 2 * 3600),
        ]

    def close(self) -> None:
        if self.squatter.poll() is None:
            self.squatter.terminate()
            try:
                self.squatter.wait(5)
            except subprocess.TimeoutExpired:
                self.squatter.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def _process(pid: int) -> Optional[dict[str, Any]]:
    """``pid`` as an owner file records it: the number and when that process started."""
    started = process_stat(pid)
    return None if started is None else {"pid": pid, "start_ticks": started.ticks}


def _still_running(recorded: Any, boot: str) -> bool:
    """Whether the process an owner file recorded is the one running now.

    Anything that cannot be checked counts as running: a demo's directory is
    only ever removed when its owner is known to be gone.
    """
    if not isinstance(recorded, dict) or not isinstance(recorded.get("pid"), int):
        return True
    try:
        now = process_stat(recorded["pid"])
    except (PermissionError, OSError, ValueError, IndexError):
        return True
    return now is not None and now.ticks == recorded.get("start_ticks") and now.state not in ("Z", "X")


def _owner_file(root: Path, squatter: subprocess.Popen[bytes]) -> None:
    data = {"boot_id": boot_id(), "pid_ns": pid_namespace(), "demo": _process(os.getpid()),
            "squatter": _process(squatter.pid)}
    tmp = root / f".{OWNER_FILE}.tmp"
    tmp.write_text(json.dumps(data))
    tmp.replace(root / OWNER_FILE)


def clean_up_after_dead_demos(temp_dir: Optional[Path] = None) -> list[Path]:
    """Remove what killed demos of this user left in ``temp_dir``; returns the
    directories removed. Their jobs are ended (their process groups killed:
    demo workloads, nothing to save) and their squatters too."""
    temp_dir = Path(temp_dir or tempfile.gettempdir())
    try:
        boot = boot_id()
    except TpnodeError:
        return []  # no /proc to tell a dead owner from a live one: touch nothing
    removed = []
    for root in sorted(temp_dir.glob(f"{DEMO_PREFIX}*")):
        try:
            if root.is_symlink() or not root.is_dir() or root.stat().st_uid != os.getuid():
                continue
            owner = json.loads((root / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # a demo starting right now, or not a demo's directory
        if not isinstance(owner, dict) or owner.get("pid_ns") != pid_namespace():
            continue  # made in another PID namespace (a container sharing /tmp): its pids mean nothing here
        same_boot = owner.get("boot_id") == boot
        if same_boot and _still_running(owner.get("demo"), boot):
            continue
        if same_boot:
            _end_jobs(root / "state", boot)
            squatter = owner.get("squatter")
            if isinstance(squatter, dict) and isinstance(squatter.get("pid"), int) and _still_running(squatter, boot):
                with contextlib.suppress(OSError):
                    os.kill(squatter["pid"], signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
        log.info("removed %s, left by a demo that was killed", root)
        removed.append(root)
    return removed


def _end_jobs(state_dir: Path, boot: str) -> None:
    try:
        records = StateFile(state_dir).read()
    except TpnodeError:
        return
    for record in records.values():
        status, problems = liveness(record, boot)
        if status != "exited" and not problems:
            with contextlib.suppress(OSError):
                os.killpg(record.pid, signal.SIGKILL)  # the supervisor leads its job's group


def start_demo(root: Optional[Path] = None) -> Demo:
    clean_up_after_dead_demos()
    root = Path(root or tempfile.mkdtemp(prefix=DEMO_PREFIX))
    state_dir = root / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    squatter = subprocess.Popen(
        ["sleep", "86400"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent,
    )
    _owner_file(root, squatter)
    scene_path = root / "node.json"
    scene_path.write_text(json.dumps(scene(squatter.pid, _unseen_pid()), indent=1))
    return Demo(root=root, scene_path=scene_path, state_dir=state_dir, squatter=squatter)


def train(steps: int) -> None:
    """The demo's stand-in workload: a step a second, printed, then done."""
    import time

    for step in range(steps):
        print(f"step {step + 1}/{steps}", flush=True)
        time.sleep(1)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tpnode_tui.demo")
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("train", help="the demo workload").add_argument("--steps", type=int, default=3600)
    train(parser.parse_args().steps)
