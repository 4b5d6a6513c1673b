"""The fence on a real kernel: a job's processes can open their own cards' device files and no other card's.

Character device nodes are made with mknod in a directory of the test's own
(the device cgroup checks major:minor, never the path). No NVIDIA driver is
bound to them, so an open the fence allows fails with ENXIO, and one it
denies with EPERM; a non-NVIDIA node opens. The driver's /proc files are the
test's own too: nvidia-uvm is major 510 and nvidia-caps 511, and mig-minors
lists what a driver lists for 32 cards.

Each probe is a real process that first moves itself into the job's cgroup
(as a launcher's child does before it runs the command), then opens every
node. These tests need root and the cgroups this machine has: cgroup v2 (here
hybrid, at /sys/fs/cgroup/unified) and the v1 devices controller. Without
them they skip, and under CI=true they fail. Every cgroup they make is
removed, also when a test fails, and the last test checks none is left.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import secrets
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from helpers.accounts import runnable
from helpers.fence import mig_minors
from tpnode_tui.devices import v1
from tpnode_tui.devices.assembler import R0, R1, R2, assemble, exit_insn, load_u32, mov32
from tpnode_tui.devices.bpf import BPF_PROG_GET_FD_BY_ID, attach_program, attached_programs, bpf_call, load_program
from tpnode_tui.devices.errors import CannotFence
from tpnode_tui.devices.fence import MECHANISM_V1, MECHANISM_V2, Fenced, ProcFiles, fence, node_fences
from tpnode_tui.devices.nvidia import NvidiaMajors
from tpnode_tui.devices.program import device_program
from tpnode_tui.devices.rules import DeviceRules, Grant, MajorRule, SliceGrant, device_rules
from tpnode_tui.runtimes.jobprocs import cgroup_parent

UVM, CAPS = 510, 511
#: a job's name, and the start of every cgroup these tests make, so leftovers can be found
TEST_NAME = "devtest"


def unavailable(why: str) -> None:
    """Fail under CI, skip elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the fence's tests cannot run: {why}", pytrace=False)
    pytest.skip(why)


#: the nodes made for each test: label -> (major, minor)
def _nodes(minors: dict[str, int]) -> dict[str, tuple[int, int]]:
    nodes = {f"card{n}": (195, n) for n in range(8)}
    nodes |= {"modeset": (195, 254), "ctl": (195, 255), "uvm": (UVM, 0), "uvm-tools": (UVM, 1)}
    nodes |= {"config": (CAPS, 1), "monitor": (CAPS, 2)}
    for name in ("gpu2/gi1", "gpu2/gi1/ci0", "gpu2/gi1/ci1", "gpu2/gi2", "gpu2/gi2/ci0", "gpu3/gi1", "gpu3/gi1/ci0"):
        nodes[name] = (CAPS, minors[f"{name}/access"])
    nodes |= {"null-copy": (1, 3), "zero-copy": (1, 5)}
    return nodes


NVIDIA = {
    "card0", "card1", "card2", "card3", "card4", "card5", "card6", "card7", "modeset", "ctl", "uvm", "uvm-tools",
    "config", "monitor", "gpu2/gi1", "gpu2/gi1/ci0", "gpu2/gi1/ci1", "gpu2/gi2", "gpu2/gi2/ci0", "gpu3/gi1",
    "gpu3/gi1/ci0",
}  # fmt: skip
#: every CUDA process opens these: allowed to every job
COMMON = {"modeset", "ctl", "uvm", "uvm-tools"}
NOT_NVIDIA = {"null-copy", "zero-copy", "/dev/null"}


@dataclass
class Scene:
    root: Path
    files: ProcFiles
    paths: dict[str, str]


@pytest.fixture
def scene() -> Iterator[Scene]:
    """A directory of device nodes and the driver's /proc files, readable by any account."""
    if os.geteuid() != 0:
        unavailable("making device nodes and cgroups takes root")
    root = Path(tempfile.mkdtemp(prefix="tpnode-devices-"))
    try:
        root.chmod(0o755)
        text, minors = mig_minors(32)
        (root / "mig-minors").write_text(text)
        devices = f"Character devices:\n  1 mem\n195 nvidia-frontend\n{UVM} nvidia-uvm\n{CAPS} nvidia-caps\n\n"
        (root / "devices").write_text(devices + "Block devices:\n  7 loop\n")
        paths = {"/dev/null": "/dev/null"}
        for label, (major, minor) in _nodes(minors).items():
            path = root / label.replace("/", "-")
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            path.chmod(0o666)
            paths[label] = str(path)
        yield Scene(root, ProcFiles(devices=root / "devices", mig_minors=root / "mig-minors"), paths)
    finally:
        shutil.rmtree(root)


def _remove_v2(path: Path) -> None:
    """Remove a test's cgroup v2, ending whatever is still in it."""
    if not path.exists():
        return
    kill = path / "cgroup.kill"
    if kill.exists():
        kill.write_text("1")
    for _ in range(100):
        if not (path / "cgroup.procs").read_text().split():
            break
        time.sleep(0.05)
    for child in sorted(path.iterdir(), reverse=True):
        if child.is_dir():
            _remove_v2(child)
    path.rmdir()


@pytest.fixture
def v2_parent() -> Path:
    parent, why = cgroup_parent()
    if parent is None:
        unavailable(f"no cgroup v2 to make a job's cgroup in: {why}")
    assert parent is not None
    return parent


@pytest.fixture
def v2_cgroup(v2_parent) -> Iterator[Path]:
    """An empty cgroup v2, as a runtime makes for a job."""
    path = v2_parent / f"tpnode-tui.{TEST_NAME}.{secrets.token_hex(4)}"
    path.mkdir()
    try:
        yield path
    finally:
        _remove_v2(path)


def _remove_v1_leftovers(parent: Path) -> list[str]:
    left = []
    for path in parent.glob(f"{v1.PREFIX}{TEST_NAME}*"):
        left.append(path.name)
        for pid in (path / "cgroup.procs").read_text().split():
            os.kill(int(pid), 9)
        for _ in range(100):
            if v1.remove(path):
                break
            time.sleep(0.05)
    return left


@pytest.fixture
def v1_parent() -> Iterator[Path]:
    """Where the job's cgroups of the v1 devices hierarchy are made; every one a test left is removed."""
    if os.geteuid() != 0:
        unavailable("making cgroups takes root")
    try:
        parent = v1.hierarchy_dir()
    except CannotFence as e:
        unavailable(f"no cgroup v1 devices controller: {e}")
    try:
        yield parent
    finally:
        _remove_v1_leftovers(parent)


# ── the probe: a real process in the job's cgroup ───────────────────────────

PROBE = r"""
import errno, json, os, sys
from pathlib import Path
joins, detach, paths = json.loads(sys.argv[1])
for kind, path in joins:
    if kind == "v1":
        from tpnode_tui.devices import v1
        v1.join(Path(path))
    else:
        with open(path, "w") as f:
            f.write("0")
starter = os.getpid()
if detach:
    # leave the session and the parent, as a daemon does: setsid, then fork again
    if os.fork():
        os.wait()
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
out = {}
for label, path in paths.items():
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        out[label] = "ok"
    except OSError as e:
        out[label] = errno.errorcode.get(e.errno, str(e.errno))
out["-cgroups"] = Path("/proc/self/cgroup").read_text()
out["-session"] = os.getsid(0)
out["-parent"] = os.getppid()
out["-starter"] = starter
print(json.dumps(out), flush=True)
"""


def probe(scene: Scene, joins: list[tuple[str, str]], detach: bool = False) -> dict[str, str]:
    """What a process that joined ``joins`` (("v2", cgroup.procs) or ("v1", cgroup dir)) can open."""
    argument = json.dumps([joins, detach, scene.paths])
    done = subprocess.run(
        [sys.executable, "-c", PROBE, argument], capture_output=True, text=True, timeout=60, cwd=scene.root
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, str] = json.loads(done.stdout)
    if detach:
        # the process that opened the nodes is in a session of its own, and no child of the one that joined
        assert result["-session"] not in (os.getsid(0), result["-starter"])
        assert result["-parent"] != result["-starter"]
    return result


def in_cgroup(result: dict[str, str], controller: str, cgroup: Path) -> bool:
    """Whether the probe's /proc/self/cgroup puts it in ``cgroup``: of the v1 hierarchy of
    ``controller``, or of cgroup v2 for ``controller`` ""."""
    for line in result["-cgroups"].splitlines():
        _number, controllers, path = line.split(":", 2)
        if (controller in controllers.split(",") if controller else controllers == "") and path.endswith(cgroup.name):
            return path.endswith("/" + cgroup.name)
    return False


def assert_fenced(result: dict[str, str], allowed: set[str], untouched: set[str] = frozenset()) -> None:
    """``allowed`` NVIDIA nodes open as far as the driver (ENXIO), ``untouched`` ones too (the fence
    leaves them), every other NVIDIA node is refused (EPERM); non-NVIDIA nodes open."""
    seen = {label: result[label] for label in NVIDIA | NOT_NVIDIA}
    want = {label: "ENXIO" if label in allowed | untouched else "EPERM" for label in NVIDIA}
    want |= {label: "ok" for label in NOT_NVIDIA}
    assert seen == want


# ── cgroup v2 ────────────────────────────────────────────────────────────────


def test_unfenced_every_node_opens_as_far_as_the_driver(scene, v2_cgroup):
    """The control: without a fence nothing is refused, so each EPERM below is the fence's."""
    result = probe(scene, [("v2", str(v2_cgroup / "cgroup.procs"))])
    assert_fenced(result, allowed=NVIDIA)


def test_v2_a_card_job_opens_its_card_and_no_other(scene, v2_cgroup):
    fenced = fence(Grant(cards=frozenset({2})), cgroup=v2_cgroup, name=TEST_NAME, files=scene.files)
    assert fenced == Fenced(MECHANISM_V2)
    assert len(attached_programs(v2_cgroup)) == 1
    result = probe(scene, [("v2", str(v2_cgroup / "cgroup.procs"))])
    assert_fenced(result, allowed=COMMON | {"card2"})
    assert in_cgroup(result, "", v2_cgroup)


def test_v2_a_job_on_two_cards_opens_both(scene, v2_cgroup):
    assert fence(Grant(cards=frozenset({0, 5})), cgroup=v2_cgroup, name=TEST_NAME, files=scene.files).fenced
    assert_fenced(probe(scene, [("v2", str(v2_cgroup / "cgroup.procs"))]), allowed=COMMON | {"card0", "card5"})


def test_v2_a_mig_job_opens_its_card_and_its_instances_capabilities(scene, v2_cgroup):
    grant = Grant(slices=(SliceGrant(card=2, gpu_instance=1, compute_instance=0),))
    assert fence(grant, cgroup=v2_cgroup, name=TEST_NAME, files=scene.files) == Fenced(MECHANISM_V2)
    result = probe(scene, [("v2", str(v2_cgroup / "cgroup.procs"))])
    assert_fenced(result, allowed=COMMON | {"card2", "gpu2/gi1", "gpu2/gi1/ci0"})


def test_v2_a_process_that_leaves_its_session_and_parent_stays_fenced(scene, v2_cgroup):
    assert fence(Grant(cards=frozenset({2})), cgroup=v2_cgroup, name=TEST_NAME, files=scene.files).fenced
    result = probe(scene, [("v2", str(v2_cgroup / "cgroup.procs"))], detach=True)
    assert_fenced(result, allowed=COMMON | {"card2"})


def test_v2_the_programs_of_the_cgroups_above_still_decide(scene, v2_cgroup):
    """With BPF_F_ALLOW_MULTI the parent's program runs too: what it denies stays denied
    (here /dev/zero's numbers), and the fence's allowing every other device overrides nothing."""
    every_mem_minor_but_zero = frozenset(range(256)) - {5}
    attach_program(v2_cgroup, device_program(DeviceRules((MajorRule(1, "mem", every_mem_minor_but_zero, None),))))
    job = v2_cgroup / "job"
    job.mkdir()
    assert fence(Grant(cards=frozenset({2})), cgroup=job, name=TEST_NAME, files=scene.files).fenced
    result = probe(scene, [("v2", str(job / "cgroup.procs"))])
    assert result["zero-copy"] == "EPERM"
    assert (result["null-copy"], result["card2"], result["card3"]) == ("ok", "ENXIO", "EPERM")


@pytest.mark.parametrize(
    "rules",
    [
        DeviceRules(()),
        device_rules(Grant(cards=frozenset({2})), NvidiaMajors(uvm=UVM, caps=CAPS)),
        device_rules(Grant(cards=frozenset(range(254))), NvidiaMajors(uvm=UVM, caps=CAPS)),
        device_rules(Grant(cards=frozenset({0})), NvidiaMajors()),
    ],
    ids=["nothing-fenced", "one-card", "every-card", "no-uvm-no-caps"],
)
def test_v2_every_shape_of_the_filter_passes_the_kernels_verifier(rules):
    if os.geteuid() != 0:
        unavailable("loading a device program takes root")
    os.close(load_program(device_program(rules)))


def test_v2_a_program_the_verifier_refuses_is_refused_in_its_words(v2_cgroup):
    with pytest.raises(CannotFence) as refused:
        attach_program(v2_cgroup, assemble([load_u32(R2, R1, 12), mov32(R0, 1), exit_insn()]))
    # the verifier's own words, which name what it refused: a read past struct bpf_cgroup_dev_ctx
    assert str(refused.value).startswith(
        "the kernel did not load the device program: Permission denied, EACCES; the verifier says: "
    )
    assert "off=12" in str(refused.value)
    assert attached_programs(v2_cgroup) == ()


def test_v2_a_directory_that_is_no_cgroup_is_refused_in_words(tmp_path):
    if os.geteuid() != 0:
        unavailable("loading a device program takes root")
    with pytest.raises(CannotFence, match=f"did not attach the device program to {tmp_path}: .*not a cgroup v2"):
        attach_program(tmp_path, device_program(DeviceRules(())))


def _program_alive(prog_id: int) -> bool:
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("=I", attr, 0, prog_id)
    try:
        os.close(bpf_call(BPF_PROG_GET_FD_BY_ID, attr))
    except OSError as e:
        assert e.errno == errno.ENOENT, e
        return False
    return True


def test_v2_removing_the_jobs_cgroup_frees_its_program(scene, v2_parent):
    cgroup = v2_parent / f"tpnode-tui.{TEST_NAME}.{secrets.token_hex(4)}"
    cgroup.mkdir()
    try:
        assert fence(Grant(cards=frozenset({2})), cgroup=cgroup, name=TEST_NAME, files=scene.files).fenced
        (prog_id,) = attached_programs(cgroup)
        assert _program_alive(prog_id)
        probe(scene, [("v2", str(cgroup / "cgroup.procs"))])
    finally:
        _remove_v2(cgroup)
    deadline = time.monotonic() + 10  # the kernel frees a cgroup's programs from a work queue
    while _program_alive(prog_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _program_alive(prog_id)
    assert not cgroup.exists()


# ── cgroup v1 ────────────────────────────────────────────────────────────────


def _own_devices_path() -> str:
    """This process's path in the v1 devices hierarchy ("/" here)."""
    line = next(line for line in Path("/proc/self/cgroup").read_text().splitlines() if ":devices:" in line)
    return line.split(":", 2)[2]


def _fence_v1(scene: Scene, grant: Grant) -> Fenced:
    fenced = fence(grant, cgroup=None, name=TEST_NAME, files=scene.files)
    assert fenced.mechanism == MECHANISM_V1, fenced.problem
    assert fenced.v1_cgroup is not None and fenced.v1_cgroup.name.startswith(f"{v1.PREFIX}{TEST_NAME}.")
    return fenced


def test_v1_a_card_job_opens_its_card_and_no_other(scene, v1_parent):
    fenced = _fence_v1(scene, Grant(cards=frozenset({2})))
    assert fenced.v1_cgroup is not None and fenced.v1_cgroup.parent == v1_parent
    result = probe(scene, [("v1", str(fenced.v1_cgroup))])
    assert in_cgroup(result, "devices", fenced.v1_cgroup)
    # the capabilities of cards the job cannot open are not listed: each needs its card's file
    assert_fenced(result, allowed=COMMON | {"card2"}, untouched={"gpu3/gi1", "gpu3/gi1/ci0"})
    assert v1.remove(fenced.v1_cgroup) and not fenced.v1_cgroup.exists()


def test_v1_a_mig_job_opens_its_card_and_its_instances_capabilities(scene, v1_parent):
    fenced = _fence_v1(scene, Grant(slices=(SliceGrant(card=2, gpu_instance=1, compute_instance=0),)))
    assert fenced.v1_cgroup is not None
    result = probe(scene, [("v1", str(fenced.v1_cgroup))])
    assert_fenced(
        result, allowed=COMMON | {"card2", "gpu2/gi1", "gpu2/gi1/ci0"}, untouched={"gpu3/gi1", "gpu3/gi1/ci0"}
    )


def test_v1_a_process_that_leaves_its_session_and_parent_stays_fenced(scene, v1_parent):
    fenced = _fence_v1(scene, Grant(cards=frozenset({2})))
    assert fenced.v1_cgroup is not None
    result = probe(scene, [("v1", str(fenced.v1_cgroup))], detach=True)
    assert_fenced(result, allowed=COMMON | {"card2"}, untouched={"gpu3/gi1", "gpu3/gi1/ci0"})


def test_v1_where_the_job_has_a_cgroup_v2_that_cannot_be_fenced(scene, v1_parent, tmp_path):
    """A directory that is no cgroup v2 (or a kernel that refuses the program): the v1 fence is used."""
    fenced = fence(Grant(cards=frozenset({2})), cgroup=tmp_path, name=TEST_NAME, files=scene.files)
    assert fenced.mechanism == MECHANISM_V1 and fenced.v1_cgroup is not None
    assert_fenced(probe(scene, [("v1", str(fenced.v1_cgroup))]), COMMON | {"card2"}, {"gpu3/gi1", "gpu3/gi1/ci0"})


def test_v1_the_cgroup_is_removed_only_once_its_processes_have_ended(scene, v1_parent):
    fenced = _fence_v1(scene, Grant(cards=frozenset({2})))
    assert fenced.v1_cgroup is not None
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from tpnode_tui.devices import v1; "
         "v1.join(Path(sys.argv[1])); print(flush=True); time.sleep(60)", str(fenced.v1_cgroup)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline() == b"\n"
        assert v1.remove(fenced.v1_cgroup) is False and fenced.v1_cgroup.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert v1.remove(fenced.v1_cgroup) and not fenced.v1_cgroup.exists()
    assert v1.remove(fenced.v1_cgroup)  # gone already counts as removed


def test_v1_a_parent_that_allows_only_listed_devices_is_refused_and_nothing_is_left(scene, v1_parent, tmp_path):
    parent = v1_parent / f"{v1.PREFIX}{TEST_NAME}-allowlist.{secrets.token_hex(4)}"
    parent.mkdir()
    try:
        (parent / "devices.deny").write_text("a")  # from now on: only what is listed
        (parent / "devices.allow").write_text("c 195:* rwm")
        own = tmp_path / "cgroup"
        own.write_text(f"5:devices:{_own_devices_path().rstrip('/')}/{parent.name}\n")
        files = ProcFiles(devices=scene.files.devices, mig_minors=scene.files.mig_minors, own_cgroup=own)
        fenced = fence(Grant(cards=frozenset({2})), cgroup=None, name=TEST_NAME, files=files)
        assert not fenced.fenced
        assert "allows only the devices it lists" in fenced.problem
        assert [p.name for p in parent.iterdir() if p.is_dir()] == []
    finally:
        parent.rmdir()


# ── a node that cannot fence says why ───────────────────────────────────────

AS_NOBODY = r"""
import dataclasses, json, sys
from pathlib import Path
from tpnode_tui.devices.fence import ProcFiles, fence, node_fences
from tpnode_tui.devices.rules import Grant
cgroup, devices, mig = sys.argv[1:]
files = ProcFiles(devices=Path(devices), mig_minors=Path(mig))
job = fence(Grant(cards=frozenset({2})), cgroup=Path(cgroup), name="devtest", files=files)
node = node_fences(Path(cgroup).parent, files=files)
print(json.dumps([dataclasses.asdict(job), dataclasses.asdict(node)], default=str))
"""


def test_an_ordinary_account_cannot_fence_and_is_told_why(scene, v2_cgroup, v1_parent):
    product = runnable()  # this checkout may be one nobody can enter (under /root)
    done = subprocess.run(
        [product.python, "-c", AS_NOBODY, str(v2_cgroup), str(scene.files.devices), str(scene.files.mig_minors)],
        capture_output=True, text=True, timeout=60, user="nobody", group="nogroup", cwd="/",
        env={"PYTHONPATH": str(product.site)},
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    job, node = json.loads(done.stdout)
    assert job["mechanism"] == "" and job["v1_cgroup"] is None
    assert job["problem"] == (
        "cgroup v2: the kernel did not load the device program: Operation not permitted, EPERM: "
        "loading a device program takes root (CAP_SYS_ADMIN, or CAP_BPF with CAP_NET_ADMIN); "
        f"cgroup v1: cannot make a cgroup in {v1_parent}: Permission denied, EACCES"
    )
    assert node["mechanism"] == ""
    assert node["problem"] == (
        f"cgroup v2: cannot make a cgroup in {v2_cgroup.parent}: Permission denied, EACCES; "
        f"cgroup v1: cannot make a cgroup in {v1_parent}: Permission denied, EACCES"
    )
    assert attached_programs(v2_cgroup) == ()


def test_no_cgroup_and_no_devices_controller_is_an_answer_not_an_error(scene, tmp_path):
    (tmp_path / "mountinfo").write_text("22 1 0:21 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    (tmp_path / "cgroup").write_text("0::/\n")
    files = ProcFiles(scene.files.devices, scene.files.mig_minors, tmp_path / "mountinfo", tmp_path / "cgroup")
    fenced = fence(Grant(cards=frozenset({2})), cgroup=None, name=TEST_NAME, files=files)
    assert fenced == Fenced(
        problem="cgroup v2: the job has no cgroup of its own; cgroup v1: the cgroup v1 devices controller "
        "is not mounted (no devices line in /proc/self/cgroup)"
    )
    assert not fenced.fenced
    assert node_fences(None, "cgroup v2 is not mounted", files) == Fenced(
        problem="cgroup v2: cgroup v2 is not mounted; cgroup v1: the cgroup v1 devices controller "
        "is not mounted (no devices line in /proc/self/cgroup)"
    )


def test_driver_files_that_cannot_be_read_are_an_answer_naming_them(scene, v2_cgroup, tmp_path):
    files = ProcFiles(devices=tmp_path / "no-devices", mig_minors=scene.files.mig_minors)
    fenced = fence(Grant(cards=frozenset({2})), cgroup=v2_cgroup, name=TEST_NAME, files=files)
    assert fenced == Fenced(problem=f"cannot read {tmp_path / 'no-devices'}: No such file or directory")
    files = ProcFiles(devices=scene.files.devices, mig_minors=tmp_path / "no-mig-minors")
    grant = Grant(slices=(SliceGrant(card=2, gpu_instance=1, compute_instance=0),))
    fenced = fence(grant, cgroup=v2_cgroup, name=TEST_NAME, files=files)
    missing = tmp_path / "no-mig-minors"
    assert (
        fenced.problem
        == f"the MIG capabilities' minors are not known (cannot read {missing}: No such file or directory)"
    )
    assert attached_programs(v2_cgroup) == ()


def test_without_mig_minors_a_card_job_is_fenced_in_v2_and_refused_in_v1(scene, v2_cgroup, v1_parent, tmp_path):
    """cgroup v2 denies every capability without knowing them; a v1 deny list must name each."""
    files = ProcFiles(devices=scene.files.devices, mig_minors=tmp_path / "no-mig-minors")
    grant = Grant(cards=frozenset({2}))
    assert fence(grant, cgroup=v2_cgroup, name=TEST_NAME, files=files) == Fenced(MECHANISM_V2)
    assert_fenced(probe(scene, [("v2", str(v2_cgroup / "cgroup.procs"))]), allowed=COMMON | {"card2"})
    fenced = fence(grant, cgroup=None, name=TEST_NAME, files=files)
    assert fenced.problem.endswith(
        "cgroup v1: the nvidia-caps minors to deny are not known, and a cgroup v1 deny list names each"
    )


def _trials(parent: Path) -> list[str]:
    """The throwaway cgroups of node_fences' trial under ``parent`` (other tests on this
    machine make and remove cgroups of their own there meanwhile)."""
    return [p.name for p in parent.iterdir() if p.name.startswith("tpnode-tui.fence-check.")]


def test_the_node_says_it_fences_with_v2_and_leaves_nothing(scene, v2_parent, v1_parent):
    assert node_fences(v2_parent, files=scene.files) == Fenced(MECHANISM_V2)
    assert _trials(v2_parent) == [] and _trials(v1_parent) == []


def test_the_node_says_it_fences_with_v1_where_jobs_get_no_cgroup_v2(scene, v2_parent, v1_parent):
    assert node_fences(None, "no delegation", files=scene.files) == Fenced(MECHANISM_V1)
    assert _trials(v2_parent) == [] and _trials(v1_parent) == []


def test_zz_no_cgroup_of_these_tests_is_left(v2_parent, v1_parent):
    """Runs last in this file: every fixture removed its cgroups, also where a test failed."""
    ours = [p.name for parent in (v2_parent, v1_parent) for p in parent.iterdir() if TEST_NAME in p.name]
    assert ours + _trials(v2_parent) + _trials(v1_parent) == []
