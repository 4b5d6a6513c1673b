"""Platform jobs as Docker containers; their labels are the record of who holds which card.

A container holds its cards from the moment it is *created*: ``ps()`` lists
created containers with their labels, so the allocator can release its lock
before the (slower) start, and every other reader already sees the cards taken.
An exited container holds nothing. That is also how a reservation ends: its
workload is a sleep until the expiry, so no sweeper has to free anything.

Nothing is remembered between calls. A new process, or a new instance, reads
the same picture back from the engine, including containers an earlier process
started and ones an operator labelled by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import os
import re
import secrets
import shlex
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, AsyncIterator, Iterable, Optional, Sequence

import aiodocker
import aiohttp
from aiodocker.containers import DockerContainer
from aiodocker.exceptions import DockerError

from tpnode_tui.config.sections import DOCKER_GPU_MODES
from tpnode_tui.model.errors import BadRequest, ConfigError, Conflict, JobNotFound, RuntimeUnavailable, TpnodeError
from tpnode_tui.model.jobs import LIVE_STATUSES, DeviceFence, JobOutput, JobSpec, JobState, SliceRef
from tpnode_tui.model.validation import check_run_id
from tpnode_tui.runtimes.base import check_cards, check_kind, check_slices, hold_seconds
from tpnode_tui.runtimes.dockerfence import ENDED, MECHANISM, NO_CARD, container_fence
from tpnode_tui.runtimes.labels import GPUS, RUN_ID, job_labels, parse_labels

log = logging.getLogger(__name__)

#: Where the engine is looked for when neither the caller nor DOCKER_HOST says:
#: the same places, in the same order, as aiodocker's own search.
_SOCKET_PATHS = ("/run/docker.sock", "/var/run/docker.sock")
_DEFAULT_HOST = "unix:///var/run/docker.sock"

#: How long one engine call may take before the engine counts as unreachable.
#: Without a bound a hung dockerd would freeze the dashboard and the CLI with it.
_CALL_TIMEOUT_S = 30.0
#: How long connecting may take. An address nothing answers at (a firewall
#: that drops packets) would otherwise use up the whole call timeout.
_CONNECT_TIMEOUT_S = 5.0
#: how long one removal of exited containers goes on at most: the engine removes them one
#: at a time while the agent's polls wait, so the rest wait for the next
REMOVING_S = 2.0

#: The address schemes the Docker client here can dial (aiodocker: tcp and
#: http(s) over TCP, unix sockets; ssh needs asyncssh, npipe is Windows-only).
_SCHEMES = ("unix", "tcp", "http", "https")

#: The engine's own status text is the only place the list endpoint gives an
#: exit code: "Exited (137) 5 minutes ago".
_EXITED = re.compile(r"^\s*Exited\s*\((-?\d{1,10})\)")

#: RFC 3339 as the engine writes it: nanoseconds, and "Z" for UTC.
_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$")


_LIST_FIELDS = ("Id", "Names", "Labels", "State", "Status", "Image", "Command", "Created")
_INSPECT_FIELDS = ("Id", "Name", "Config", "State", "Path", "Args", "HostConfig")

#: What the engine accepts as a container name or id; anything else (a "/" or
#: "..") would change which API path is asked.
_CONTAINER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

#: A full container id, as a process's cgroup names it.
_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")

#: How many containers' names are remembered. An id is never reused, so an
#: answer never goes stale; the bound only keeps a long-lived agent from
#: remembering every container the node ever ran.
_NAMES_KEPT = 1024


def _call_timeout(extra_s: float = 0) -> aiohttp.ClientTimeout:
    """The bound on one engine call. aiodocker leaves stop and delete unbounded
    unless told, so they are told too."""
    return aiohttp.ClientTimeout(total=_CALL_TIMEOUT_S + extra_s, sock_connect=_CONNECT_TIMEOUT_S)


def container_name(run_id: str) -> str:
    return f"tpn-{run_id}"


def extension_name(run_id: str) -> str:
    """A name for the container that takes over an extended reservation.

    Every ``container_name`` starts ``tpn-`` and a letter or digit, so no run
    id's first container can ever be called this, and the random part keeps
    one extension's name from the next one's.
    """
    return f"tpnx-{run_id}-{secrets.token_hex(4)}"


def _resolve_host(docker_host: Optional[str]) -> tuple[str, str]:
    """The engine address and where it came from, for messages.

    Resolved here rather than left to aiodocker so that the address in every
    error is the one actually dialled.
    """
    if docker_host:
        return docker_host, "configured"
    env = os.environ.get("DOCKER_HOST", "").strip()
    if env:
        return env, "DOCKER_HOST"
    for path in _SOCKET_PATHS:
        if os.path.exists(path):
            return f"unix://{path}", "default"
    return _DEFAULT_HOST, "default"


def _parse_time(text: Optional[str]) -> Optional[float]:
    """An engine timestamp as unix seconds; None for "never" (year 1) or unreadable."""
    m = _TIMESTAMP.match(text or "")
    if not m or m.group(1).startswith("0001-"):
        return None
    fraction = (m.group(2) or "0")[:6].ljust(6, "0")
    zone = m.group(3) or "Z"
    zone = "+00:00" if zone == "Z" else zone
    try:
        return datetime.fromisoformat(f"{m.group(1)}.{fraction}{zone}").timestamp()
    except ValueError:
        return None


def _exit_code(status_text: str) -> Optional[int]:
    m = _EXITED.match(status_text or "")
    return int(m.group(1)) if m else None


def _split_command(text: str) -> tuple[str, ...]:
    """The list endpoint's command back as an argv.

    Engines quote arguments that need it ("sh -c 'exit 3'"); older ones only
    joined them with spaces, and then a plain split is the best there is.
    """
    try:
        return tuple(shlex.split(text))
    except ValueError:
        return tuple(text.split())


def _os_error(exc: BaseException) -> Optional[OSError]:
    """The operating-system error under an aiodocker connection failure.

    aiodocker re-raises connection failures as ``DockerError(900, text)``; the
    original aiohttp error, which carries the errno, is its ``__context__``.
    """
    seen: set[int] = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, aiohttp.ClientConnectorError):
            return current.os_error
        if isinstance(current, OSError) and current.errno is not None:
            return current
        current = current.__cause__ or current.__context__
    return None


class DockerRuntime:
    """The ``Runtime`` for a Docker engine, through aiodocker.

    ``gpu_mode`` says how a container is given its cards: ``nvidia`` asks the
    engine for the devices (needs the NVIDIA container toolkit), ``env`` only
    sets ``NVIDIA_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES`` (an engine
    whose default runtime is nvidia), ``none`` gives nothing but the labels
    (engines without GPUs, such as the tests').

    ``stop_timeout_s`` is the grace a job gets between SIGTERM and SIGKILL,
    room for a training run to write its checkpoint.
    """

    name = "docker"

    def __init__(
        self,
        gpu_mode: str = "nvidia",
        hold_image: str = "busybox:latest",
        docker_host: Optional[str] = None,
        stop_timeout_s: int = 10,
        fence_policy: str = "auto",
    ) -> None:
        if gpu_mode not in DOCKER_GPU_MODES:
            raise BadRequest(f"docker GPU mode {gpu_mode!r} is not one of {', '.join(DOCKER_GPU_MODES)}")
        self.gpu_mode = gpu_mode
        #: TUNEPLANE_FENCE: under "required" a container that would be given no card by
        #: name (gpu mode none) is refused; Docker fences the others whatever it says
        self.fence_policy = fence_policy
        self.hold_image = hold_image
        self.stop_timeout_s = stop_timeout_s
        self.host, self._host_source = _resolve_host(docker_host)
        self._check_scheme()
        self._docker: Optional[aiodocker.Docker] = None
        #: container id -> (name, image), or None for an id the engine does not know
        self._names: OrderedDict[str, Optional[tuple[str, str]]] = OrderedDict()

    def describe(self) -> str:
        return f"docker at {self.host}"

    def output_of(self, job: JobState) -> str:
        return f"docker logs {job.name}"

    def node_fence(self) -> DeviceFence:
        """Whether the containers this runtime makes are fenced to their cards: by
        Docker's device cgroup, as long as each is given its cards by name."""
        return DeviceFence.missing(NO_CARD) if self.gpu_mode == "none" else DeviceFence.by(MECHANISM)

    # ----------------------------------------------------------------- engine

    def _check_scheme(self) -> None:
        """Refuse at once an address this client can never dial: that is a
        setting to correct (exit 2), not an engine that is down for now."""
        scheme = self.host.split("://", 1)[0].lower() if "://" in self.host else ""
        if scheme not in _SCHEMES:
            why = {
                "ssh": "ssh:// needs the asyncssh package, which tpnode-tui does not use; forward the "
                "engine's socket instead (ssh -nNT -L /tmp/docker.sock:/var/run/docker.sock HOST) "
                "and use unix:///tmp/docker.sock",
                "npipe": "npipe:// is a Windows named pipe",
                "": "it has no scheme",
            }.get(scheme, f"{scheme}:// is not a Docker engine address")
            raise ConfigError(
                f"{self._where()} cannot be used: {why}; give unix:///path/to/docker.sock or tcp://host:port"
            )

    def _client(self) -> aiodocker.Docker:
        """The aiodocker client, made on first use.

        Made lazily because its HTTP session belongs to the running event loop,
        and constructing the runtime should not need one.
        """
        if self._docker is None:
            try:
                self._docker = aiodocker.Docker(url=self.host, timeout=_call_timeout())
            except (ValueError, DockerError) as e:
                raise ConfigError(
                    f"{self._where()} is not an address the Docker client understands "
                    f"({getattr(e, 'message', None) or e}); use unix:///path/to/docker.sock or tcp://host:port"
                ) from None
        return self._docker

    def _where(self) -> str:
        if self._host_source == "DOCKER_HOST":
            return f"DOCKER_HOST={self.host}"
        return self.host

    def _unreachable(self, exc: BaseException) -> RuntimeUnavailable:
        err = _os_error(exc)
        code = err.errno if err is not None else None
        hint = "start dockerd or set DOCKER_HOST to the engine's address"
        if code in (errno.EACCES, errno.EPERM):
            why = "permission denied"
            hint = "set DOCKER_HOST or run as a user in the docker group"
        elif code == errno.ENOENT:
            why = "no engine socket there"
        elif code == errno.ECONNREFUSED:
            why = "connection refused (is dockerd running?)"
        elif isinstance(exc, aiohttp.ConnectionTimeoutError):
            why = f"no connection within {_CONNECT_TIMEOUT_S:g}s (nothing answers at that address)"
        elif isinstance(exc, asyncio.TimeoutError):
            why = f"no answer within {_CALL_TIMEOUT_S:g}s"
        elif err is not None:
            why = err.strerror or str(err)
        else:
            why = str(exc) or type(exc).__name__
        return RuntimeUnavailable(
            f"cannot reach the Docker engine at {self._where()}: {why}; {hint}. "
            "Until it answers, which cards platform jobs hold is unknown."
        )

    @contextlib.asynccontextmanager
    async def _engine(self) -> AsyncIterator[aiodocker.Docker]:
        """Engine calls, with "cannot reach it" turned into RuntimeUnavailable.

        Any other engine error (404, 409, ...) is passed on for the caller to
        say what it means in its own terms.
        """
        try:
            yield self._client()
        except DockerError as e:
            if e.status == 900:
                raise self._unreachable(e) from None
            raise
        except (asyncio.TimeoutError, aiohttp.ClientError) as e:
            raise self._unreachable(e) from None

    # --------------------------------------------------------------------- ps

    async def ps(self) -> list[JobState]:
        """Every container carrying ``tuneplane.gpus``, live or not.

        One list call, filtered by the engine, is the record of which containers
        hold which cards. The list endpoint lacks the start time, the pid and
        the command as an argv, so *live* containers are also inspected (at the
        same time); they are few, being bounded by the node's cards. Exited ones,
        which the agent keeps to a number per account, are not: they hold no cards,
        their exit code is read from the engine's status text ("Exited (3) ..."),
        their command from its quoted command text, and their start time is when
        they were made (the list says no more), which orders them.
        """
        return await self._read({"label": [GPUS]})

    async def _read(self, filters: dict[str, list[str]]) -> list[JobState]:
        async with self._engine() as docker:
            try:
                listed = await docker.containers.list(all=True, filters=filters)
                items = [_fields(c, _LIST_FIELDS) for c in listed]
                details = await asyncio.gather(
                    *(self._inspect_live(docker, item) for item in items),
                    return_exceptions=True,
                )
                inspected: list[Optional[dict[str, Any]]] = []
                for detail in details:
                    if isinstance(detail, BaseException):
                        raise detail
                    inspected.append(detail)
            except DockerError as e:
                if e.status == 900:
                    raise
                raise RuntimeUnavailable(
                    f"the Docker engine at {self._where()} could not list containers: "
                    f"{self._said(e)}. Until it can, which cards platform jobs hold is unknown."
                ) from None
        return [_job_state(item, detail) for item, detail in zip(items, inspected)]

    async def _inspect_live(self, docker: aiodocker.Docker, item: dict[str, Any]) -> Optional[dict[str, Any]]:
        """The details of a live container; None for others, or if it is gone by now.

        A container removed between the list and this call keeps the list's
        answer for this poll: the next one drops it. Losing a holder because a
        detail could not be read would show its cards as free.
        """
        if item.get("State") not in LIVE_STATUSES:
            return None
        try:
            container = await docker.containers.get(item["Id"])
        except DockerError as e:
            if e.status == 404:
                return None
            raise
        return _fields(container, _INSPECT_FIELDS)

    # ----------------------------------------------------- naming containers

    async def containers(self, ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """The name and image of each container id the engine knows, whoever
        started it: a holder process is shown as "web-1 (nginx:1.27)", not as
        a 64-character id. Answers are remembered per id; an engine that does
        not answer now is asked again next time."""
        wanted = [i for i in dict.fromkeys(ids) if _CONTAINER_ID.fullmatch(i or "")]
        missing = [i for i in wanted if i not in self._names]
        if missing:
            try:
                async with self._engine() as docker:
                    found = await asyncio.gather(*(self._name_of(docker, i) for i in missing))
            except (TpnodeError, DockerError):
                found = []
            for container_id, named in zip(missing, found):
                self._names[container_id] = named
        known = {}
        for container_id in wanted:
            if container_id in self._names:
                self._names.move_to_end(container_id)
                named = self._names[container_id]
                if named is not None:
                    known[container_id] = named
        while len(self._names) > _NAMES_KEPT:
            self._names.popitem(last=False)
        return known

    @staticmethod
    async def _name_of(docker: aiodocker.Docker, container_id: str) -> Optional[tuple[str, str]]:
        try:
            data = _fields(await docker.containers.get(container_id), _INSPECT_FIELDS)
        except DockerError as e:
            if e.status == 404:
                return None
            raise
        image = str((data.get("Config") or {}).get("Image") or "")
        return str(data.get("Name") or "").lstrip("/") or container_id[:12], image

    # ------------------------------------------------------------ the guard

    async def _platform_container(self, name: str) -> dict[str, Any]:
        """Inspect ``name``, refusing anything that is not a platform job.

        The runtime stops and removes only containers whose labels put them on
        the books. Anything else on the engine belongs to somebody else, even
        if it uses a card.
        """
        if not _CONTAINER_NAME.fullmatch(name or ""):
            raise JobNotFound(f"{name!r} is not a container name or id")
        async with self._engine() as docker:
            try:
                data = _fields(await docker.containers.get(name), _INSPECT_FIELDS)
            except DockerError as e:
                if e.status == 404:
                    raise JobNotFound(f"no container named {name!r} on {self.host}") from None
                raise self._engine_error(f"could not look up container {name!r}", e) from None
        labels = (data.get("Config") or {}).get("Labels") or {}
        if GPUS not in labels:
            raise JobNotFound(
                f"container {name!r} is not a platform job (it has no {GPUS} label); "
                "tpnode-tui leaves containers it did not account for alone"
            )
        return data

    def _said(self, e: DockerError) -> str:
        """What the engine answered, never empty: something that is not a Docker
        engine (a proxy, another web server) answers with a bare status."""
        return str(e.message or "").strip() or (f"HTTP {e.status} with no explanation; is {self.host} a Docker engine?")

    def _engine_error(self, doing: str, e: DockerError) -> TpnodeError:
        return TpnodeError(f"{doing}: the Docker engine said: {self._said(e)}")

    async def _one(self, container_id: str, name: str) -> JobState:
        states = await self._read({"label": [GPUS], "id": [container_id]})
        if not states:
            raise JobNotFound(f"container {name!r} is gone from {self.host}")
        return states[0]

    # ---------------------------------------------------------------- create

    async def check(self, spec: JobSpec) -> None:
        """Everything but the engine's own answers (whether the image is here)."""
        if self.fence_policy == "required" and self.gpu_mode == "none" and spec.kind == "job":
            raise ConfigError(
                f"job {spec.run_id!r} cannot be fenced to its cards ({NO_CARD}), and TUNEPLANE_FENCE=required "
                "starts no job that is not; give containers their cards (TUNEPLANE_DOCKER_GPU_MODE=nvidia)"
            )
        if spec.slice is not None:  # the slice is chosen later; any will do to check the rest
            self._config(replace(spec, slices=(_SOME_SLICE,)), [])
        else:
            self._config(spec, list(range(max(spec.cards, 1))))

    def _config(self, spec: JobSpec, gpus: list[int]) -> dict[str, Any]:
        """The engine's container config for ``spec`` on ``gpus``, or BadRequest.

        This is all a job gets: its image and command, its labels, and its
        cards (device requests naming them, or two variables). Never a bind
        mount, a device, a capability, privileges or a host namespace, whatever
        the spec says: a caller gets only what the product offers. The caller's
        environment, directory and account (``spec.env``, ``cwd``, ``run_as``)
        are for process jobs and never reach a container, which runs as its
        image's own user: with nothing of the host mounted, the caller's uid
        would open nothing more, and images expect their own users.
        """
        check_run_id(spec.run_id)
        check_kind(spec)
        if not gpus and not spec.slices:
            raise BadRequest(f"job {spec.run_id!r} was given no cards; a job needs at least one")
        check_cards(gpus)
        check_slices(gpus, spec.slices)
        if spec.kind == "reservation":
            image, command = self._hold(spec)
        else:
            if not spec.image:
                raise BadRequest(
                    f"job {spec.run_id!r} names no image; the docker runtime runs every job "
                    "in an image (give one, e.g. --image IMAGE)"
                )
            image, command = spec.image, list(spec.command)
        config: dict[str, Any] = {
            "Image": image,
            "Labels": job_labels(spec, gpus),
            # Namespaces of its own even where the engine's defaults would share
            # the host's: its cgroups on a cgroup v1 host, its IPC everywhere.
            "HostConfig": {"CgroupnsMode": "private", "IpcMode": "private"},
        }
        if command:
            config["Cmd"] = command
        # A MIG slice is named by its MIG device's uuid, as the NVIDIA container
        # toolkit takes it (docker run --gpus device=MIG-...); a card by its index.
        ids = [s.uuid for s in spec.slices] if spec.slices else [str(i) for i in gpus]
        devices = ",".join(ids)
        if self.gpu_mode == "nvidia":
            config["HostConfig"]["DeviceRequests"] = [{"Driver": "nvidia", "DeviceIDs": ids, "Capabilities": [["gpu"]]}]
        elif self.gpu_mode == "env":
            # The nvidia runtime shows the container only these cards, numbered
            # from 0, so CUDA's list counts inside the container: host indices
            # there would hide cards 2,3 of a job given [2, 3] entirely. A MIG
            # device's uuid means the same inside and out.
            inside = devices if spec.slices else ",".join(str(i) for i in range(len(gpus)))
            config["Env"] = [f"NVIDIA_VISIBLE_DEVICES={devices}", f"CUDA_VISIBLE_DEVICES={inside}"]
        return config

    def _hold(self, spec: JobSpec) -> tuple[str, list[str]]:
        """A reservation's workload: sleep until it expires, then exit and free the cards."""
        if spec.command:
            raise BadRequest(
                f"reservation {spec.run_id!r} was given a command; a reservation runs none, "
                "it only holds its cards until it expires"
            )
        seconds = math.ceil(hold_seconds(spec))
        return spec.image or self.hold_image, ["sleep", str(seconds)]

    async def create(self, spec: JobSpec, gpus: list[int]) -> JobState:
        config = self._config(spec, gpus)
        name = container_name(spec.run_id)
        async with self._engine() as docker:
            try:
                container = await docker.containers.create(config, name=name)
            except DockerError as e:
                if e.status == 404:
                    image = config["Image"]
                    raise Conflict(
                        f"image {image!r} is not on this node; pull it first (docker pull {image})"
                    ) from None
                if e.status == 409:
                    raise Conflict(
                        f"a container named {name!r} already exists, so run id "
                        f"{spec.run_id!r} is taken; use another run id or reclaim the old job"
                    ) from None
                raise self._engine_error(f"could not create job {spec.run_id!r}", e) from None
        return await self._one(container.id, name)

    # ----------------------------------------------------------- start / run

    async def start(self, name: str) -> JobState:
        """Start a created job; if it cannot start, remove it so it holds nothing.

        Only a *created* job is started. An exited one gave its cards back when
        it ended and they may belong to another job now: starting it again
        would take them without the allocator's lock. One already running is
        left as it is.

        A container that failed to start still carries its labels and would
        hold its cards until somebody noticed. If even the removal fails the
        error says so, because then the cards are still held.
        """
        data = await self._platform_container(name)
        status = (data.get("State") or {}).get("Status")
        if status in LIVE_STATUSES and status != "created":
            return await self._one(data["Id"], name)
        if status != "created":
            raise Conflict(
                f"job {name!r} has already run ({status}); its cards may have gone to "
                "another job since, so launch it afresh instead of starting it again"
            )
        async with self._engine() as docker:
            container = docker.containers.container(data["Id"])
            try:
                await container.start()
            except DockerError as e:
                try:
                    await container.delete(force=True, timeout=_call_timeout())
                except DockerError as removal:
                    raise TpnodeError(
                        f"job {name!r} could not start: {self._said(e)}. Removing it failed too "
                        f"({self._said(removal)}), so it still holds its cards; "
                        f"remove it with: docker rm -f {name}"
                    ) from None
                raise TpnodeError(
                    f"job {name!r} could not start: {self._said(e)}. Its container was removed, so it holds no cards."
                ) from None
        return await self._one(data["Id"], name)

    async def run(self, spec: JobSpec, gpus: list[int]) -> JobState:
        state = await self.create(spec, gpus)
        return await self.start(state.name)

    # ---------------------------------------------------------------- extend

    async def extend(self, name: str, expires_at: float) -> JobState:
        """Move a live reservation's expiry. Called under the allocation lock.

        Labels cannot change, so a new holding container takes over: the same
        run id, cards, owner, uid and lease token, the new expiry, and a
        name of its own (:func:`extension_name`). It is created and started
        while the old one still holds the cards, and only then is the old one
        removed, so the cards are held by one or both all along; two live
        containers of one run id count as one job. If the new one cannot be
        made or started, the old one stays as it was and the error is raised.
        """
        data = await self._platform_container(name)
        config = data.get("Config") or {}
        facts = parse_labels(config.get("Labels") or {}, default_run_id=name)
        status = (data.get("State") or {}).get("Status")
        if facts.kind != "reservation":
            raise Conflict(f"{facts.run_id} is a job, not a reservation: it ends when its command does")
        if status not in LIVE_STATUSES:
            raise Conflict(f"reservation {facts.run_id} has ended; reserve the cards again")
        if facts.problems:
            raise Conflict(
                f"reservation {facts.run_id} has labels that cannot all be read "
                f"({'; '.join(facts.problems)}), so no container can take over exactly its cards; "
                "reserve the cards afresh once it ends"
            )
        spec = JobSpec(
            run_id=facts.run_id,
            cards=len(facts.gpus) or len(facts.slices),
            kind="reservation",
            owner=facts.owner,
            uid=facts.uid,
            lease_token=facts.lease_token,
            expires_at=expires_at,
            image=config.get("Image") or None,  # the image holding it now is certainly here
            slices=facts.slices,
        )
        successor = extension_name(facts.run_id)
        async with self._engine() as docker:
            try:
                created = await docker.containers.create(self._config(spec, list(facts.gpus)), name=successor)
            except DockerError as e:
                raise self._engine_error(f"could not extend reservation {facts.run_id}", e) from None
        state = await self.start(successor)  # removed again if it cannot start
        await self._retire(facts.run_id, keep=created.id)
        return state

    async def _retire(self, run_id: str, keep: str) -> None:
        """Remove the containers a reservation's successor took over from.

        They only sleep, so they are killed, not given a grace. One that cannot
        be removed is only logged: the extension stands, and the old one
        still ends by itself at its own, earlier, expiry.
        """
        async with self._engine() as docker:
            try:
                listed = await docker.containers.list(all=True, filters={"label": [GPUS, f"{RUN_ID}={run_id}"]})
            except DockerError as e:
                log.warning("extending %s: could not list what it took over from: %s", run_id, e.message)
                return
            for container in listed:
                item = _fields(container, _LIST_FIELDS)
                facts = parse_labels(item.get("Labels") or {}, default_run_id=run_id)
                if item.get("Id") == keep or facts.kind != "reservation":
                    continue
                try:
                    await docker.containers.container(item["Id"]).delete(force=True, timeout=_call_timeout())
                except DockerError as e:
                    if e.status != 404:
                        log.warning(
                            "extending %s: could not remove %s, which ends by itself: %s",
                            run_id,
                            item["Id"][:12],
                            e.message,
                        )

    # -------------------------------------------------------- stop / remove

    async def stop(self, name: str) -> None:
        """Stop a job; one that was created but never started is removed instead.

        A launcher that dies between create and start leaves a container in
        state "created": it holds its cards, ``docker stop`` leaves it as it is,
        and reclaim refuses it as live, so nothing but a hand-typed ``docker rm``
        would ever free those cards. Nothing has run in it, so removing it loses
        nothing. If it was started meanwhile, it is stopped like any other job.
        """
        data = await self._platform_container(name)
        async with self._engine() as docker:
            if (data.get("State") or {}).get("Status") == "created":
                try:
                    await docker.containers.container(data["Id"]).delete(timeout=_call_timeout())
                    return
                except DockerError as e:
                    if e.status == 404:
                        return
                    if e.status != 409:  # 409: it is running now
                        raise self._engine_error(f"could not remove unstarted job {name!r}", e) from None
            try:
                await docker.containers.container(data["Id"]).stop(
                    t=self.stop_timeout_s,
                    timeout=_call_timeout(extra_s=self.stop_timeout_s),
                )
            except DockerError as e:
                if e.status == 404:
                    return  # gone already: nothing left to stop
                raise self._engine_error(f"could not stop job {name!r}", e) from None

    async def output(self, job: JobState, after: Optional[str], most: int) -> JobOutput:
        """Refused: the engine keeps a container's output, and aiodocker reads it
        either whole, into memory, or followed, without an end while the container
        runs (the engine's ``until`` does not end it): a page of it cannot be read
        without the agent, root, holding as much of it as a job cares to write.
        Whoever may use the engine reads it there."""
        raise Conflict(
            f"{job.name} runs in a container, whose output the Docker engine keeps; this node does not read it "
            f"for you: an account that may use the engine reads it with docker logs {job.name}"
        )

    async def remove(self, name: str) -> None:
        await self._delete(name, (await self._platform_container(name))["Id"])

    async def _delete(self, name: str, container_id: str) -> None:
        async with self._engine() as docker:
            try:
                await docker.containers.container(container_id).delete(timeout=_call_timeout())
            except DockerError as e:
                if e.status == 404:
                    return
                if e.status == 409 and "already in progress" in str(e.message):
                    return  # another reclaim is removing it right now: the outcome is the same
                if e.status == 409:
                    raise Conflict(f"job {name!r} is still running; stop it before removing it") from None
                raise self._engine_error(f"could not remove job {name!r}", e) from None

    async def remove_exited(self, jobs: Sequence[JobState]) -> list[str]:
        """Remove these exited containers, one call each (the engine removes one at a
        time), for REMOVING_S at most; a name that is another container by now is
        passed over."""
        removed: list[str] = []
        until = time.monotonic() + REMOVING_S
        for job in jobs:
            if time.monotonic() > until:
                break
            try:
                found = (await self._platform_container(job.name))["Id"]
                if job.container_id not in (None, found):
                    continue
                await self._delete(job.name, found)
            except (JobNotFound, Conflict):
                continue  # gone meanwhile, or running: passed over
            removed.append(job.name)
        return removed

    async def close(self) -> None:
        if self._docker is not None:
            docker, self._docker = self._docker, None
            await docker.close()


#: what a slice job is checked with before its slice is chosen
_SOME_SLICE = SliceRef(0, "MIG-00000000-0000-0000-0000-000000000000")


def _fields(container: DockerContainer, keys: tuple[str, ...]) -> dict[str, Any]:
    """The engine's answer about a container, as a plain dict of the keys used here."""
    return {k: container[k] for k in keys if k in container}


@dataclass(frozen=True)
class _Run:
    """What the engine says of a container's run: from its list entry, or inspected."""

    status: str
    image: Optional[str]
    command: tuple[str, ...]
    exit_code: Optional[int] = None
    started_at: Optional[float] = None
    pid: Optional[int] = None


def _listed_run(item: dict[str, Any]) -> _Run:
    """What the container list says: when it was made for its start, no pid, and
    the exit code only as its status words it."""
    status = str(item.get("State") or "")
    created = item.get("Created")
    return _Run(
        status=status,
        image=item.get("Image") or None,
        command=_split_command(str(item.get("Command") or "")),
        exit_code=_exit_code(str(item.get("Status") or "")) if status == "exited" else None,
        started_at=float(created) if isinstance(created, (int, float)) and not isinstance(created, bool) else None,
    )


def _inspected_run(detail: dict[str, Any], listed: _Run) -> _Run:
    """What inspecting the container says, the list's words standing in for what it leaves out."""
    state = detail.get("State") or {}
    status = str(state.get("Status") or listed.status)
    path = detail.get("Path")
    return _Run(
        status=status,
        image=(detail.get("Config") or {}).get("Image") or listed.image,
        command=tuple(str(a) for a in ([path] if path else []) + list(detail.get("Args") or [])),
        exit_code=state.get("ExitCode") if status == "exited" else listed.exit_code,
        started_at=_parse_time(state.get("StartedAt")),
        pid=state.get("Pid") or None,
    )


def _job_state(item: dict[str, Any], detail: Optional[dict[str, Any]]) -> JobState:
    """One listed container as a JobState; ``detail`` (inspect) fills in what the list lacks."""
    names = item.get("Names") or []
    name = names[0].lstrip("/") if names else str(item.get("Id", ""))[:12]
    facts = parse_labels(item.get("Labels") or {}, default_run_id=name)
    run = _listed_run(item)
    if detail is not None:
        run = _inspected_run(detail, run)
    return JobState(
        name=name,
        run_id=facts.run_id,
        gpus=facts.gpus,
        status=run.status,
        kind=facts.kind,
        owner=facts.owner,
        image=run.image,
        command=run.command,
        started_at=run.started_at,
        expires_at=facts.expires_at,
        exit_code=run.exit_code,
        pid=run.pid,
        lease_token=facts.lease_token,
        problems=facts.problems,
        uid=facts.uid,
        container_id=str(item.get("Id") or "") or None,
        slices=facts.slices,
        device_fence=_device_fence(detail if run.status in LIVE_STATUSES else None, facts.gpus, facts.slices),
    )


def _device_fence(detail: Optional[dict[str, Any]], gpus: tuple[int, ...], slices: tuple[SliceRef, ...]) -> DeviceFence:
    """Whether the container is fenced to what its labels say it holds, as the engine's
    inspection of it says (see :mod:`.dockerfence`). Only a container still live when
    inspected says: one listed as running may have ended by the time it is inspected,
    and an ended one is said to be ended whatever its HostConfig holds."""
    if detail is None:
        return DeviceFence.missing(ENDED)
    return container_fence(detail, [s.uuid for s in slices] if slices else [str(i) for i in gpus])
