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
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Mapping, Optional
from urllib.parse import urlsplit, urlunsplit

from .model import BadRequest, ConfigError

DEFAULT_STATE_DIR = "/var/lib/tpnode-tui"
DEFAULT_AGENT_SOCKET = "/run/tpnode-tui/agent.sock"
DEFAULT_OPERATORS_GROUP = "tpnode-operators"

#: setting name -> (environment variable, what it does). A test checks that the
#: README's configuration table names every variable and flag here.
ENV_VARS: dict[str, tuple[str, str]] = {
    "local_gpu_count": ("TUNEPLANE_LOCAL_GPU_COUNT", "card count; 0 asks the driver"),
    "cluster_profile": (
        "TUNEPLANE_CLUSTER_PROFILE", "hardware series to report; empty asks the driver for the card name"
    ),
    "check_external": ("TUNEPLANE_LOCAL_CHECK_EXTERNAL_GPUS", "count cards used from outside the platform as held"),
    "check_health": ("TUNEPLANE_LOCAL_CHECK_GPU_HEALTH", "keep unhealthy cards from being handed out"),
    "mem_busy_mib": ("TUNEPLANE_MEM_BUSY_MIB", "memory used (MiB) from which a card counts as in use"),
    "probe": ("TUNEPLANE_PROBE", "nvml, smi, simulated:PATH or auto (NVML, then nvidia-smi, else probe-blind)"),
    "probe_timeout_s": ("TUNEPLANE_PROBE_TIMEOUT_S", "seconds a probe may take before the node counts as probe-blind"),
    "runtime": ("TUNEPLANE_RUNTIME", "docker, process or auto (docker when an engine socket exists)"),
    "docker_gpu_mode": (
        "TUNEPLANE_DOCKER_GPU_MODE",
        "nvidia (device requests), env (NVIDIA_VISIBLE_DEVICES with host ids, CUDA_VISIBLE_DEVICES "
        "from 0) or none (labels only)",
    ),
    "state_dir": ("TUNEPLANE_STATE_DIR", "lock file and the process runtime's state file and logs"),
    "redis_url": ("TUNEPLANE_REDIS_URL", "use a Redis lease as the cross-process lock instead of flock"),
    "lock_lease_ms": ("TUNEPLANE_LOCK_LEASE_MS", "Redis lease length; renewed every third of it"),
    "lock_retry_ms": ("TUNEPLANE_LOCK_RETRY_MS", "how often a waiting allocation retries the lock"),
    "hold_image": ("TUNEPLANE_HOLD_IMAGE", "image whose sleep holds a reservation's cards (docker)"),
    "allow_unverified": ("TUNEPLANE_ALLOW_UNVERIFIED", "hand out cards even while use from outside cannot be probed"),
    "agent": ("TUNEPLANE_AGENT", "auto (the agent if it answers, else in-process where allowed), on or off"),
    "agent_socket": ("TUNEPLANE_AGENT_SOCKET", "the node agent's Unix socket"),
    "operators_group": ("TUNEPLANE_OPERATORS_GROUP", "members may stop, extend and reclaim anyone's jobs"),
    "max_cards_per_user": ("TUNEPLANE_MAX_CARDS_PER_USER", "most cards one account may hold at once; empty: no limit"),
    "max_cards_for": ("TUNEPLANE_MAX_CARDS_FOR", "per-account or per-group limits, e.g. alice=4,@students=1"),
    "images": ("TUNEPLANE_IMAGES", "comma-separated glob patterns of images jobs may use; empty: any"),
    "log_max_mb": ("TUNEPLANE_LOG_MAX_MB", "size at which the node's event and audit log is rotated"),
    "idle_reservation_min": ("TUNEPLANE_IDLE_RESERVATION_MIN",
                             "minutes a reservation's owner may leave its cards unused before it is marked idle"),
    "xid_drain": ("TUNEPLANE_XID_DRAIN", "XIDs that drain their card until an operator undrains it (none: none do)"),
    "xid_ignore": ("TUNEPLANE_XID_IGNORE", "XIDs that are only logged: not shown on the card, never drained"),
    "evict_grace_s": ("TUNEPLANE_EVICT_GRACE_S",
                      "seconds an evicted process has between SIGTERM and being reported (or SIGKILLed)"),
    "fleet_url": ("TUNEPLANE_FLEET_URL", "Redis the agent publishes its snapshot to, and tpnode-tui fleet reads"),
    "node_name": ("TUNEPLANE_NODE_NAME", "this node's name in the fleet and in metrics; empty: the host name"),
    "fleet_publish_s": ("TUNEPLANE_FLEET_PUBLISH_S", "seconds between publications at most; 3 missed: unreachable"),
    "metrics_addr": ("TUNEPLANE_METRICS_ADDR", "HOST:PORT where the agent serves Prometheus /metrics; empty: off"),
}

#: setting name -> the command-line flag that overrides its variable
FLAGS: dict[str, str] = {
    "local_gpu_count": "--gpu-count",
    "probe": "--probe",
    "runtime": "--runtime",
    "state_dir": "--state-dir",
    "redis_url": "--redis-url",
    "docker_gpu_mode": "--docker-gpu-mode",
    "mem_busy_mib": "--mem-busy-mib",
    "lock_lease_ms": "--lock-lease-ms",
    "hold_image": "--hold-image",
    "allow_unverified": "--allow-unverified",
    "agent": "--agent",
    "agent_socket": "--agent-socket",
}

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


@dataclass(frozen=True)
class Settings:
    local_gpu_count: int = 0
    cluster_profile: str = ""
    check_external: bool = True
    check_health: bool = True
    mem_busy_mib: int = 512
    probe: str = "auto"
    probe_timeout_s: float = 10.0
    runtime: str = "auto"
    docker_gpu_mode: str = "nvidia"
    state_dir: Path = Path(DEFAULT_STATE_DIR)
    redis_url: Optional[str] = None
    lock_lease_ms: int = 120_000
    lock_retry_ms: int = 100
    hold_image: str = "busybox:latest"
    allow_unverified: bool = False
    agent: str = "auto"
    agent_socket: Path = Path(DEFAULT_AGENT_SOCKET)
    operators_group: str = DEFAULT_OPERATORS_GROUP
    max_cards_per_user: Optional[int] = None
    #: account name or "@group" -> most cards
    max_cards_for: tuple[tuple[str, int], ...] = ()
    images: tuple[str, ...] = ()
    log_max_mb: float = 10.0
    idle_reservation_min: int = 30
    xid_drain: tuple[int, ...] = DEFAULT_XID_DRAIN
    xid_ignore: tuple[int, ...] = ()
    evict_grace_s: float = 10.0
    fleet_url: Optional[str] = None
    #: empty: the host name (see :attr:`node`)
    node_name: str = ""
    fleet_publish_s: float = 10.0
    #: (host, port) of the Prometheus endpoint; None: off
    metrics_addr: Optional[tuple[str, int]] = None

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


def redact_url(url: str) -> str:
    """The URL with any password replaced, for logs, errors and the header.

    A password can stand in the authority (``redis://:pw@host``) or, for unix
    sockets, in the query (``unix:///run/redis.sock?password=pw``).
    """
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
            raise BadRequest(
                f"duration {text!r} is not understood: use e.g. 90s, 30m, 2h, 1h30m or 1d"
            )
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
    if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"{name}={redact_url(value)!r} is not a redis://, rediss:// or unix:// URL"
        )
    return value


def _parse_limits(name: str, raw: str) -> tuple[tuple[str, int], ...]:
    """"alice=4,@students=1" -> (("alice", 4), ("@students", 1))."""
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
    """"46,48, 79" -> (46, 48, 79); "none" -> ()."""
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
    """"0.0.0.0:9400", "[::]:9400", "localhost:9400" or ":9400" (every address) -> (host, port)."""
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


def _convert(setting: str, raw: object, name: str) -> object:
    text = str(raw)
    if setting == "idle_reservation_min":
        return _parse_int(name, text, 1, 366 * 24 * 60)
    if setting in ("xid_drain", "xid_ignore"):
        return _parse_xids(name, text)
    if setting == "evict_grace_s":
        return _parse_float(name, text, 0.1, 3600)
    if setting == "fleet_url":
        return _parse_redis_url(name, text)
    if setting == "node_name":
        if text.strip() and not _NODE_NAME.fullmatch(text.strip()):
            raise ConfigError(f"{name}={raw!r} is not a node name: 1 to 253 letters, digits, "
                              "'.', '_' or '-', starting with a letter or digit")
        return text.strip()
    if setting == "fleet_publish_s":
        return _parse_float(name, text, 0.1, 300)
    if setting == "metrics_addr":
        return _parse_addr(name, text)
    if setting == "agent":
        return _parse_choice(name, text, ("auto", "on", "off"))
    if setting == "agent_socket":
        if not text.strip():
            raise ConfigError(f"{name} is empty")
        return Path(text).expanduser().absolute()
    if setting == "operators_group":
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\$?", text.strip()):
            raise ConfigError(f"{name}={raw!r} is not a group name")
        return text.strip()
    if setting == "max_cards_per_user":
        return None if not text.strip() else _parse_int(name, text, 0, MAX_CARDS)
    if setting == "max_cards_for":
        return _parse_limits(name, text)
    if setting == "images":
        return tuple(p.strip() for p in text.split(",") if p.strip())
    if setting == "log_max_mb":
        return _parse_float(name, text, 0.01, 100_000)
    if setting == "local_gpu_count":
        return _parse_int(name, text, 0, MAX_CARDS)
    if setting == "mem_busy_mib":
        return _parse_int(name, text, 1)
    if setting == "lock_lease_ms":
        return _parse_int(name, text, 100)
    if setting == "lock_retry_ms":
        return _parse_int(name, text, 1)
    if setting == "probe_timeout_s":
        return _parse_float(name, text, 0.1, MAX_PROBE_TIMEOUT_S)
    if setting in ("check_external", "check_health", "allow_unverified"):
        return raw if isinstance(raw, bool) else _parse_bool(name, text)
    if setting == "probe":
        return _parse_probe(name, text)
    if setting == "runtime":
        return _parse_choice(name, text, ("docker", "process", "auto"))
    if setting == "docker_gpu_mode":
        return _parse_choice(name, text, DOCKER_GPU_MODES)
    if setting == "state_dir":
        if not text.strip():
            raise ConfigError(f"{name} is empty")
        # Absolute, so that shells started in different directories share one
        # lock and one state file instead of each allocating on its own.
        return Path(text).expanduser().absolute()
    if setting == "redis_url":
        return _parse_redis_url(name, text)
    if setting in ("cluster_profile", "hold_image"):
        return text.strip()
    raise AssertionError(setting)


def settings_from_flags(
    flags: Mapping[str, object], environ: Optional[Mapping[str, str]] = None
) -> Settings:
    """Settings from the environment and the command line's flags.

    ``flags`` maps each flag's name as argparse stores it ("gpu_count" for
    ``--gpu-count``) to its value, None where it was not given.
    """
    overrides = {setting: flags.get(flag[2:].replace("-", "_")) for setting, flag in FLAGS.items()}
    return load_settings(environ, **overrides)


def load_settings(
    environ: Optional[Mapping[str, str]] = None, **overrides: object
) -> Settings:
    """Settings from the environment, then flags (``overrides``, ``None`` = unset).

    Raises ConfigError naming the first bad value.
    """
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for f in fields(Settings):
        var = ENV_VARS[f.name][0]
        if overrides.get(f.name) is not None:
            values[f.name] = _convert(f.name, overrides[f.name], FLAGS.get(f.name, f.name))
        elif env.get(var, "").strip():
            values[f.name] = _convert(f.name, env[var], var)
    unknown = set(overrides) - {f.name for f in fields(Settings)}
    if unknown:
        raise TypeError(f"unknown settings: {sorted(unknown)}")
    settings = replace(Settings(), **values)
    both = set(settings.xid_drain) & set(settings.xid_ignore)
    if both:
        raise ConfigError(
            f"TUNEPLANE_XID_DRAIN and TUNEPLANE_XID_IGNORE both name XID {', '.join(map(str, sorted(both)))}; "
            "an XID is either drained or ignored")
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
        return (f"the state dir {state_dir} cannot {to} ({e.strerror}); run as a user who may "
                "write there (every allocator on this node shares it)")
    return f"the state dir {state_dir} cannot {to} ({e.strerror or e})"
