"""Load: many CLI processes at once on one 8-card node never put two jobs on a card.

Every launch is a real ``tpnode-tui`` process with its own allocator, so the
only thing between them is the cross-process lock: flock on the state dir or a
lease on a real redis-server. Jobs are real processes (process runtime) or real
containers on the tests' dockerd (docker runtime, labels only). While they run,
one sampler reads the runtime directly in a tight loop and another runs
``status --json`` in a loop; every sample must show each card held by at most
one live job. ``--long`` runs more processes, in several waves.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from helpers.load import (
    DOCKER_JOB,
    PROCESS_JOB,
    RuntimeSampler,
    StatusSampler,
    check_refusal,
    cli,
    live_jobs,
    node_env,
    record_figures,
    run_all,
    shared_cards,
    status,
)
from helpers.waiting import until

CARDS = 8  # conftest's scene_node
LAUNCHERS = 16  # at least twice the cards, so refusals are certain


class CliNode:
    """The scene node (conftest's: 8 simulated cards, its state dir) as the CLI
    reaches it for one runtime and one lock: the environment of a CLI process on
    it, and the arguments of a launch or a reservation there."""

    def __init__(self, request, scene_node, runtime: str, lock: str) -> None:
        self.runtime, self.lock = runtime, lock
        scene, self.state_dir = scene_node
        redis_url = request.getfixturevalue("redis_url") if lock == "redis" else None
        docker_host = None
        self.image = None
        if runtime == "docker":
            dockerd = request.getfixturevalue("dockerd")
            docker_host, self.image = dockerd.host, dockerd.image
        self.env = node_env(
            scene,
            self.state_dir,
            runtime=runtime,
            redis_url=redis_url,
            docker_host=docker_host,
            **({"TUNEPLANE_HOLD_IMAGE": self.image} if self.image else {}),
        )

    def launch(self, run_id: str, cards: int, *command: str) -> list[str]:
        args = ["launch", "--cards", str(cards), "--run-id", run_id, "--json"]
        if self.image:
            args += ["--image", self.image]
        return args + ["--", *(command or (DOCKER_JOB if self.image else PROCESS_JOB))]

    def reserve(self, run_id: str, cards: int) -> list[str]:
        return ["reserve", "--cards", str(cards), "--for", "1h", "--owner", "load-test", "--run-id", run_id, "--json"]

    def stop_live(self) -> None:
        for job in live_jobs(status(self.env)):
            proc = cli(self.env, "stop", job["run_id"])
            assert proc.returncode == 0, proc.stderr


DOCKER = pytest.mark.docker
REDIS = pytest.mark.redis

#: every runtime with every lock
ALL_PAIRS = [
    pytest.param(("process", "flock"), id="process-flock"),
    pytest.param(("process", "redis"), id="process-redis", marks=REDIS),
    pytest.param(("docker", "flock"), id="docker-flock", marks=DOCKER),
    pytest.param(("docker", "redis"), id="docker-redis", marks=[DOCKER, REDIS]),
]
#: each runtime and each lock once, for the slower mixed test
CROSS_PAIRS = [
    pytest.param(("process", "redis"), id="process-redis", marks=REDIS),
    pytest.param(("docker", "flock"), id="docker-flock", marks=DOCKER),
]


@pytest.fixture
def cli_node(request, scene_node):
    """The process jobs left are killed by scene_node, the containers by the dockerd fixture."""
    return CliNode(request, scene_node, *request.param)


def _scale(request) -> int:
    return 3 if request.config.getoption("--long") else 1


def check_samplers(*samplers) -> None:
    for sampler in samplers:
        assert sampler.samples > 0, "the sampler never read the node"
        assert sampler.violations == [], f"a card had two live jobs: {sampler.violations[:3]}"
        assert sampler.errors == [], sampler.errors[:3]


def check_wave(node: CliNode, results, sizes: list[int]) -> tuple[list[dict], list]:
    """Every launch was either placed or refused for capacity, and no card is shared."""
    odd = [(r.returncode, r.stderr) for r in results if r.returncode not in (0, 75)]
    assert odd == [], odd
    accepted = [json.loads(r.stdout) for r in results if r.returncode == 0]
    refused = [(size, r) for size, r in zip(sizes, results) if r.returncode == 75]
    assert len(accepted) + len(refused) == len(sizes)
    for _size, r in refused:
        check_refusal(r)
    assert refused, "with more demand than cards some launches must be refused"
    assert shared_cards((a["run_id"], a["gpus"]) for a in accepted) == {}
    held = sorted(c for a in accepted for c in a["gpus"])
    final = status(node.env)
    live = live_jobs(final)
    assert shared_cards((j["run_id"], j["gpus"]) for j in live) == {}
    assert sorted(c for j in live for c in j["gpus"]) == held
    assert {j["run_id"] for j in live} == {a["run_id"] for a in accepted}
    # Cards were only taken during the wave, so each refusal saw at least as many
    # free cards as are free now: a refused launch must need more than that.
    for size, r in refused:
        assert size > len(final["free"]), (size, final["free"], r.stderr)
    return accepted, refused


#: --long runs take minutes; every wait inside is bounded on its own (helpers.load.BOUND_S)
LONG_TIMEOUT = pytest.mark.timeout(1200)


@LONG_TIMEOUT
@pytest.mark.parametrize("cli_node", ALL_PAIRS, indirect=True)
def test_concurrent_launches_never_share_a_card(cli_node, request):
    """16 launchers (48 x 3 waves with --long) of 1 to 3 cards each, all at once."""
    scale = _scale(request)
    waves = scale
    totals = Counter()
    for wave in range(waves):
        sizes = [1 + i % 3 for i in range(LAUNCHERS * scale)]
        commands = [cli_node.launch(f"w{wave}-{i}", n) for i, n in enumerate(sizes)]
        with RuntimeSampler(cli_node.env) as direct, StatusSampler(cli_node.env) as shown:
            results = run_all(cli_node.env, commands)
        check_samplers(direct, shown)
        accepted, refused = check_wave(cli_node, results, sizes)
        totals.update(
            submitted=len(sizes),
            accepted=len(accepted),
            refused=len(refused),
            runtime_samples=direct.samples,
            status_samples=shown.samples,
        )
        if wave + 1 < waves:
            cli_node.stop_live()
    record_figures("load", runtime=cli_node.runtime, lock=cli_node.lock, waves=waves, violations=0, **totals)


@LONG_TIMEOUT
@pytest.mark.parametrize("cli_node", CROSS_PAIRS, indirect=True)
def test_launches_mixed_with_reserve_stop_and_reclaim(cli_node, request):
    """Launches and reservations racing stops and reclaims from other processes."""
    scale = _scale(request)
    # Before: two running jobs to stop and one that has already exited, to reclaim.
    for run_id, cards, command in (("old-a", 2, ()), ("old-b", 1, ()), ("old-c", 1, ("sh", "-c", "exit 3"))):
        proc = cli(cli_node.env, *cli_node.launch(run_id, cards, *command))
        assert proc.returncode == 0, proc.stderr
    until(
        lambda: {j["run_id"]: j["status"] for j in status(cli_node.env)["jobs"]}.get("old-c") == "exited",
        "old-c exiting",
    )

    launches = [cli_node.launch(f"m{i}", 1 + i % 2) for i in range(LAUNCHERS * scale)]
    reserves = [cli_node.reserve(f"r{i}", 1) for i in range(3 * scale)]
    others = [["stop", "old-a"], ["stop", "old-b"], ["reclaim"], ["reclaim"]]
    commands = []
    for i in range(max(len(launches), len(reserves), len(others))):  # interleaved
        for group in (launches, reserves, others):
            if i < len(group):
                commands.append(group[i])
    with RuntimeSampler(cli_node.env) as direct, StatusSampler(cli_node.env) as shown:
        results = run_all(cli_node.env, commands)
    check_samplers(direct, shown)

    by_command = list(zip(commands, results))
    placing = [(c, r) for c, r in by_command if c[0] in ("launch", "reserve")]
    odd = [
        (c[:6], r.returncode, r.stderr)
        for c, r in by_command
        if r.returncode not in ((0, 75) if c[0] in ("launch", "reserve") else (0,))
    ]
    assert odd == [], odd
    accepted = [json.loads(r.stdout) for _c, r in placing if r.returncode == 0]
    refused = [r for _c, r in placing if r.returncode == 75]
    for r in refused:
        check_refusal(r)
    assert len(accepted) + len(refused) == len(launches) + len(reserves)

    final = status(cli_node.env)
    live = live_jobs(final)
    by_run = {j["run_id"]: j for j in final["jobs"]}
    assert shared_cards((j["run_id"], j["gpus"]) for j in live) == {}
    # Nothing placed was removed or stopped by the racing reclaims and stops ...
    assert {a["run_id"] for a in accepted} == {j["run_id"] for j in live}
    # ... the two stopped jobs ended, and the exited one was reclaimed.
    assert all(by_run.get(rid, {"status": "gone"})["status"] in ("exited", "gone") for rid in ("old-a", "old-b"))
    assert "old-c" not in by_run
    kinds = Counter(by_run[a["run_id"]]["kind"] for a in accepted)
    record_figures(
        "mixed",
        runtime=cli_node.runtime,
        lock=cli_node.lock,
        submitted=len(placing),
        accepted=len(accepted),
        refused=len(refused),
        reservations=kinds["reservation"],
        stops=2,
        reclaims=2,
        runtime_samples=direct.samples,
        status_samples=shown.samples,
        violations=0,
    )


async def test_the_samplers_see_a_card_given_twice(scene_node):
    """The control for the tests above: a card held twice (placed past the
    allocator, straight into the runtime) is caught by both samplers."""
    from tpnode_tui.model.jobs import JobSpec
    from tpnode_tui.runtimes.process import ProcessRuntime

    env = node_env(*scene_node)
    runtime = ProcessRuntime(scene_node[1])
    try:
        for run_id in ("one", "two"):
            await runtime.run(JobSpec(run_id=run_id, cards=1, command=PROCESS_JOB), [3])
        with RuntimeSampler(env) as direct, StatusSampler(env) as shown:
            await asyncio.to_thread(until, lambda: direct.samples >= 3 and shown.samples >= 1, "a few samples")
        for sampler in (direct, shown):
            assert sampler.violations and sampler.violations[0][1] == {3: ["one", "two"]}
    finally:
        await runtime.close()
