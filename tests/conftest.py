from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers.agents import Agent, SharedNode, running
from helpers.allocators import build_allocator
from helpers.load import end_processes
from helpers.paths import stub_smi_on_path
from helpers.service_node import ServiceNode
from helpers.services import Dockerd, redis_or_unavailable, unavailable, write_scene
from tpnode_tui.config.settings import load_settings
from tpnode_tui.node.remote import AgentNode
from tpnode_tui.probes.nvml import NvmlProbe

#: The tiers, cheapest first: a test module lives in the folder of what its tests need
#: (pyproject.toml's markers say what each tier means), and each test gets that folder's
#: marker here, so ``-m unit`` and ``tests/unit`` are the same tests and a new module needs
#: no mark of its own.
TIERS = ("unit", "service", "tui", "system")
TESTS = Path(__file__).resolve().parent


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", help="run the bigger load and fault tests")


@pytest.hookimpl(tryfirst=True)  # marked before ``-m`` deselects anything
def pytest_collection_modifyitems(items):
    for item in items:
        path = item.path.resolve()
        if not path.is_relative_to(TESTS):
            continue  # not one of these tests
        tier = path.relative_to(TESTS).parts[0]
        if tier not in TIERS:
            # outside every tier, a module would run with the whole suite but with no ``-m`` tier
            raise pytest.UsageError(f"{item.path}: a test module goes in one of tests/{{{','.join(TIERS)}}}/")
        item.add_marker(tier)


@pytest.fixture(scope="session")
def redis_server():
    """A redis-server of the tests' own on a free loopback port."""
    workdir = Path(tempfile.mkdtemp(prefix="tpn-redis-"))
    server = redis_or_unavailable(workdir)
    yield server
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def redis_url(redis_server):
    """The session's server, started again if a test stopped it, and flushed."""
    if redis_server.proc is None:
        redis_server.start()
    import redis as redis_sync

    client = redis_sync.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture(scope="session")
def dockerd_service():
    """A dockerd of the tests' own: private socket, data dir, no bridge, no iptables."""
    root = Path(tempfile.mkdtemp(prefix="tpd-", dir="/tmp"))  # short: unix socket paths are limited
    daemon = Dockerd(root=root)
    try:
        daemon.start()
        daemon.import_busybox()
    except (OSError, TimeoutError, RuntimeError) as e:
        daemon.stop()
        unavailable(f"cannot start dockerd: {e}")
    yield daemon
    daemon.remove_all_containers()
    daemon.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def dockerd(dockerd_service, monkeypatch):
    """The session's dockerd with no containers, and DOCKER_HOST pointing at it."""
    if dockerd_service.proc is None:
        dockerd_service.start()
    dockerd_service.remove_all_containers()
    monkeypatch.setenv("DOCKER_HOST", dockerd_service.host)
    yield dockerd_service
    dockerd_service.remove_all_containers()


@pytest.fixture(scope="session")
def accounts():
    """Two ordinary accounts and an operator, made with useradd for this test
    session and removed after it (tests/helpers/accounts.py)."""
    from helpers.accounts import make_accounts

    made = make_accounts()
    yield made
    made.remove()


@pytest.fixture
def shared_node(accounts, request):
    """A node with its agent running as root, as systemd runs it, in a directory
    every test account can reach: what the accounts share (helpers/agents.py).
    Parametrized indirectly, its parameter is the agent's own settings."""
    with SharedNode.started(accounts, "tpn-shared-", **getattr(request, "param", {})) as node:
        yield node


@pytest.fixture
def scene(tmp_path):
    """Path of a simulated 8-card idle node; rewrite it with write_scene()."""
    return write_scene(tmp_path / "node.json")


@pytest.fixture
def scene_node(tmp_path):
    """A simulated 8-card node for the process runtime, as (scene, state_dir), for
    the CLI and the parts a test makes itself; every job left in its state dir is
    killed afterwards."""
    from helpers.load import kill_process_jobs

    scene = write_scene(tmp_path / "node.json", 8)
    state_dir = tmp_path / "state"
    yield scene, state_dir
    kill_process_jobs(state_dir)


@pytest.fixture
async def make_node(request, tmp_path):
    """Makes nodes served in the test's process, each closed after the test:
    ``make_node(cards=4, dashboard=False, root=tmp_path, **options)``.

    A ServiceNode (helpers/service_node.py: ``probe``, ``runtime``, ``limits``,
    ``scene_cards``, the service's own options...), or with ``dashboard=True`` a
    DashboardNode (helpers/dashboard.py), put together from ``settings`` as the
    product does. Options not given come from the test's ``service_node`` marks,
    its own over its module's (``pytestmark = pytest.mark.service_node(runtime="memory")``),
    so a module says once what its nodes are and a test says only how its own differs.
    """
    marked: dict = {}
    for mark in reversed(list(request.node.iter_markers("service_node"))):
        marked.update(mark.kwargs)
    made: list[ServiceNode] = []

    def make(cards: int | None = None, *, root: Path | None = None, **options) -> ServiceNode:
        options = {**marked, **options} if cards is None else {**marked, **options, "cards": cards}
        if options.pop("dashboard", False):
            from helpers.dashboard import DashboardNode  # Textual, only for the dashboard's tests

            node: ServiceNode = DashboardNode(root or tmp_path, **options)
        else:
            node = ServiceNode(root or tmp_path, **options)
        made.append(node)
        return node

    yield make
    for node in made:
        await node.close()


@pytest.fixture
def service_node(make_node):
    """The test's node: ``make_node()``, as its ``service_node`` marks describe it."""
    return make_node()


@pytest.fixture
async def make_allocator(tmp_path):
    """Makes allocators (helpers/allocators.py), each closed after the test:
    ``make_allocator(runtime, probe, settings=..., series_resolver=..., **overrides)``
    over the in-memory stand-ins unless given, with ``settings``, or else the settings
    of a state dir in tmp_path with ``overrides`` as a flag gives them, each by its
    own name (``cards_count=4``, ``state_dir=...``)."""
    made = []

    def make(runtime=None, probe=None, *, settings=None, series_resolver=None, **overrides):
        if settings is None:
            settings = load_settings({}, **{"state_dir": str(tmp_path / "state"), **overrides})
        else:
            assert not overrides, f"settings given whole: {sorted(overrides)} would be lost"
        allocator = build_allocator(settings, runtime, probe, series_resolver=series_resolver)
        made.append(allocator)
        return allocator

    yield make
    for allocator in made:
        await allocator.close()


@pytest.fixture
async def receiver():
    """A JSON webhook in the test's loop, as Apprise's json:// posts to it (helpers/receivers.py)."""
    from helpers.receivers import Receiver

    made = Receiver()
    await made.start()
    yield made
    await made.close()


@pytest.fixture
def spawned():
    """Processes a test starts (append them), killed after it."""
    procs: list[subprocess.Popen] = []
    yield procs
    end_processes(procs)


@pytest.fixture
def state_dir(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    return d


@pytest.fixture
def smi(monkeypatch):
    """The nvidia-smi stub first on PATH (helpers/paths.py); returns a setter for
    its TPN_SMI_* settings: smi(GPUS="8", MODE="hang")."""
    stub_smi_on_path(monkeypatch)

    def set_env(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(f"TPN_SMI_{name}", value)

    return set_env


@pytest.fixture
async def nvml_probe():
    """Makes NvmlProbe(nvml=fake) over a fake NVML (helpers/nvml.py), each closed
    after the test: nvml_probe(fake, timeout_s=10.0)."""
    probes = []

    def make(fake, timeout_s=10.0):
        probe = NvmlProbe(timeout_s, nvml=fake)
        probes.append(probe)
        return probe

    yield make
    for probe in probes:
        await probe.close()


@pytest.fixture
async def agent(tmp_path):
    """A test agent (helpers/agents.py) serving a simulated node in this event
    loop, stopped and its jobs ended after the test; a module whose agent differs
    defines its own."""
    async with running(Agent(tmp_path)) as a:
        yield a


@pytest.fixture
async def client(agent):
    """The product's agent client on the module's ``agent`` (a test agent in this loop)."""
    node = AgentNode(agent.socket)
    yield node
    await node.close()


@pytest.fixture
def snap_compare(snap_compare):
    """pytest-textual-snapshot's, with every text box's cursor held still for the screenshot.

    Textual blinks a focused Input's cursor on a 0.5 s wall-clock timer, so which phase a
    screenshot catches is a race that a loaded machine loses: the same launch form came out
    with its cursor and without. Here the keys are pressed, then blinking is stopped (which
    leaves the cursor drawn), and only then is the screenshot taken. The app still blinks.
    """
    from textual.widgets import Input

    def compare(app, *, press=(), run_before=None, **kwargs):
        async def drive(pilot) -> None:
            if run_before is not None:
                await run_before(pilot)
            await pilot.pause()
            await pilot.press(*press)
            for screen in pilot.app.screen_stack:
                for box in screen.query(Input):
                    box.cursor_blink = False
            await pilot.pause()

        return snap_compare(app, run_before=drive, **kwargs)

    return compare
