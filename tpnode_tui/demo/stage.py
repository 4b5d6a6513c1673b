"""The demo node: a simulated 8-card H200 machine that needs no GPU, Docker or Redis.

It is the real product over a simulated probe: the scene is a JSON file read
afresh on every poll, jobs are real local processes in a temporary state dir,
and every launch goes through the real allocator and lock. Only the cards are
pretend; the scene shows every card state at once. A killed demo's directory
is cleaned up by the next demo, only once the process its owner file names
(pid and start time) is gone. See docs/architecture.md, section 'The
dashboard'.
"""

from __future__ import annotations

import contextlib
import ctypes
import grp
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import psutil

from tpnode_tui.config.settings import Settings, load_settings
from tpnode_tui.model.errors import TpnodeError
from tpnode_tui.model.jobs import JobSpec
from tpnode_tui.model.views import Drain
from tpnode_tui.runtimes.jobprocs import process_stat
from tpnode_tui.runtimes.liveness import boot_id, liveness, pid_namespace
from tpnode_tui.runtimes.statefile import StateFile
from tpnode_tui.runtimes.stopping import end_abandoned

log = logging.getLogger(__name__)

#: the start of every demo's temporary directory's name
DEMO_PREFIX = "tpnode-demo-"
#: in it: which process made it (pid, start ticks, boot) and its squatter
OWNER_FILE = "owner.json"
#: how long a killed demo's job may take to end once SIGKILLed (a demo's workload holds nothing to save)
_END_JOB_S = 5.0

CARDS = 8
CARD_NAME = "NVIDIA H200"
CARD_MIB = 143771
#: the cards of the opening scene: in MIG mode, drained by an operator, used by
#: a process this machine cannot see, unhealthy, drained by an XID (the job
#: takes 0, the reservation 2, and 3 is free)
MIG_CARD, DRAINED_CARD, UNSEEN_CARD, UNHEALTHY_CARD, XID_CARD = 1, 4, 5, 6, 7
#: the MIG card's slices as an H200 is split (tests/captures/h200-mig): (profile,
#: GPU instance, compute instance, MiB total); the first two share one GPU instance
MIG_LAYOUT = (
    ("1c.3g.71gb", 2, 0, 71424),
    ("2c.3g.71gb", 2, 1, 71424),
    ("2g.35gb", 3, 0, 33280),
    ("1g.18gb", 9, 0, 16384),
    ("1g.18gb", 10, 0, 16384),
)
#: what an idle MIG device reads used, and what MIG itself sets aside on its card
SLICE_IDLE_MIB, MIG_OVERHEAD_MIB = 13, 1024
#: what the process this machine cannot see holds on the MIG card's first slice
UNSEEN_SLICE_MIB = 20480
#: what the opening XID drains its card with (GPU fallen off the bus)
OPENING_XID = 79
#: what the demo's key raises (double-bit ECC error: drained until a reset)
KEY_XID = 48
#: memory the demo's outside process holds on a card
SQUATTER_MIB = 12288
#: memory a card uses besides its processes' (the driver's own)
OVERHEAD_MIB = 512
#: what a launch from the demo runs by default: harmless, prints, ends by itself
DEMO_COMMAND = (sys.executable, "-m", "tpnode_tui.demo", "train", "--steps", "3600")


def _die_with_parent() -> None:
    """Child set-up: end the demo's squatter when the demo ends, however it ends."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _unseen_pid(below: int = 4_000_000) -> int:
    """A pid that does not exist here, standing in for a host pid seen from a container."""
    pid = below - 1
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


def _mig_card(i: int, unseen_pid: int) -> dict:
    """Card ``i`` split as an H200 is, with a process this machine cannot see on its first slice."""
    card = _idle_card(i)
    slices = [
        {
            "profile": profile,
            "uuid": f"MIG-demo{i:04d}-{n:04d}-5e8f-9a0b-{gi:06d}{ci:06d}",
            "gpu_instance_id": gi,
            "compute_instance_id": ci,
            "memory_total_mib": total,
            "memory_used_mib": SLICE_IDLE_MIB,
            "processes": [],
        }
        for n, (profile, gi, ci, total) in enumerate(MIG_LAYOUT)
    ]
    # The two compute instances of one GPU instance read its memory alike.
    for shared in slices[:2]:
        shared["memory_used_mib"] = UNSEEN_SLICE_MIB + SLICE_IDLE_MIB
    slices[0]["processes"] = [{"pid": unseen_pid, "used_memory_mib": UNSEEN_SLICE_MIB}]
    card.update(mig=True, slices=slices, processes=[], utilization_pct=None, temperature_c=44, power_w=161.5)
    _set_mig_memory(card)
    return card


def _set_mig_memory(card: dict) -> None:
    """A MIG card's whole memory used: each GPU instance's once, and what MIG sets aside."""
    by_gi = {s.get("gpu_instance_id"): s.get("memory_used_mib") or 0 for s in card.get("slices") or []}
    card["memory_used_mib"] = sum(by_gi.values()) + MIG_OVERHEAD_MIB


def scene(unseen_pid: int, unseen_slice_pid: Optional[int] = None) -> dict:
    """The node as the demo opens it; the job's, the reservation's and the
    outside process's cards are filled in once they are placed."""
    cards = [_idle_card(i) for i in range(CARDS)]
    cards[MIG_CARD] = _mig_card(MIG_CARD, unseen_slice_pid if unseen_slice_pid is not None else unseen_pid - 1)
    cards[UNSEEN_CARD].update(
        memory_used_mib=30922,
        utilization_pct=64,
        temperature_c=55,
        power_w=388.0,
        processes=[{"pid": unseen_pid, "used_memory_mib": 30720}],
    )
    cards[UNHEALTHY_CARD]["health"] = {"row_remap_pending": True}
    cards[XID_CARD]["xid_events"] = [{"id": "opening", "xid": OPENING_XID}]
    # an HGX H200: every card NVLinked through NVSwitch, so the demo can say how its cards are linked
    return {"blind": False, "cards": cards, "topology": "nvswitch"}


def training_load(t: float, card: int) -> float:
    """A training job's utilisation at ``t``: busy, with an evaluation dip every two minutes."""
    if (t + 17 * card) % 120 < 14:
        return 12 + 6 * math.sin(t / 3)
    return 91 + 5 * math.sin(t / 7 + card) + 2 * math.sin(t / 1.7)


def bursty_load(t: float, card: int) -> float:
    """A notebook's or an unknown process's: comes and goes."""
    return 45 + 38 * math.sin(t / 23 + 1.7 * card) + 12 * math.sin(t / 5 + card)


def _set_load(card: dict, util: float, index: int) -> None:
    util = max(0.0, min(100.0, util))
    card.update(
        utilization_pct=int(util),
        temperature_c=int(31 + index % 3 + util * 0.36),
        power_w=round(74.5 + index + util * 5.6, 1),
    )


def _own_group() -> str:
    """The name of this process's group: the demo's operators, so whoever runs it operates it."""
    try:
        return grp.getgrgid(os.getgid()).gr_name
    except KeyError:
        return Settings().policy.operators_group  # no name to give: root only, as on a node


def _start_squatter() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["sleep", "86400"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_die_with_parent,
    )


@dataclass
class Demo:
    root: Path
    scene_path: Path
    state_dir: Path
    squatter: subprocess.Popen[bytes]
    #: cards a live job works on, by the pid shown there, as the last move left them
    working: dict[int, int] = field(default_factory=dict)
    #: MIG slices a live job works on, (card, MIG uuid) -> the pid shown there, likewise
    on_slices: dict[tuple[int, str], int] = field(default_factory=dict)
    #: XIDs raised from the dashboard, to give each its own id
    raised: int = 0
    #: outside processes that ended (evicted): the driver no longer lists them
    ended: set[int] = field(default_factory=set)

    @property
    def settings_overrides(self) -> dict:
        return {
            "probe_kind": f"simulated:{self.scene_path}",
            "runtime_kind": "process",
            "state_dir": str(self.state_dir),
            "cards_count": 0,
            # idle after a minute, so that the demo shows it soon
            "triage_idle_reservation_min": 1,
            "policy_operators_group": _own_group(),
        }

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

    def _squatter_pid(self) -> int:
        """The outside process, started again if it was evicted (its owner file follows)."""
        if self.squatter.poll() is not None:
            self.ended.add(self.squatter.pid)
            self.squatter = _start_squatter()
            _owner_file(self.root, self.squatter)
        return self.squatter.pid

    def toggle_external(self, index: int) -> bool:
        """Put the outside process on card ``index`` (beside whatever runs there:
        on a held card it is an intruder), or take it off; True when it is there now."""
        pid = self._squatter_pid()

        def change(data: dict) -> None:
            card = data["cards"][index]
            processes = [p for p in card.get("processes") or [] if p.get("pid") != pid]
            if len(processes) == len(card.get("processes") or []):
                processes.append({"pid": pid, "used_memory_mib": SQUATTER_MIB})
            _set_processes(card, processes)

        data = self._edit(change)
        return any(p.get("pid") == pid for p in data["cards"][index]["processes"])

    def intrude(self, index: int) -> None:
        """The outside process also uses card ``index`` (the reservation's, at the start)."""
        if not self.toggle_external(index):
            self.toggle_external(index)

    def raise_xid(self, index: int, xid: int = KEY_XID) -> None:
        """Card ``index`` reports ``xid``, as the driver would (each event has an id of its own)."""
        self.raised += 1
        event = {"id": f"key-{self.raised}", "xid": xid}
        self._edit(lambda d: d["cards"][index].setdefault("xid_events", []).append(event))

    def opening_drain(self, now: float) -> Drain:
        """A card an operator took out of service two hours before the demo began."""
        return Drain(card=DRAINED_CARD, reason="fan failing (RMA 4411)", by="ops", at=now - 2 * 3600, source="operator")

    def move(self, now: float, working: Mapping[int, int], on_slices: Mapping[tuple[int, str], int] = {}) -> None:
        """The node at ``now``: each card a live job holds shows its process
        (``working``: card -> pid) and a training load; cards with other
        processes a bursty one; a card the job left is idle again. Each MIG
        slice a live job holds (``on_slices``: (card, MIG uuid) -> pid) shows its
        process and the memory it uses. The outside process is taken off the
        cards once it has ended (an operator evicted it)."""
        if self.squatter.poll() is not None:
            self.ended.add(self.squatter.pid)

        def change(data: dict) -> None:
            for index, card in enumerate(data["cards"]):
                if card.get("mig"):
                    self._move_slices(now, index, card, on_slices)
                    continue
                old = self.working.get(index)
                processes = [
                    p for p in card.get("processes") or [] if p.get("pid") != old and p.get("pid") not in self.ended
                ]
                pid = working.get(index)
                if pid is not None:
                    memory = int(62000 + 1500 * math.sin(now / 40 + index))
                    processes.insert(0, {"pid": pid, "used_memory_mib": memory})
                if processes != (card.get("processes") or []):
                    _set_processes(card, processes)
                if pid is not None:
                    _set_load(card, training_load(now, index), index)
                elif processes:
                    _set_load(card, bursty_load(now, index), index)
                elif index in self.working or card.get("utilization_pct"):
                    _set_load(card, 0, index)

        self._edit(change)
        self.working = dict(working)
        self.on_slices = dict(on_slices)

    def _move_slices(self, now: float, index: int, card: dict, on_slices: Mapping[tuple[int, str], int]) -> None:
        """A MIG card: its utilisation is not reported; each slice shows the job's process on it."""
        outside = [p for p in card.get("processes") or [] if p.get("pid") not in self.ended]
        if outside != (card.get("processes") or []):
            card["processes"] = outside
        for s in card.get("slices") or []:
            key = (index, s.get("uuid"))
            old = self.on_slices.get(key)
            processes = [p for p in s.get("processes") or [] if p.get("pid") != old and p.get("pid") not in self.ended]
            pid = on_slices.get(key)
            if pid is not None:
                processes.insert(0, {"pid": pid, "used_memory_mib": int(9000 + 600 * math.sin(now / 30 + index))})
            if processes != (s.get("processes") or []) or pid is not None:
                s["processes"] = processes
                s["memory_used_mib"] = sum(p.get("used_memory_mib") or 0 for p in processes) + SLICE_IDLE_MIB
        _set_mig_memory(card)

    def opening_jobs(self) -> list[JobSpec]:
        """What the demo starts through the allocator, so jobs, a job on a MIG slice
        and a reservation show."""
        return [
            JobSpec(run_id="demo-train-llama", cards=1, command=DEMO_COMMAND, owner="demo"),
            JobSpec(run_id="demo-notebook", cards=1, command=DEMO_COMMAND, owner="bob", slice="1g.18gb"),
            JobSpec(run_id="rsv-alice", cards=1, kind="reservation", owner="alice", expires_at=time.time() + 2 * 3600),
        ]

    def close(self) -> None:
        if self.squatter.poll() is None:
            self.squatter.terminate()
            try:
                self.squatter.wait(5)
            except subprocess.TimeoutExpired:
                self.squatter.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def _set_processes(card: dict, processes: list) -> None:
    memory = sum(p.get("used_memory_mib") or 0 for p in processes)
    card.update(processes=processes, memory_used_mib=memory + OVERHEAD_MIB if processes else 1)


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
    data = {
        "boot_id": boot_id(),
        "pid_ns": pid_namespace(),
        "demo": _process(os.getpid()),
        "squatter": _process(squatter.pid),
    }
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
            end_abandoned(record, _END_JOB_S)


def start_demo(root: Optional[Path] = None) -> Demo:
    clean_up_after_dead_demos()
    root = Path(root or tempfile.mkdtemp(prefix=DEMO_PREFIX))
    state_dir = root / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    squatter = _start_squatter()
    _owner_file(root, squatter)
    scene_path = root / "node.json"
    unseen = _unseen_pid()
    scene_path.write_text(json.dumps(scene(unseen, _unseen_pid(below=unseen)), indent=1))
    return Demo(root=root, scene_path=scene_path, state_dir=state_dir, squatter=squatter)
