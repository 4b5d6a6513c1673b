"""One node for a test, served in the test's own process: the builder every service-level test uses.

A ServiceNode lives in a directory of the test's own (``root``): the scene
file of a simulated node (``scene``, root/node.json) with ``cards`` cards,
idle but for those ``scene_cards`` describes (by index, in the simulated
probe's keys), its state dir (``state``), and the node's parts over them:

- ``probe``: ``"scene"`` (the default), the simulated probe over the scene
  file, whose cards show whichever processes a test puts on them (``put``)
  and say whatever else it writes (``edit``); ``"static"``, the prepared
  reading of helpers/fakes.py, which a test changes with ``probe.set_card``
  and whose reads it counts; or a probe of the test's own.
- ``runtime``: ``"process"`` (the default), the real process runtime, with
  real processes recorded in the state dir; ``"memory"``, the in-memory one
  of helpers/fakes.py; or one of the test's own (a DockerRuntime).
- the real flock lock in the state dir, the allocator over these, and the
  node's service over it (``service``), writing the node's log in the state
  dir (``log``), under rules with no operators' group (root alone operates),
  with what the test asks of it: ``limits``, ``file_queue`` (the agent's
  queue, kept in the state dir; else the in-process one, in memory), a
  ``clock``, ``xid_rules``, ``evict_grace_s``, ``idle_after_s``...

With ``assembled=True`` the node is instead put together the way the product
puts it together from settings (``LocalNode.from_settings``: the simulated
probe over the scene, the process runtime, the lock the settings name), as a
dashboard without an agent serves it; ``settings`` are then the product's
own (``triage_evict_grace_s="0.5"``, ``lock_redis_url=...``) and ``local`` is the node a
dashboard is given. The state dir is left for the product to make, as on a
fresh machine; built by hand, the node makes it, as its log is written from
the first action.

``await node.close()`` ends it: the polling stops, the service and the
allocator close, every job left in the state dir is killed and every
process started with ``run_as`` ends. Tests get nodes from conftest's
``make_node`` (or its ``service_node``), which closes each after the test;
a test may close one sooner, as a restart does.
"""

from __future__ import annotations

import asyncio
import copy
import subprocess
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from helpers.allocators import build_allocator
from helpers.fakes import MemoryRuntime, StaticProbe
from helpers.load import end_processes, kill_process_jobs
from helpers.services import write_scene
from tpnode_tui.config.settings import load_settings
from tpnode_tui.core.policy import CardLimits, Policy
from tpnode_tui.host.identity import Caller, Operators
from tpnode_tui.model.jobs import JobSpec
from tpnode_tui.node.local import LocalNode
from tpnode_tui.port.types.events import EventsRequest
from tpnode_tui.port.types.jobs import LaunchRequest
from tpnode_tui.probes import SimulatedProbe
from tpnode_tui.runtimes.process import ProcessRuntime
from tpnode_tui.service import NodeService
from tpnode_tui.state.nodelog import DEFAULT_MAX_BYTES, NodeLog
from tpnode_tui.state.queue import FileQueue

#: what the scene says of a card nothing is on (the simulated probe's own defaults, written out)
IDLE_CARD = {"name": "NVIDIA H200", "memory_total_mib": 143771}


class ServiceNode:
    def __init__(
        self,
        root: Path,
        cards: int = 4,
        *,
        scene_cards: Optional[Mapping[int, dict[str, Any]]] = None,
        probe: Union[str, Any] = "scene",
        runtime: Union[str, Any] = "process",
        assembled: bool = False,
        settings: Optional[dict[str, Any]] = None,
        interval: float = 0.05,
        limits: Optional[CardLimits] = None,
        file_queue: bool = False,
        log_max_bytes: int = DEFAULT_MAX_BYTES,
        **service_options: Any,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.scene = root / "node.json"
        self.state = root / "state"
        #: each card as the scene file says it, in the simulated probe's words
        self.cards: list[dict[str, Any]] = [
            copy.deepcopy(scene_cards[i]) if scene_cards and i in scene_cards else dict(IDLE_CARD) for i in range(cards)
        ]
        #: the processes the test ran on the node (run_as), ended with it
        self.procs: list[subprocess.Popen] = []
        self.runner: Optional[asyncio.Task] = None
        self.local: Optional[LocalNode] = None
        self.closed = False
        if assembled or probe == "scene":
            self.write()
        if assembled:
            assert probe == "scene" and runtime == "process", "the product assembles the scene's probe and processes"
            assert not service_options, f"assembled from settings: say {sorted(service_options)} as settings"
            self.settings = load_settings(
                {},
                probe_kind=f"simulated:{self.scene}",
                runtime_kind="process",
                state_dir=str(self.state),
                lock_retry_ms="10",
                **(settings or {}),
            )
            self.local = LocalNode.from_settings(self.settings, interval=interval)
            self.service = self.local.service
            self.allocator = self.service.allocator
            self.probe, self.runtime = self.allocator.probe, self.allocator.runtime
            self.log = NodeLog(self.state)
            return
        self.state.mkdir(exist_ok=True)
        self.settings = load_settings({}, state_dir=str(self.state), lock_retry_ms="10", **(settings or {}))
        self.probe = (
            SimulatedProbe(self.scene) if probe == "scene" else StaticProbe(cards=cards) if probe == "static" else probe
        )
        self.runtime = (
            ProcessRuntime(self.state, stop_timeout_s=2)
            if runtime == "process"
            else MemoryRuntime()
            if runtime == "memory"
            else runtime
        )
        self.allocator = build_allocator(self.settings, self.runtime, self.probe)
        self.log = NodeLog(self.state, max_bytes=log_max_bytes)
        self.service = NodeService(
            self.allocator,
            Policy(Operators("tpn-no-such-group"), limits or CardLimits()),
            queue=FileQueue(self.state) if file_queue else None,
            node_log=self.log,
            interval=interval,
            **service_options,
        )

    # -- what the driver says -------------------------------------------------------------

    def write(self) -> None:
        """The scene file from ``cards``, replaced whole (a reader never sees half of it)."""
        write_scene(self.scene.with_suffix(".tmp"), self.cards).replace(self.scene)

    def put(self, card: int, pid: int, mib: int = 2048) -> None:
        """``pid`` on ``card`` as the driver lists it, using ``mib`` of its memory."""
        on_it = self.cards[card].setdefault("processes", [])
        on_it.append({"pid": pid, "used_memory_mib": mib})
        self.cards[card]["memory_used_mib"] = sum(p["used_memory_mib"] for p in on_it)
        self.write()

    def edit(self, card: int, **says: Any) -> None:
        """What the driver says of ``card`` from now on, in the simulated probe's keys."""
        self.cards[card].update(says)
        self.write()

    # -- what people do -------------------------------------------------------------------

    def launch(self, caller: Caller, run_id: str, cards: int, *, queue: bool = False):
        """A launch through the node's service, as ``caller`` asks for it."""
        return self.service.launch(caller, LaunchRequest(cards=cards, command=("train",), run_id=run_id, queue=queue))

    async def place(self, run_id: str, cards: int, *command: str):
        """A job placed by someone else's command (owner "tester", no uid), straight
        through the allocator, as another account's CLI would meanwhile."""
        return await self.allocator.launch(
            JobSpec(run_id=run_id, cards=cards, command=command or ("sleep", "60"), owner="tester")
        )

    def run_as(self, account, argv: list[str]) -> subprocess.Popen:
        """``argv`` as a real process of ``account`` (helpers/accounts.py), its
        output readable; it ends when the node does."""
        proc = account.spawn(argv, env=account.env(), stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        return proc

    async def ask(self, caller: Caller, op, request):
        """``op`` asked by ``caller`` as the agent's door asks it: its request read
        back from what would be sent (every rule and limit), then done."""
        return await self.service.do(caller, op, self.service.read(caller, op, op.echoed(request)))

    def kinds(self, kind: str) -> list[dict]:
        """The node's log's entries of one kind."""
        return [e for e in self.log.read() if e["kind"] == kind]

    async def events(self, caller: Caller, **asked) -> list[dict]:
        """One page of the node's log as ``caller`` may see it (EventsRequest's fields)."""
        return list((await self.service.events(caller, EventsRequest(**asked))).entries)

    # -- serving --------------------------------------------------------------------------

    def serve(self) -> None:
        """Poll (and watch XIDs) from now until closed, as an agent does."""
        self.runner = asyncio.ensure_future(self.service.run())

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.local is not None:
            await self.local.close()  # its own polling, the service and the allocator
        else:
            if self.runner is not None:
                self.runner.cancel()
                await asyncio.gather(self.runner, return_exceptions=True)
            await self.service.close()
            await self.allocator.close()
        kill_process_jobs(self.state)  # every job the test started: this state dir is the test's own
        end_processes(self.procs)
