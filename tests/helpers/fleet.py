"""Nodes for the fleet's tests: snapshots made by the real occupancy rules,
publications made by the real publication builder, and an agent as its own process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional

from helpers.paths import CHECKOUT
from helpers.services import write_scene
from helpers.waiting import until
from tpnode_tui.core.cards import compute_occupancy
from tpnode_tui.core.display import card_views
from tpnode_tui.fleet import record
from tpnode_tui.model.facts import CardFacts, ProbeReading, ProcessFacts
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.snapshot import NodeSnapshot
from tpnode_tui.port.types.readings import Reading

T = 1_764_504_000.0  # 2025-11-30 12:00:00 UTC


def node_snapshot(
    cards: int = 8,
    *,
    host: str = "gpu-01",
    jobs: tuple[JobState, ...] = (),
    external: tuple[int, ...] = (),
    unhealthy: tuple[int, ...] = (),
    drained: tuple[int, ...] = (),
    blind: bool = False,
    taken_at: float = T,
    name: str = "NVIDIA H200",
) -> NodeSnapshot:
    facts = tuple(
        CardFacts(
            index=i,
            uuid=f"GPU-{i:08d}-0000-4000-8000-000000000000",
            name=name,
            pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
            memory_total_mib=143771,
            memory_used_mib=30000 if i in external else 0,
            utilization_pct=7 * i % 100,
            temperature_c=31 + i,
            power_w=74.5 + i,
            processes=(ProcessFacts(4242, 30000),) if i in external else (),
            health=("pending retired pages",) if i in unhealthy else (),
        )
        for i in range(cards)
    )
    reading = ProbeReading(
        "simulated", facts, count=cards, external_probe_ok=not blind, problem="blind" if blind else None
    )
    occ = compute_occupancy(cards, jobs, reading, mem_busy_mib=512)
    views = tuple(replace(v, state="drained") if v.index in drained else v for v in card_views(occ, reading, jobs))
    return NodeSnapshot(
        taken_at=taken_at,
        host=host,
        occupancy=occ,
        cards=views,
        jobs=jobs,
        probe=reading,
        series=name,  # as an agent reports a node nobody mapped: the cards' name
        runtime="processes",
        lock="flock",
        explain=occ.explain(),
    )


def job(run_id: str, gpus: tuple[int, ...], kind: str = "job", owner: str = "alice") -> JobState:
    return JobState(
        name=run_id,
        run_id=run_id,
        gpus=gpus,
        status="running",
        kind=kind,
        owner=owner,
        command=("python", "train.py"),
        started_at=T - 3600,
        expires_at=T + 3600 if kind == "reservation" else None,
    )


def publication_parts(
    node: str,
    instance: str,
    snap: Optional[NodeSnapshot],
    *,
    published_at: float = T,
    period_s: float = 10.0,
    error: Optional[str] = None,
    seq: int = 1,
    intruders: Optional[dict[int, list[int]]] = None,
) -> tuple[dict, Optional[dict]]:
    """A publication as the agent makes it, as (envelope, snapshot document) to change before storing."""
    encoded = record.publication(
        node=node,
        instance=instance,
        version="0.1.0",
        period_s=period_s,
        seq=seq,
        published_at=published_at,
        reading=Reading(seq=seq, snapshot=snap, error=error),
    )
    snapshot = json.loads(encoded.snapshot)
    for index, pids in (intruders or {}).items():
        snapshot["cards"][index]["intruders"] = pids
    return encoded.envelope, snapshot


def stored(envelope: dict, snapshot) -> bytes:
    return json.dumps(envelope).encode() + b"\n" + json.dumps(snapshot).encode()


def publication_bytes(node: str, instance: str, snap: Optional[NodeSnapshot], **kw) -> bytes:
    return stored(*publication_parts(node, instance, snap, **kw))


def registration_bytes(
    node: str,
    *,
    started_at: float = T - 60,
    period_s: float = 10.0,
    host: str = "host",
    pid: int = 1,
    total: Optional[int] = 8,
    stopped_at: Optional[float] = None,
    seen_at: Optional[float] = None,
    ssh: str = "",
) -> bytes:
    return json.dumps(
        record.registration(
            node=node,
            version="0.1.0",
            period_s=period_s,
            host=host,
            pid=pid,
            started_at=started_at,
            series="NVIDIA H200",
            seen_at=started_at if seen_at is None else seen_at,
            total=total,
            stopped_at=stopped_at,
            ssh=ssh,
        )
    ).encode()


class AgentProcess:
    """``python -m tpnode_tui agent`` on a simulated node of its own, publishing to the fleet."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        fleet_url: str,
        *,
        cards: int = 8,
        period_s: float = 0.5,
        interval: float = 0.2,
        metrics: Optional[str] = None,
    ) -> None:
        self.name = name
        self.dir = tmp / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.scene = write_scene(self.dir / "node.json", cards)
        self.state = self.dir / "state"
        self.socket = self.dir / "agent.sock"
        self.log = self.dir / "agent.log"
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/"),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(CHECKOUT),
            "TUNEPLANE_PROBE": f"simulated:{self.scene}",
            "TUNEPLANE_RUNTIME": "process",
            "TUNEPLANE_STATE_DIR": str(self.state),
            "TUNEPLANE_AGENT_SOCKET": str(self.socket),
            "TUNEPLANE_FLEET_URL": fleet_url,
            "TUNEPLANE_NODE_NAME": name,
            "TUNEPLANE_FLEET_PUBLISH_S": str(period_s),
            "TUNEPLANE_LOCK_RETRY_MS": "10",
        }
        if metrics:
            self.env["TUNEPLANE_METRICS_ADDR"] = metrics
        self.interval = interval
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tpnode_tui", "-v", "--interval", str(self.interval), "agent"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        until(
            lambda: self.socket.exists() or self.proc.poll() is not None,
            f"agent {self.name} to start",
            30,
            error=RuntimeError,
            show=lambda: self.log.read_text()[-3000:],
        )
        if self.proc.poll() is not None:
            raise RuntimeError(f"agent {self.name} did not start:\n{self.log.read_text()[-3000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
        self.proc = None
        if sig == signal.SIGKILL:
            self.socket.unlink(missing_ok=True)
