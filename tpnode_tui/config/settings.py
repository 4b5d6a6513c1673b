"""Settings, from ``TUNEPLANE_*`` environment variables and command-line flags.

Every value is checked once, at start-up, and a bad one is refused with a
message that names the variable: a typo in a card count must not silently
become "detect", and a typo in a probe name must not silently become "blind".
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from tpnode_tui.model.errors import BadRequest, ConfigError

DEFAULT_STATE_DIR = "/var/lib/tpnode-tui"
DEFAULT_AGENT_SOCKET = "/run/tpnode-tui/agent.sock"
DEFAULT_OPERATORS_GROUP = "tpnode-operators"

#: How the docker runtime may give a container its cards (see TUNEPLANE_DOCKER_GPU_MODE).
DOCKER_GPU_MODES = ("nvidia", "env", "none")

#: more cards than any machine has; a larger count is a typo, not a node
MAX_CARDS = 1024

#: XIDs after which a card is drained until it is reset (79: until the node
#: reboots), from NVIDIA's XID catalog: resolution "reset the GPU" or worse.
DEFAULT_XID_DRAIN = (46, 48, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158)

#: Numbers are ASCII digits only: int() and float() also take "٣", "1_0" and
#: "inf", and a typo read as one of those must not become a count or a time.
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])")

#: a duration shorter than this is a typo (0.0001s), not a reservation
MIN_DURATION_S = 1.0
MAX_DURATION_S = 366 * 86400.0
#: a probe that may take longer than this leaves the dashboard frozen for as long
MAX_PROBE_TIMEOUT_S = 600.0
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def redact_url(url: str) -> str:
    """The URL with any password replaced, for logs, errors and the header.

    A password can stand in the authority (``redis://:pw@host``) or, for unix
    sockets, in the query (``unix:///run/redis.sock?password=pw``).
    """
    from urllib.parse import urlsplit, urlunsplit  # here: a command that asks the agent needs no URL

    parts = urlsplit(url)
    if parts.password is not None:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        user = parts.username or ""
        netloc = f"{user}:***@{host}" if user else f":***@{host}"
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", url)


def whole_number(text: str) -> Optional[int]:
    """``text`` as a whole number written in ASCII digits; None for anything else."""
    raw = str(text).strip()
    return int(raw) if _WHOLE.fullmatch(raw) else None


def decimal_number(text: str) -> Optional[float]:
    """``text`` as a plain decimal in ASCII digits (no exponent, inf or nan); None otherwise."""
    raw = str(text).strip()
    return float(raw) if _DECIMAL.fullmatch(raw) else None


def parse_duration(text: str) -> float:
    """'90s', '30m', '2h', '1h30m', '1d' or plain seconds -> seconds; BadRequest otherwise."""
    raw = text.strip().lower()
    seconds = decimal_number(raw)
    if seconds is None:
        parts = _DURATION_PART.findall(raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise BadRequest(f"duration {text!r} is not understood: use e.g. 90s, 30m, 2h, 1h30m or 1d")
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if not MIN_DURATION_S <= seconds <= MAX_DURATION_S:
        raise BadRequest(f"duration {text!r} must be at least 1s and at most a year")
    return seconds


def _parse_int(name: str, raw: str, minimum: int, maximum: Optional[int] = None) -> int:
    value = whole_number(raw)
    if value is None:
        raise ConfigError(f"{name}={raw!r} is not a whole number")
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}={raw!r} must be at most {maximum}")
    return value


def _parse_float(name: str, raw: str, minimum: float, maximum: float) -> float:
    value = decimal_number(raw)
    if value is None:
        raise ConfigError(f"{name}={raw!r} is not a number (write it like 2 or 0.5)")
    if not minimum <= value <= maximum:
        raise ConfigError(f"{name}={raw!r} must be from {minimum:g} to {maximum:g}")
    return value


def _parse_bool(name: str, raw: str) -> bool:
    word = str(raw).strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not one of true/false, yes/no, 1/0, on/off")


def _parse_choice(name: str, raw: str, choices: tuple[str, ...]) -> str:
    word = str(raw).strip().lower()
    if word not in choices:
        raise ConfigError(f"{name}={raw!r} is not one of {', '.join(choices)}")
    return word


def _parse_probe(name: str, raw: str) -> str:
    value = str(raw).strip()
    if value.lower() in ("nvml", "smi", "auto"):
        return value.lower()
    if value.startswith("simulated:") and value.split(":", 1)[1]:
        return value
    raise ConfigError(f"{name}={raw!r} is not one of nvml, smi, auto or simulated:PATH")


def _parse_redis_url(name: str, raw: str) -> Optional[str]:
    value = str(raw).strip()
    if not value:
        return None
    from urllib.parse import urlsplit

    if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"{name}={redact_url(value)!r} is not a redis://, rediss:// or unix:// URL")
    return value


def _parse_limits(name: str, raw: str) -> tuple[tuple[str, int], ...]:
    """ "alice=4,@students=1" -> (("alice", 4), ("@students", 1))."""
    limits: dict[str, int] = {}
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        who, sep, count = part.partition("=")
        who = who.strip()
        if not sep or not re.fullmatch(r"@?[A-Za-z_][A-Za-z0-9_.-]{0,63}\$?", who):
            raise ConfigError(f"{name}: {part!r} is not NAME=N or @GROUP=N (e.g. alice=4,@students=1)")
        limits[who] = _parse_int(f"{name} ({who})", count, 0, MAX_CARDS)
    return tuple(limits.items())


def _parse_xids(name: str, raw: str) -> tuple[int, ...]:
    """ "46,48, 79" -> (46, 48, 79); "none" -> ()."""
    if raw.strip().lower() == "none":
        return ()
    xids = []
    for part in (p.strip() for p in raw.split(",")):
        if part:
            xids.append(_parse_int(f"{name} ({part!r})", part, 1, 65535))
    return tuple(sorted(set(xids)))


#: a node name: what a host name may hold, so it reads the same in keys, labels and screens
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")


def _parse_addr(name: str, raw: str) -> Optional[tuple[str, int]]:
    """ "0.0.0.0:9400", "[::]:9400", "localhost:9400" or ":9400" (every address) -> (host, port)."""
    value = raw.strip()
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{name}={raw!r} is not HOST:PORT with a port from 1 to 65535 (e.g. 0.0.0.0:9400)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if any(ch.isspace() or ch in "/[]" for ch in host):
        raise ConfigError(f"{name}={raw!r}: {host!r} is not a host name or address")
    return host or "0.0.0.0", int(port)


#: what an SSH destination's parts may hold: nothing ssh could read as an option
#: (a leading "-") or that a shell or ssh_config would expand
_SSH_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?")
_SSH_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\]")


@dataclass(frozen=True)
class SshTarget:
    """A node reached over SSH, as ``docker -H ssh://`` writes it:
    ``[ssh://][user@]host[:port]``. Only SSH's own authentication is used: the
    node's agent names whoever SSH logged in, from the kernel, as for anyone."""

    host: str
    user: Optional[str] = None
    port: Optional[int] = None

    @classmethod
    def parse(cls, text: str, name: str = "the host") -> SshTarget:
        """Checked strictly (the text may come from another node's publication):
        a ConfigError naming ``name`` for anything but a destination."""
        value = text.strip().removeprefix("ssh://").rstrip("/")
        user, at, rest = value.rpartition("@")
        host, port = rest, None
        if rest.count(":") == 1 or (rest.startswith("[") and "]:" in rest):
            host, _, digits = rest.rpartition(":")
            if not digits.isascii() or not digits.isdigit() or not 1 <= int(digits) <= 65535:
                raise ConfigError(f"{name} {text!r}: the port must be a number from 1 to 65535")
            port = int(digits)
        if at and not _SSH_USER.fullmatch(user):
            raise ConfigError(f"{name} {text!r}: {user!r} is not a user name")
        if not _SSH_HOST.fullmatch(host):
            raise ConfigError(f"{name} {text!r} is not [ssh://][user@]host[:port]")
        return cls(host=host, user=user if at else None, port=port)

    def __str__(self) -> str:
        who = f"{self.user}@" if self.user else ""
        return f"{who}{self.host}" + ("" if self.port is None else f":{self.port}")


def _ssh_target(name: str, raw: str) -> Optional[SshTarget]:
    """An empty variable is unset; an empty flag (``--host "$NODE"`` with NODE
    unset) is a mistake, which must not quietly mean this machine's node."""
    if not raw.strip():
        if name.startswith("--"):
            raise ConfigError(f"{name} is empty: give [user@]host, or leave {name} out for this machine's node")
        return None
    return SshTarget.parse(raw, name)


def _node_name(name: str, raw: str) -> str:
    text = raw.strip()
    if text and not _NODE_NAME.fullmatch(text):
        raise ConfigError(
            f"{name}={raw!r} is not a node name: 1 to 253 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    return text


def _group_name(name: str, raw: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\$?", raw.strip()):
        raise ConfigError(f"{name}={raw!r} is not a group name")
    return raw.strip()


def _path(name: str, raw: str) -> Path:
    """Absolute, so that shells started in different directories share one
    lock, one state file and one agent instead of each finding its own."""
    if not raw.strip():
        raise ConfigError(f"{name} is empty")
    return Path(raw).expanduser().absolute()


def _whole(minimum: int, maximum: Optional[int] = None) -> Parse:
    return lambda name, raw: _parse_int(name, raw, minimum, maximum)


def _decimal(minimum: float, maximum: float) -> Parse:
    return lambda name, raw: _parse_float(name, raw, minimum, maximum)


def _choice(*choices: str) -> Parse:
    return lambda name, raw: _parse_choice(name, raw, choices)


def _text(name: str, raw: str) -> str:
    return raw.strip()


def _patterns(name: str, raw: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def _limit(name: str, raw: str) -> Optional[int]:
    return None if not raw.strip() else _parse_int(name, raw, 0, MAX_CARDS)


#: reads a setting's text; the first argument names where the text came from, for errors
Parse = Callable[[str, str], Any]


@dataclass(frozen=True)
class Declared:
    """How one setting is given: its variable, the flag that overrides it (if
    any), what it does in a few words (for the README and --help), and how its
    text is read (checked, or a ConfigError naming the variable)."""

    env: str
    help: str
    parse: Parse
    flag: Optional[str] = None
    metavar: Optional[str] = None


def _setting(
    default: Any, env: str, help: str, parse: Parse, *, flag: Optional[str] = None, metavar: Optional[str] = None
) -> Any:
    """One field of :class:`Settings`, declared once: its default here, the rest in its metadata."""
    return field(default=default, metadata={"declared": Declared(env, help, parse, flag, metavar)})


@dataclass(frozen=True)
class Settings:
    """The node's settings. Each is declared once, here: its type and default,
    its TUNEPLANE_* variable, its flag, its help and its parser; the CLI's
    flags, the README's table (a test compares) and the checks come from it."""

    local_gpu_count: int = _setting(
        0,
        "TUNEPLANE_LOCAL_GPU_COUNT",
        "card count; 0 asks the driver",
        _whole(0, MAX_CARDS),
        flag="--gpu-count",
        metavar="N",
    )
    cluster_profile: str = _setting(
        "", "TUNEPLANE_CLUSTER_PROFILE", "hardware series to report; empty asks the driver for the card name", _text
    )
    check_external: bool = _setting(
        True, "TUNEPLANE_LOCAL_CHECK_EXTERNAL_GPUS", "count cards used from outside the platform as held", _parse_bool
    )
    check_health: bool = _setting(
        True, "TUNEPLANE_LOCAL_CHECK_GPU_HEALTH", "keep unhealthy cards from being handed out", _parse_bool
    )
    mem_busy_mib: int = _setting(
        512,
        "TUNEPLANE_MEM_BUSY_MIB",
        "memory used (MiB) from which a card counts as in use",
        _whole(1),
        flag="--mem-busy-mib",
        metavar="MIB",
    )
    probe: str = _setting(
        "auto",
        "TUNEPLANE_PROBE",
        "nvml, smi, simulated:PATH or auto (NVML, then nvidia-smi, else probe-blind)",
        _parse_probe,
        flag="--probe",
        metavar="P",
    )
    probe_timeout_s: float = _setting(
        10.0,
        "TUNEPLANE_PROBE_TIMEOUT_S",
        "seconds a probe may take before the node counts as probe-blind",
        _decimal(0.1, MAX_PROBE_TIMEOUT_S),
    )
    runtime: str = _setting(
        "auto",
        "TUNEPLANE_RUNTIME",
        "docker, process or auto (docker when an engine socket exists)",
        _choice("docker", "process", "auto"),
        flag="--runtime",
        metavar="R",
    )
    docker_gpu_mode: str = _setting(
        "nvidia",
        "TUNEPLANE_DOCKER_GPU_MODE",
        "nvidia (device requests), env (NVIDIA_VISIBLE_DEVICES with host ids, CUDA_VISIBLE_DEVICES "
        "from 0) or none (labels only)",
        _choice(*DOCKER_GPU_MODES),
        flag="--docker-gpu-mode",
        metavar="M",
    )
    state_dir: Path = _setting(
        Path(DEFAULT_STATE_DIR),
        "TUNEPLANE_STATE_DIR",
        "lock file and the process runtime's state file and logs",
        _path,
        flag="--state-dir",
        metavar="DIR",
    )
    redis_url: Optional[str] = _setting(
        None,
        "TUNEPLANE_REDIS_URL",
        "use a Redis lease as the cross-process lock instead of flock",
        _parse_redis_url,
        flag="--redis-url",
        metavar="URL",
    )
    lock_lease_ms: int = _setting(
        120_000,
        "TUNEPLANE_LOCK_LEASE_MS",
        "Redis lease length; renewed every third of it",
        _whole(100),
        flag="--lock-lease-ms",
        metavar="MS",
    )
    lock_retry_ms: int = _setting(
        100, "TUNEPLANE_LOCK_RETRY_MS", "how often a waiting allocation retries the lock", _whole(1)
    )
    hold_image: str = _setting(
        "busybox:latest",
        "TUNEPLANE_HOLD_IMAGE",
        "image whose sleep holds a reservation's cards (docker)",
        _text,
        flag="--hold-image",
        metavar="IMG",
    )
    allow_unverified: bool = _setting(
        False,
        "TUNEPLANE_ALLOW_UNVERIFIED",
        "hand out cards even while use from outside cannot be probed",
        _parse_bool,
        flag="--allow-unverified",
    )
    agent: str = _setting(
        "auto",
        "TUNEPLANE_AGENT",
        "auto (the agent if it answers, else in-process where allowed), on or off",
        _choice("auto", "on", "off"),
        flag="--agent",
        metavar="MODE",
    )
    agent_socket: Path = _setting(
        Path(DEFAULT_AGENT_SOCKET),
        "TUNEPLANE_AGENT_SOCKET",
        "the node agent's Unix socket",
        _path,
        flag="--agent-socket",
        metavar="PATH",
    )
    operators_group: str = _setting(
        DEFAULT_OPERATORS_GROUP,
        "TUNEPLANE_OPERATORS_GROUP",
        "members may stop, extend and reclaim anyone's jobs",
        _group_name,
    )
    max_cards_per_user: Optional[int] = _setting(
        None, "TUNEPLANE_MAX_CARDS_PER_USER", "most cards one account may hold at once; empty: no limit", _limit
    )
    #: account name or "@group" -> most cards
    max_cards_for: tuple[tuple[str, int], ...] = _setting(
        (), "TUNEPLANE_MAX_CARDS_FOR", "per-account or per-group limits, e.g. alice=4,@students=1", _parse_limits
    )
    images: tuple[str, ...] = _setting(
        (), "TUNEPLANE_IMAGES", "comma-separated glob patterns of images jobs may use; empty: any", _patterns
    )
    log_max_mb: float = _setting(
        10.0, "TUNEPLANE_LOG_MAX_MB", "size at which the node's event and audit log is rotated", _decimal(0.01, 100_000)
    )
    idle_reservation_min: int = _setting(
        30,
        "TUNEPLANE_IDLE_RESERVATION_MIN",
        "minutes a reservation's owner may leave its cards unused before it is marked idle",
        _whole(1, 366 * 24 * 60),
    )
    xid_drain: tuple[int, ...] = _setting(
        DEFAULT_XID_DRAIN,
        "TUNEPLANE_XID_DRAIN",
        "XIDs that drain their card until an operator undrains it (none: none do)",
        _parse_xids,
    )
    xid_ignore: tuple[int, ...] = _setting(
        (), "TUNEPLANE_XID_IGNORE", "XIDs that are only logged: not shown on the card, never drained", _parse_xids
    )
    evict_grace_s: float = _setting(
        10.0,
        "TUNEPLANE_EVICT_GRACE_S",
        "seconds an evicted process has between SIGTERM and being reported (or SIGKILLed)",
        _decimal(0.1, 3600),
    )
    fleet_url: Optional[str] = _setting(
        None,
        "TUNEPLANE_FLEET_URL",
        "Redis the agent publishes its snapshot to, and tpnode-tui fleet reads",
        _parse_redis_url,
    )
    #: empty: the host name (see :attr:`node`)
    node_name: str = _setting(
        "", "TUNEPLANE_NODE_NAME", "this node's name in the fleet and in metrics; empty: the host name", _node_name
    )
    fleet_publish_s: float = _setting(
        10.0,
        "TUNEPLANE_FLEET_PUBLISH_S",
        "seconds between publications at most; 3 missed: unreachable",
        _decimal(0.1, 300),
    )
    #: (host, port) of the Prometheus endpoint; None: off
    metrics_addr: Optional[tuple[str, int]] = _setting(
        None, "TUNEPLANE_METRICS_ADDR", "HOST:PORT where the agent serves Prometheus /metrics; empty: off", _parse_addr
    )
    #: the node to talk to over SSH; None: this machine's agent (or this process)
    host: Optional[SshTarget] = _setting(
        None,
        "TUNEPLANE_HOST",
        "reach another node's agent over SSH: [ssh://][user@]host[:port]; empty: this machine",
        _ssh_target,
        flag="--host",
        metavar="[USER@]HOST",
    )
    #: how the fleet should reach this node over SSH; None: its node name
    ssh_address: Optional[SshTarget] = _setting(
        None,
        "TUNEPLANE_SSH_ADDRESS",
        "how others reach this node over SSH, as the fleet publishes it; empty: its name",
        _ssh_target,
    )

    @property
    def simulated_path(self) -> Optional[Path]:
        if self.probe.startswith("simulated:"):
            return Path(self.probe.split(":", 1)[1])
        return None

    @property
    def redis_url_safe(self) -> Optional[str]:
        return redact_url(self.redis_url) if self.redis_url else None

    @property
    def fleet_url_safe(self) -> Optional[str]:
        return redact_url(self.fleet_url) if self.fleet_url else None

    @property
    def node(self) -> str:
        """The node's name in the fleet and in metrics."""
        return self.node_name or socket.gethostname()


#: setting name -> how it is given, in the order declared
DECLARED: dict[str, Declared] = {f.name: f.metadata["declared"] for f in fields(Settings)}


def settings_from_flags(flags: Mapping[str, object], environ: Optional[Mapping[str, str]] = None) -> Settings:
    """Settings from the environment and the command line's flags.

    ``flags`` maps each flag's name as argparse stores it ("gpu_count" for
    ``--gpu-count``) to its value, None where it was not given.
    """
    overrides = {name: flags.get(d.flag[2:].replace("-", "_")) for name, d in DECLARED.items() if d.flag}
    return load_settings(environ, **overrides)


def load_settings(environ: Optional[Mapping[str, str]] = None, **overrides: object) -> Settings:
    """Settings from the environment, then flags (``overrides``, ``None`` = unset).

    Raises ConfigError naming the first bad value.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, declared in DECLARED.items():
        given = overrides.get(name)
        if isinstance(given, bool):  # a switch on the command line (--allow-unverified): no text to read
            values[name] = given
        elif given is not None:
            values[name] = declared.parse(declared.flag or name, str(given))
        elif env.get(declared.env, "").strip():
            values[name] = declared.parse(declared.env, env[declared.env])
    unknown = set(overrides) - set(DECLARED)
    if unknown:
        raise TypeError(f"unknown settings: {sorted(unknown)}")
    settings = replace(Settings(), **values)
    both = set(settings.xid_drain) & set(settings.xid_ignore)
    if both:
        raise ConfigError(
            f"TUNEPLANE_XID_DRAIN and TUNEPLANE_XID_IGNORE both name XID {', '.join(map(str, sorted(both)))}; "
            "an XID is either drained or ignored"
        )
    return settings


_POINT_IT = "point TUNEPLANE_STATE_DIR (or --state-dir) at the node's state directory"


def state_dir_exists(state_dir: Path) -> bool:
    """Whether the state directory is there yet (it is made by the first launch).

    Anything else at that path (a file, a dangling link, a parent that is a
    file) is a ConfigError: it can never hold the lock or the state file.
    """
    try:
        st = os.stat(state_dir)
    except FileNotFoundError:
        if os.path.lexists(state_dir):
            raise ConfigError(f"the state dir {state_dir} is a link to nothing; {_POINT_IT}") from None
        return False
    except NotADirectoryError:
        raise ConfigError(f"the state dir {state_dir} is inside a file, not a directory; {_POINT_IT}") from None
    except OSError as e:
        raise ConfigError(state_dir_unusable(state_dir, e, "be looked at")) from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"the state dir {state_dir} is not a directory; {_POINT_IT}")
    return True


def state_dir_unusable(state_dir: Path, e: OSError, to: str) -> str:
    """Why the state directory cannot be used, and what to do, in one sentence.

    There is deliberately no advice to use another directory: every allocator
    on the node must share this one, and a private one would be a second truth.
    """
    if e.errno in (errno.ENOTDIR, errno.EEXIST):
        return f"the state dir {state_dir} is not a directory, so it cannot {to}; {_POINT_IT}"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (
            f"the state dir {state_dir} cannot {to} ({e.strerror}); run as a user who may "
            "write there (every allocator on this node shares it)"
        )
    return f"the state dir {state_dir} cannot {to} ({e.strerror or e})"
