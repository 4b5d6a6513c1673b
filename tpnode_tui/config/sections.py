"""The settings' sections, as an operator looks for them: the cards, the probe,
the runtime, the state dir, the lock, the agent, the policy, the limits of
what one request and one account may ask, triage, usage, notifications, the
fleet and the web page.

Each setting is declared once, in its section: its type and default, its
TUNEPLANE_* variable, its flag, its help and its reader. The CLI's flags, the
table in docs/configuration.md (a test compares) and the checks are all made from these.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tpnode_tui.config import readers as read
from tpnode_tui.config.declared import setting

# the defaults live where the quickest command reads one without this module; said here too
from tpnode_tui.config.defaults import DEFAULT_AGENT_SOCKET as DEFAULT_AGENT_SOCKET
from tpnode_tui.config.defaults import DEFAULT_STATE_DIR as DEFAULT_STATE_DIR
from tpnode_tui.config.nodefile import DEFAULT_NODE_ENV_FILE, NODE_ENV_FILE_VARIABLE
from tpnode_tui.config.redact import redact_url
from tpnode_tui.config.ssh import SshTarget
from tpnode_tui.model.errors import ConfigError

DEFAULT_OPERATORS_GROUP = "tpnode-operators"

#: How the docker runtime may give a container its cards (see TUNEPLANE_DOCKER_GPU_MODE).
DOCKER_GPU_MODES = ("nvidia", "env", "none")

#: Whether the runtime fences each job to its cards' device files (see TUNEPLANE_FENCE).
FENCE_POLICIES = ("auto", "required", "off")

#: XIDs after which a card is drained until it is reset (79: until the node
#: reboots), from NVIDIA's XID catalog: resolution "reset the GPU" or worse.
DEFAULT_XID_DRAIN = (46, 48, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158)

#: a probe that may take longer than this leaves the dashboard frozen for as long
MAX_PROBE_TIMEOUT_S = 600.0

#: where tpnode-tui web listens unless told otherwise: this machine only (exposing it is the operator's choice)
DEFAULT_WEB_LISTEN = ("127.0.0.1", 8470)

#: the longest drain reason taken by default: it is shown on a tile and in every log line about the card
DEFAULT_MAX_REASON_CHARS = 500


@dataclass(frozen=True)
class CardSettings:
    """Which cards the node has, and when one counts as in use or may be handed out."""

    count: int = setting(
        0,
        "TUNEPLANE_LOCAL_GPU_COUNT",
        "card count; 0 asks the driver",
        read.whole(0, read.MAX_CARDS),
        flag="--gpu-count",
        metavar="N",
    )
    profile: str = setting(
        "", "TUNEPLANE_CLUSTER_PROFILE", "hardware series to report; empty asks the driver for the card name", read.text
    )
    check_external: bool = setting(
        True, "TUNEPLANE_LOCAL_CHECK_EXTERNAL_GPUS", "count cards used from outside the platform as held", read.switch
    )
    check_health: bool = setting(
        True, "TUNEPLANE_LOCAL_CHECK_GPU_HEALTH", "keep unhealthy cards from being handed out", read.switch
    )
    mem_busy_mib: int = setting(
        512,
        "TUNEPLANE_MEM_BUSY_MIB",
        "memory used (MiB) from which a card counts as in use",
        read.whole(1),
        flag="--mem-busy-mib",
        metavar="MIB",
    )
    allow_unverified: bool = setting(
        False,
        "TUNEPLANE_ALLOW_UNVERIFIED",
        "hand out cards even while use from outside cannot be probed",
        read.switch,
        flag="--allow-unverified",
    )


@dataclass(frozen=True)
class ProbeSettings:
    """What reads the cards from the driver, and how long it may take."""

    kind: str = setting(
        "auto",
        "TUNEPLANE_PROBE",
        "nvml, smi, simulated:PATH or auto (NVML, then nvidia-smi, else probe-blind)",
        read.probe_source,
        flag="--probe",
        metavar="P",
    )
    timeout_s: float = setting(
        10.0,
        "TUNEPLANE_PROBE_TIMEOUT_S",
        "seconds a probe may take before the node counts as probe-blind",
        read.decimal(0.1, MAX_PROBE_TIMEOUT_S),
    )
    gpus_dir: Path = setting(
        Path("/proc/driver/nvidia/gpus"),
        "TUNEPLANE_NVIDIA_GPUS_DIR",
        "where the driver describes each card (the nvidia-smi probe reads its device minor there)",
        read.absolute_path,
    )

    @property
    def simulated_path(self) -> Optional[Path]:
        """The scene file a simulated probe reads; None for a real probe."""
        if self.kind.startswith("simulated:"):
            return Path(self.kind.split(":", 1)[1])
        return None


@dataclass(frozen=True)
class RuntimeSettings:
    """What runs the jobs, and how a container is given its cards."""

    kind: str = setting(
        "auto",
        "TUNEPLANE_RUNTIME",
        "docker, process or auto (docker when an engine socket exists)",
        read.choice("docker", "process", "auto"),
        flag="--runtime",
        metavar="R",
    )
    docker_gpu_mode: str = setting(
        "nvidia",
        "TUNEPLANE_DOCKER_GPU_MODE",
        "nvidia (device requests), env (NVIDIA_VISIBLE_DEVICES with host ids, CUDA_VISIBLE_DEVICES "
        "from 0) or none (labels only)",
        read.choice(*DOCKER_GPU_MODES),
        flag="--docker-gpu-mode",
        metavar="M",
    )
    hold_image: str = setting(
        "busybox:latest",
        "TUNEPLANE_HOLD_IMAGE",
        "image whose sleep holds a reservation's cards (docker)",
        read.text,
        flag="--hold-image",
        metavar="IMG",
    )
    fence: str = setting(
        "auto",
        "TUNEPLANE_FENCE",
        "auto (fence each job to its cards' device files where the node can), required (refuse a job "
        "that cannot be fenced) or off",
        read.choice(*FENCE_POLICIES),
    )
    proc_devices: Path = setting(
        Path("/proc/devices"),
        "TUNEPLANE_PROC_DEVICES",
        "where the kernel lists its devices' majors (the fence reads nvidia-uvm's and nvidia-caps')",
        read.absolute_path,
    )
    mig_minors: Path = setting(
        Path("/proc/driver/nvidia-caps/mig-minors"),
        "TUNEPLANE_MIG_MINORS",
        "where the driver lists its MIG capabilities' minors (the fence of a MIG slice)",
        read.absolute_path,
    )


@dataclass(frozen=True)
class StateSettings:
    """The directory every allocator on the node shares, and the node's log in it."""

    dir: Path = setting(
        Path(DEFAULT_STATE_DIR),
        "TUNEPLANE_STATE_DIR",
        "lock file and the process runtime's state file and logs",
        read.absolute_path,
        flag="--state-dir",
        metavar="DIR",
    )
    log_max_mb: float = setting(
        10.0,
        "TUNEPLANE_LOG_MAX_MB",
        "size at which the node's event and audit log is rotated",
        read.decimal(0.01, 100_000),
    )
    log_account_mb: float = setting(
        2.0,
        "TUNEPLANE_LOG_ACCOUNT_MB",
        "size at which one ordinary account's own part of the audit log is rotated",
        read.decimal(0.01, 100_000),
    )


@dataclass(frozen=True)
class LockSettings:
    """The allocation lock: flock in the state dir, or a Redis lease."""

    redis_url: Optional[str] = setting(
        None,
        "TUNEPLANE_REDIS_URL",
        "use a Redis lease as the cross-process lock instead of flock",
        read.redis_url,
        flag="--redis-url",
        metavar="URL",
        secret=True,
    )
    lease_ms: int = setting(
        120_000,
        "TUNEPLANE_LOCK_LEASE_MS",
        "Redis lease length; renewed every third of it",
        read.whole(100),
        flag="--lock-lease-ms",
        metavar="MS",
    )
    retry_ms: int = setting(
        100, "TUNEPLANE_LOCK_RETRY_MS", "how often a waiting allocation retries the lock", read.whole(1)
    )

    @property
    def redis_url_safe(self) -> Optional[str]:
        """The Redis URL without its password, for logs, errors and the header."""
        return redact_url(self.redis_url) if self.redis_url else None


@dataclass(frozen=True)
class AgentSettings:
    """The node's agent: whether to use it, where it listens, and what else it serves."""

    mode: str = setting(
        "auto",
        "TUNEPLANE_AGENT",
        "auto (the agent if it answers, else in-process where allowed), on or off",
        read.choice("auto", "on", "off"),
        flag="--agent",
        metavar="MODE",
    )
    socket: Path = setting(
        Path(DEFAULT_AGENT_SOCKET),
        "TUNEPLANE_AGENT_SOCKET",
        "the node agent's Unix socket",
        read.absolute_path,
        flag="--agent-socket",
        metavar="PATH",
    )
    #: the node's own settings, which the agent's unit reads too (config/nodefile.py)
    env_file: Path = setting(
        Path(DEFAULT_NODE_ENV_FILE),
        NODE_ENV_FILE_VARIABLE,
        "the node's settings file (the agent unit's EnvironmentFile), beneath the environment",
        read.absolute_path,
    )
    #: the node to talk to over SSH; None: this machine's agent (or this process)
    host: Optional[SshTarget] = setting(
        None,
        "TUNEPLANE_HOST",
        "reach another node's agent over SSH: [ssh://][user@]host[:port]; empty: this machine",
        read.ssh_target,
        flag="--host",
        metavar="[USER@]HOST[:PORT]",
    )
    #: (host, port) of the Prometheus endpoint; None: off
    metrics_addr: Optional[tuple[str, int]] = setting(
        None,
        "TUNEPLANE_METRICS_ADDR",
        "HOST:PORT where the agent serves Prometheus /metrics; empty: off",
        read.address,
    )


@dataclass(frozen=True)
class PolicySettings:
    """Who may do what: the operators, the card limits, the images jobs may use."""

    operators_group: str = setting(
        DEFAULT_OPERATORS_GROUP,
        "TUNEPLANE_OPERATORS_GROUP",
        "members may stop, extend and reclaim anyone's jobs",
        read.group_name,
    )
    max_cards_per_user: Optional[int] = setting(
        None,
        "TUNEPLANE_MAX_CARDS_PER_USER",
        "most cards one account may hold at once; empty: no limit",
        read.card_limit,
    )
    #: account name or "@group" -> most cards
    max_cards_for: tuple[tuple[str, int], ...] = setting(
        (), "TUNEPLANE_MAX_CARDS_FOR", "per-account or per-group limits, e.g. alice=4,@students=1", read.card_limits
    )
    images: tuple[str, ...] = setting(
        (), "TUNEPLANE_IMAGES", "comma-separated glob patterns of images jobs may use; empty: any", read.patterns
    )


@dataclass(frozen=True)
class LimitSettings:
    """How much one request, and one account, may ask of the agent: each refused
    beyond its limit with one line naming it, and nothing changed.

    The agent runs as root for accounts that need not trust each other, so
    what one of them sends is bounded before it is held, kept or echoed: a
    request's size and each text in it, what waits in the queue, how long a
    reservation lasts, how much one answer from the log holds, how many
    connections an account keeps open at once and opens a second
    (docs/architecture.md, "The door"), and how many of its exited jobs the
    agent keeps listed.
    """

    body_kib: int = setting(
        64, "TUNEPLANE_MAX_BODY_KIB", "largest request body the agent reads (KiB)", read.whole(4, 16 * 1024)
    )
    command_kib: int = setting(
        16,
        "TUNEPLANE_MAX_COMMAND_KIB",
        "largest command a launch may give, all its words together (KiB, UTF-8)",
        read.whole(1, 1024),
    )
    command_args: int = setting(
        512, "TUNEPLANE_MAX_COMMAND_ARGS", "most words a launch's command may have", read.whole(1, 100_000)
    )
    env_vars: int = setting(
        256, "TUNEPLANE_MAX_ENV_VARS", "most environment variables a launch may send", read.whole(0, 100_000)
    )
    env_kib: int = setting(
        32,
        "TUNEPLANE_MAX_ENV_KIB",
        "largest environment a launch may send, names and values together (KiB, UTF-8)",
        read.whole(1, 1024),
    )
    cwd_bytes: int = setting(
        4096, "TUNEPLANE_MAX_CWD_BYTES", "longest working directory a launch may give (bytes)", read.whole(1, 65_536)
    )
    reason_chars: int = setting(
        DEFAULT_MAX_REASON_CHARS,
        "TUNEPLANE_MAX_REASON_CHARS",
        "longest drain reason (characters)",
        read.whole(1, 10_000),
    )
    queued_per_user: int = setting(
        20,
        "TUNEPLANE_MAX_QUEUED_PER_USER",
        "most launches one ordinary account may have queued at once",
        read.whole(0, 100_000),
    )
    queued: int = setting(
        200, "TUNEPLANE_MAX_QUEUED", "most launches queued at once, everyone's together", read.whole(0, 100_000)
    )
    duration_days: float = setting(
        366.0,
        "TUNEPLANE_MAX_DURATION_DAYS",
        "longest a reservation may be held, and may be extended to, from now (days)",
        read.decimal(0.001, 3660),
    )
    page: int = setting(
        1000,
        "TUNEPLANE_MAX_PAGE",
        "most log entries one events or audit answer holds (older ones: ask again with before), and most rows "
        "one usage answer holds",
        read.whole(1, 100_000),
    )
    connections_per_user: int = setting(
        32,
        "TUNEPLANE_MAX_CONNECTIONS_PER_USER",
        "most connections one ordinary account may hold open to the agent at once",
        read.whole(1, 100_000),
    )
    connection_rate_per_user: int = setting(
        100,
        "TUNEPLANE_MAX_CONNECTION_RATE_PER_USER",
        "most new connections one ordinary account may open to the agent a second (as many at once, then that "
        "many a second)",
        read.whole(1, 1_000_000),
    )
    exited_per_user: int = setting(
        50,
        "TUNEPLANE_MAX_EXITED_PER_USER",
        "most exited jobs the agent keeps listed per account; the oldest beyond it go to the usage ledger and "
        "are removed with their logs",
        read.whole(0, 100_000),
    )

    @property
    def duration_s(self) -> float:
        return self.duration_days * 86400.0


@dataclass(frozen=True)
class TriageSettings:
    """What the node does about what it sees: XIDs, idle reservations, evictions."""

    xid_drain: tuple[int, ...] = setting(
        DEFAULT_XID_DRAIN,
        "TUNEPLANE_XID_DRAIN",
        "XIDs that drain their card until an operator undrains it, or a check puts it back (none: none do)",
        read.xids,
    )
    xid_ignore: tuple[int, ...] = setting(
        (), "TUNEPLANE_XID_IGNORE", "XIDs that are only logged: not shown on the card, never drained", read.xids
    )
    idle_reservation_min: int = setting(
        30,
        "TUNEPLANE_IDLE_RESERVATION_MIN",
        "minutes a reservation's owner may leave its cards unused before it is marked idle",
        read.whole(1, 366 * 24 * 60),
    )
    evict_grace_s: float = setting(
        10.0,
        "TUNEPLANE_EVICT_GRACE_S",
        "seconds an evicted process has between SIGTERM and being reported (or SIGKILLed)",
        read.decimal(0.1, 3600),
    )
    check_timeout_s: float = setting(
        30.0,
        "TUNEPLANE_CHECK_TIMEOUT_S",
        "seconds a check's NVML reading (tier A, a process of its own) may take before it is killed",
        read.decimal(1, MAX_PROBE_TIMEOUT_S),
    )
    #: the words of the command; () for none
    check_command: tuple[str, ...] = setting(
        (),
        "TUNEPLANE_CHECK_COMMAND",
        "a card's own test, run by a check after NVML's answers pass ({uuid} and {card} put in); exit 0 passes",
        read.command,
    )
    check_command_timeout_s: float = setting(
        1800.0,
        "TUNEPLANE_CHECK_COMMAND_TIMEOUT_S",
        "seconds the check command may run before it is killed and the card fails its check",
        read.decimal(1, 7 * 86400),
    )
    return_after_check: bool = setting(
        False,
        "TUNEPLANE_RETURN_AFTER_CHECK",
        "a card the node drained itself (an XID, a failed check) goes back into service once a check passes",
        read.switch,
    )
    boot_id: Path = setting(
        Path("/proc/sys/kernel/random/boot_id"),
        "TUNEPLANE_BOOT_ID",
        "where the kernel tells this boot's id: a drain for an XID that needs a reboot lasts until it changes",
        read.absolute_path,
    )

    def __post_init__(self) -> None:
        """An XID both drained and ignored would be decided by whichever rule
        happens to be read first: refused, so the operator decides."""
        both = set(self.xid_drain) & set(self.xid_ignore)
        if both:
            raise ConfigError(
                f"TUNEPLANE_XID_DRAIN and TUNEPLANE_XID_IGNORE both name XID {', '.join(map(str, sorted(both)))}; "
                "an XID is either drained or ignored"
            )


@dataclass(frozen=True)
class UsageSettings:
    """Fair share: how long the usage ledger keeps who held which cards, and what
    the node does about cards held and not used (measured as the idle mark of
    TUNEPLANE_IDLE_RESERVATION_MIN is)."""

    days: int = setting(
        90,
        "TUNEPLANE_USAGE_DAYS",
        "days the usage ledger keeps; older holds and minutes are pruned",
        read.whole(1, 3650),
    )
    holds_per_user: int = setting(
        10_000,
        "TUNEPLANE_USAGE_HOLDS_PER_USER",
        "most ended holds the usage ledger keeps per account; the oldest beyond it are pruned",
        read.whole(1, 10_000_000),
    )
    #: None: reservations are never given back for being idle
    reclaim_idle_after_s: Optional[float] = setting(
        None,
        "TUNEPLANE_RECLAIM_IDLE_AFTER",
        "a reservation with no process of its owner on its cards this long is warned, then released; off: never",
        read.duration_or_off,
    )
    reclaim_grace_s: float = setting(
        15 * 60.0,
        "TUNEPLANE_RECLAIM_GRACE",
        "how long a reservation warned for being idle has to be used or extended before it is released",
        read.duration,
    )
    #: None: no job is flagged. An hour by default: flagging stops nothing, and
    #: data loading, a checkpoint or a paused debugger seldom keep every card of
    #: a job at exactly 0 % for that long, while a job forgotten in a notebook or
    #: stuck in a deadlock is told the same day.
    flag_idle_job_after_s: Optional[float] = setting(
        3600.0,
        "TUNEPLANE_FLAG_IDLE_JOB_AFTER",
        "a job whose cards sit at 0 % utilisation with memory held this long is flagged idle-held; off: never",
        read.duration_or_off,
    )


@dataclass(frozen=True)
class NotifySettings:
    """What the agent tells each account, and how much: a reservation about to end,
    a queued launch placed, a job ended, idle reservations, drains, intruders
    (docs/notifications.md). Everything one account can make grow is bounded."""

    before_end_s: Optional[float] = setting(
        10 * 60.0,
        "TUNEPLANE_NOTIFY_BEFORE_END",
        "how long before a reservation ends its owner is told, with the extend command to type; off: never",
        read.duration_or_off,
    )
    terminals: bool = setting(
        True,
        "TUNEPLANE_NOTIFY_TERMINALS",
        "tell an account on its own terminals where it allows messages (mesg y), as write(1) does",
        read.switch,
    )
    urls: int = setting(
        5,
        "TUNEPLANE_NOTIFY_MAX_URLS",
        "most notification URLs one account may keep (tpnode-tui notify add)",
        read.whole(0, 100),
    )
    queue: int = setting(
        20,
        "TUNEPLANE_NOTIFY_QUEUE",
        "most notices waiting to be sent to one account; the oldest is dropped, and counted, for a new one",
        read.whole(1, 10_000),
    )
    event_per_hour: int = setting(
        12,
        "TUNEPLANE_NOTIFY_EVENT_PER_HOUR",
        "most notices of one kind one account is sent in an hour; the rest are counted",
        read.whole(1, 10_000),
    )
    account_per_hour: int = setting(
        60,
        "TUNEPLANE_NOTIFY_ACCOUNT_PER_HOUR",
        "most notices one account is sent in an hour, all kinds together",
        read.whole(1, 100_000),
    )
    timeout_s: float = setting(
        30.0,
        "TUNEPLANE_NOTIFY_TIMEOUT_S",
        "seconds one send to an account's URLs may take before it is stopped",
        read.decimal(1, 600),
    )


@dataclass(frozen=True)
class FleetSettings:
    """Many nodes: where this node's agent publishes itself, under which name and how often."""

    url: Optional[str] = setting(
        None,
        "TUNEPLANE_FLEET_URL",
        "Redis the agent publishes its snapshot to, and tpnode-tui fleet reads",
        read.redis_url,
        secret=True,
    )
    #: empty: the host name (see :attr:`node`)
    node_name: str = setting(
        "", "TUNEPLANE_NODE_NAME", "this node's name in the fleet and in metrics; empty: the host name", read.node_name
    )
    publish_s: float = setting(
        10.0,
        "TUNEPLANE_FLEET_PUBLISH_S",
        "seconds between publications at most; 3 missed: unreachable",
        read.decimal(0.1, 300),
    )
    #: how the fleet should reach this node over SSH; None: its node name
    ssh_address: Optional[SshTarget] = setting(
        None,
        "TUNEPLANE_SSH_ADDRESS",
        "how others reach this node over SSH, as the fleet publishes it; empty: its name",
        read.ssh_target,
    )

    @property
    def url_safe(self) -> Optional[str]:
        """The fleet's URL without its password, for logs, errors and the header."""
        return redact_url(self.url) if self.url else None

    @property
    def node(self) -> str:
        """The node's name in the fleet and in metrics."""
        return self.node_name or socket.gethostname()


@dataclass(frozen=True)
class WebSettings:
    """The read-only web page (tpnode-tui web): where it listens, who may read it, what it shows."""

    listen: tuple[str, int] = setting(
        DEFAULT_WEB_LISTEN,
        "TUNEPLANE_WEB_LISTEN",
        "HOST:PORT the web page listens on (tpnode-tui web --listen overrides it)",
        read.listen_address,
    )
    #: None: no token asked for
    token: Optional[str] = setting(
        None,
        "TUNEPLANE_WEB_TOKEN",
        "a token the web page asks every reader for (at least 16 characters); empty: none",
        read.token,
        secret=True,
    )
    show_commands: bool = setting(
        False,
        "TUNEPLANE_WEB_SHOW_COMMANDS",
        "show other accounts' command lines and process names on the web page",
        read.switch,
    )
