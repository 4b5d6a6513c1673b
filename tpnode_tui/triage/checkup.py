"""Running a card's check: its NVML reading in a child with a hard deadline, then the operator's command.

Both run as processes of their own, with a clean environment and no
descriptor of this process but their pipes, read from a thread, so nothing
here holds the lock or blocks the event loop. At its deadline a child's
process group is killed and not waited for; while a straggler has not
exited no other check starts one. Only a command's end is kept
(:data:`TAIL_BYTES`, :data:`TAIL_LINES`, :data:`LINE_MOST`). See
docs/architecture.md, section 'Checks: drain, check, return'.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from tpnode_tui.host.rerun import rerun_argv
from tpnode_tui.model.checks import CheckFacts, CommandRun
from tpnode_tui.port.wire.reader import WireError
from tpnode_tui.probes.auto import AutoProbe
from tpnode_tui.probes.checkup import facts_from_json
from tpnode_tui.probes.nvml import NvmlProbe
from tpnode_tui.probes.simulated import SimulatedProbe
from tpnode_tui.probes.smi import SmiProbe
from tpnode_tui.text.printable import printable

#: the whole environment of a check's children: nothing of the agent's (its settings, its secrets)
CHECK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: what of a command's output is kept at most while it runs, and of that the lines kept
TAIL_BYTES = 16 * 1024
TAIL_LINES = 20
LINE_MOST = 300
#: the most a tier A answer (one line of JSON) may be
ANSWER_MOST = 64 * 1024
_READ = 65536


@dataclass(frozen=True)
class Ran:
    """How one child ended, and the end of what it wrote."""

    #: its exit code (negative: the signal that ended it); None when it did not end by itself
    exit_code: Optional[int]
    #: the last bytes of its standard output (and error, where they were joined)
    output: bytes
    #: the last bytes of its standard error, where it was kept apart
    errors: bytes
    seconds: float
    timed_out: bool = False
    #: why it could not be started
    problem: Optional[str] = None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the child and its process group, while it has not been reaped
    (until then its pid, the group's id, cannot be anyone else's)."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _drain_pipes(proc: subprocess.Popen[bytes], deadline: float, keep: int) -> tuple[bytes, bytes, bool]:
    """Read both pipes as they come, keeping the last ``keep`` bytes of each,
    until both end or the deadline passes (then False)."""
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    open_pipes = [p for p in kept if p is not None]
    while open_pipes:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(kept[proc.stdout]), bytes(kept[proc.stderr]), False
        ready, _, _ = select.select(open_pipes, [], [], left)
        for pipe in ready:
            chunk = os.read(pipe.fileno(), _READ)
            if not chunk:
                open_pipes.remove(pipe)
                continue
            got = kept[pipe]
            got += chunk
            del got[: max(0, len(got) - keep)]
    return bytes(kept[proc.stdout]), bytes(kept[proc.stderr]), True


def run_bounded(
    argv: Sequence[str], env: dict[str, str], timeout_s: float, *, keep: int, join_errors: bool
) -> tuple[Ran, Optional[subprocess.Popen[bytes]]]:
    """``argv`` run to its end or to ``timeout_s``, whichever comes first; blocking
    (run it in a thread). The process is handed back when it was killed and
    may not have exited, for the caller to look at again."""
    began = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if join_errors else subprocess.PIPE,
            env=env,
            cwd="/",
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        return Ran(None, b"", b"", 0.0, problem=f"{argv[0]} could not be started ({e.strerror or e})"), None
    deadline = began + timeout_s
    try:
        out, err, ended = _drain_pipes(proc, deadline, keep)
        if ended:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                ended = False  # it closed its output and went on: killed all the same
    except BaseException:
        _kill_group(proc)  # whoever asked gave up: end it now, not at the deadline
        raise
    finally:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    seconds = time.monotonic() - began
    if not ended:
        _kill_group(proc)
        return Ran(None, out, err, seconds, timed_out=True), proc
    return Ran(proc.returncode, out, err, seconds), None


def tail_lines(output: bytes) -> tuple[str, ...]:
    """The last lines of what a command wrote: printable, each cut short, blank ones left out."""
    lines = [printable(line.rstrip()) for line in output.decode("utf-8", "replace").splitlines() if line.strip()]
    return tuple(line if len(line) <= LINE_MOST else line[: LINE_MOST - 1] + "…" for line in lines[-TAIL_LINES:])


def check_source(probe: Any) -> tuple[Optional[str], str]:
    """What a check of this node reads (``nvml``, or ``simulated:PATH`` for the
    simulated node), or None and why nothing can be."""
    if isinstance(probe, AutoProbe):
        if probe.found is None:
            return None, "no probe can read the GPUs yet"
        probe = probe.found
    if isinstance(probe, (NvmlProbe, SmiProbe)):
        return "nvml", ""
    if isinstance(probe, SimulatedProbe):
        return f"simulated:{probe.path}", ""
    return None, f"the {getattr(probe, 'source', 'this')} probe has no NVML to ask"


def with_card(command: Sequence[str], uuid: str, card: int) -> list[str]:
    """The command's words with ``{uuid}`` and ``{card}`` put in."""
    return [word.replace("{uuid}", uuid).replace("{card}", str(card)) for word in command]


class Checkup:
    """Runs checks' children, and keeps those killed at a deadline until they exit."""

    def __init__(self, timeout_s: float, command: Sequence[str] = (), command_timeout_s: float = 1800.0) -> None:
        self.timeout_s = timeout_s
        self.command = tuple(command)
        self.command_timeout_s = command_timeout_s
        #: children killed at their deadline, with what they were and when, until seen to exit
        self._stragglers: list[tuple[subprocess.Popen[bytes], str, float]] = []

    def stuck(self) -> Optional[str]:
        """Why no child may be started now, or None; forgets the stragglers that exited."""
        self._stragglers = [s for s in self._stragglers if s[0].poll() is None]
        if not self._stragglers:
            return None
        proc, what, killed_at = self._stragglers[0]
        return (
            f"an earlier check's {what} (pid {proc.pid}) was killed {time.monotonic() - killed_at:.0f} s ago "
            "for not ending in time and has not exited, so the driver may be hung; no other is started until it exits"
        )

    async def _run(
        self, what: str, argv: Sequence[str], env: dict[str, str], timeout_s: float, keep: int, join_errors: bool
    ) -> Ran:
        ran, straggler = await asyncio.to_thread(run_bounded, argv, env, timeout_s, keep=keep, join_errors=join_errors)
        if straggler is not None and straggler.poll() is None:
            self._stragglers.append((straggler, what, time.monotonic()))
        return ran

    async def facts(self, source: str, uuid: str) -> tuple[Optional[CheckFacts], Optional[str]]:
        """Tier A: what the driver says of the card ``uuid``, read by a child
        killed after ``timeout_s``; or None and why it could not be told."""
        stuck = self.stuck()
        if stuck:
            return None, stuck
        argv = rerun_argv("tpnode_tui.probes.checkup", source, uuid)
        ran = await self._run("NVML reading", argv, {"PATH": CHECK_PATH}, self.timeout_s, ANSWER_MOST, False)
        if ran.problem is not None:
            return None, ran.problem
        if ran.timed_out:
            return None, f"the driver did not answer within {self.timeout_s:g} s (the reading was killed)"
        said = tail_lines(ran.errors)
        if ran.exit_code != 0:
            return None, f"the reading ended with exit code {ran.exit_code}" + (f": {said[-1]}" if said else "")
        try:
            return facts_from_json(json.loads(ran.output.decode("utf-8", "replace"))), None
        except (ValueError, WireError) as e:
            return None, f"the reading answered what this node cannot read ({str(e)[:200]})"

    async def run_command(self, uuid: str, card: int) -> CommandRun:
        """Tier B: the operator's command for the card, to its end or its time-out."""
        argv = with_card(self.command, uuid, card)
        shown = shlex.join(argv)
        stuck = self.stuck()
        if stuck:
            return CommandRun(shown, None, 0.0, problem=stuck)
        env = {
            "PATH": CHECK_PATH,
            "TUNEPLANE_CHECK_UUID": uuid,
            "TUNEPLANE_CHECK_CARD": str(card),
            "CUDA_VISIBLE_DEVICES": uuid,
            "NVIDIA_VISIBLE_DEVICES": uuid,
        }
        ran = await self._run("command", argv, env, self.command_timeout_s, TAIL_BYTES, True)
        return CommandRun(
            shown,
            ran.exit_code,
            round(ran.seconds, 3),
            tail=tail_lines(ran.output),
            timed_out=ran.timed_out,
            problem=ran.problem,
        )
