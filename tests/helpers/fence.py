"""The driver's files and device nodes of the fence's tests: stand-ins a test makes, and a probe that opens them.

The cards' device minors are not all their indices (cards 2 and 3 have each
other's), and card 1 is split into two MIG slices. The driver's /proc files
are the test's own (settings point the node at them): nvidia-uvm is major
510, nvidia-caps 511, and mig-minors lists what a driver lists for 8 cards.
Character device nodes are made with mknod in a directory every account can
read; the device cgroup checks major:minor, never the path. No driver is bound
to them, so an open the fence allows fails with ENXIO, one it denies with
EPERM, and a node that is not NVIDIA's opens.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from helpers.accounts import Account, runnable, shared_dir
from helpers.load import BOUND_S
from helpers.services import unavailable, write_scene
from helpers.waiting import until
from tpnode_tui.devices.fence import ProcFiles

UVM, CAPS = 510, 511
#: each card's device minor, by index: cards 2 and 3 have each other's, as on a
#: machine whose driver found them in another order than PCI's
MINOR = {0: 0, 1: 1, 2: 3, 3: 2, 4: 4, 5: 5, 6: 6, 7: 7}
#: card 1's MIG slices: (profile, GPU instance, compute instance)
SLICES = (("1g.18gb", 9, 0), ("2g.35gb", 3, 0))
COMMON = {"ctl", "modeset", "uvm", "uvm-tools"}
CARD_NODES = {f"nvidia{m}" for m in range(8)}
CAP_NODES = {"config", "monitor", "gpu1/gi9", "gpu1/gi9/ci0", "gpu1/gi3", "gpu1/gi3/ci0"}

#: the job's command: open each node (as the account the job runs as) and write
#: what each open said; "escape" does it from a grandchild in a session of its
#: own (setsid, then a second fork), "stay" keeps the job running afterwards
PROBE = r"""
import errno, json, os, sys, time
out, mode, paths = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

def probe():
    seen = {}
    for label, path in paths.items():
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
            seen[label] = "ok"
        except OSError as e:
            seen[label] = errno.errorcode.get(e.errno, str(e.errno))
    return seen

def write(seen):
    with open(out + ".tmp", "w") as f:
        json.dump(seen, f)
    os.rename(out + ".tmp", out)

if mode.startswith("escape"):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(0.3)  # its parent has gone: it is nobody's child in the job's session
            with open("/proc/self/cgroup") as f:
                cgroups = f.read().splitlines()
            write(dict(probe(), pid=os.getpid(), sid=os.getsid(0), cgroups=cgroups))
            if mode == "escape-linger":
                time.sleep(300)
            os._exit(0)
        os._exit(0)
    os.wait()
    deadline = time.monotonic() + 20
    while not os.path.exists(out) and time.monotonic() < deadline:
        time.sleep(0.05)
else:
    write(probe())
    if mode == "stay":
        time.sleep(300)
"""


def mig_minors(cards: int = 8) -> tuple[str, dict[str, int]]:
    """mig-minors as a driver writes it for ``cards`` cards: config, monitor, then each
    GPU instance and compute instance of each card, numbered in order."""
    lines, minors = ["config 1", "monitor 2"], {"config": 1, "monitor": 2}
    minor = 3
    for gpu in range(cards):
        for gi in range(15):
            for name in [f"gpu{gpu}/gi{gi}/access"] + [f"gpu{gpu}/gi{gi}/ci{ci}/access" for ci in range(8)]:
                lines.append(f"{name} {minor}")
                minors[name] = minor
                minor += 1
    return "\n".join(lines) + "\n", minors


class Driver:
    """The driver's /proc files and its device nodes, in a directory every account can read."""

    def __init__(self) -> None:
        if os.geteuid() != 0:
            unavailable("making device nodes and cgroups takes root")
        self.root = shared_dir("tpn-fence-")
        text, minors = mig_minors()
        (self.root / "mig-minors").write_text(text)
        (self.root / "devices").write_text(
            f"Character devices:\n  1 mem\n195 nvidia-frontend\n{UVM} nvidia-uvm\n{CAPS} nvidia-caps\n\n"
            "Block devices:\n  7 loop\n"
        )
        nodes = {f"nvidia{m}": (195, m) for m in range(8)}
        nodes |= {"modeset": (195, 254), "ctl": (195, 255), "uvm": (UVM, 0), "uvm-tools": (UVM, 1)}
        nodes |= {"config": (CAPS, 1), "monitor": (CAPS, 2), "null-copy": (1, 3)}
        for name in CAP_NODES - {"config", "monitor"}:
            nodes[name] = (CAPS, minors[f"{name}/access"])
        self.paths: dict[str, str] = {}
        for label, (major, minor) in nodes.items():
            path = self.root / label.replace("/", "-")
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            path.chmod(0o666)
            self.paths[label] = str(path)
        self.script = self.root / "probe.py"
        self.script.write_text(PROBE)
        self.script.chmod(0o644)

    @property
    def settings(self) -> dict[str, str]:
        return {
            "TUNEPLANE_PROC_DEVICES": str(self.root / "devices"),
            "TUNEPLANE_MIG_MINORS": str(self.root / "mig-minors"),
        }

    @property
    def files(self) -> ProcFiles:
        return ProcFiles(devices=self.root / "devices", mig_minors=self.root / "mig-minors")

    def command(self, out: Path, mode: str) -> list[str]:
        return [runnable().python, str(self.script), str(out), mode, json.dumps(self.paths)]


def scene_cards() -> list[dict]:
    """Cards 2 and 3 free (with each other's minors), card 1 split in two MIG slices,
    every other card in use from outside: a job gets card 2 or 3."""
    cards: list[dict] = []
    for i in range(8):
        card: dict = {"name": "NVIDIA H200", "memory_total_mib": 143771, "minor": MINOR[i]}
        if i not in (1, 2, 3):
            card |= {"memory_used_mib": 30000, "processes": [{"pid": 3999990 + i, "used_memory_mib": 30000}]}
        cards.append(card)
    cards[1] |= {
        "mig": True,
        "slices": [
            {
                "profile": profile,
                "uuid": f"MIG-0000000{n}-7c3d-5e8f-9a0b-1c2d3e4f5a6b",
                "gpu_instance_id": gi,
                "compute_instance_id": ci,
                "memory_total_mib": 16384,
            }
            for n, (profile, gi, ci) in enumerate(SLICES)
        ],
    }
    return cards


def own_node(account: Account, driver: Driver, name: str, **settings: str) -> tuple[Path, dict[str, str]]:
    """A simulated node an ordinary account serves itself (no agent), in its home:
    where it can make no cgroup, so nothing it starts can be fenced."""
    root = account.home / name
    account.run(["mkdir", "-p", str(root / "state")], env=account.env())
    scene = write_scene(root / "scene.json", scene_cards())
    os.chown(scene, account.uid, account.gid)
    env = account.env(
        TUNEPLANE_AGENT="off",
        TUNEPLANE_STATE_DIR=str(root / "state"),
        TUNEPLANE_RUNTIME="process",
        TUNEPLANE_PROBE=f"simulated:{scene}",
        **driver.settings,
        **settings,
    )
    return root, env


def said(out: Path, log: Path) -> dict:
    """What the job's probe wrote, once it has."""
    until(out.exists, f"the job's probe to write {out} (its log: {log})", BOUND_S)
    return json.loads(out.read_text())


def job(status: dict, run_id: str) -> dict:
    return next(j for j in status["jobs"] if j["run_id"] == run_id)


def opened(seen: dict, labels: set[str]) -> dict[str, str]:
    return {label: seen[label] for label in sorted(labels)}
