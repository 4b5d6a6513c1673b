"""The node's own settings file: what the agent's unit reads (``EnvironmentFile=``), read by every command too.

A command an account runs, and above all ``dial-stdio``, which sshd starts in a
non-login shell with next to nothing in its environment, must find the same
agent socket and state dir as the agent, and the only place both can read is
a file the node's operator keeps under /etc. Only ``TUNEPLANE_*`` lines are
taken from it: the unit's file may set others for the agent alone.

The format is systemd's ``EnvironmentFile=``: ``KEY=VALUE`` lines, blank lines
and ``#`` or ``;`` comments, a value optionally in matching quotes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tpnode_tui.model.errors import ConfigError

TYPE_CHECKING = False  # status --json through the agent reads this file, and imports no typing for it
if TYPE_CHECKING:
    from typing import Mapping

DEFAULT_NODE_ENV_FILE = "/etc/tpnode-tui/agent.env"
#: the variable naming the file (tests point it at their own)
NODE_ENV_FILE_VARIABLE = "TUNEPLANE_NODE_ENV_FILE"

_LINE = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)")


def _value(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return raw[1:-1]
    return raw


def read_node_file(path: Path, named: bool = False) -> dict[str, str]:
    """The ``TUNEPLANE_*`` settings the node's file gives; none where there is no file.

    A file that is there but cannot be read, or holds a line that is not a
    setting, is a ConfigError: a command that quietly read less than the agent
    would talk to another socket or keep another state dir. So is a file that
    is not there when ``named`` (``TUNEPLANE_NODE_ENV_FILE`` names it): whoever
    named it meant the settings in it, and the defaults are not those."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if named:
            raise ConfigError(
                f"{NODE_ENV_FILE_VARIABLE} names the node's settings file {path}, and there is none: "
                f"correct the path, or unset {NODE_ENV_FILE_VARIABLE} to read {DEFAULT_NODE_ENV_FILE}"
            ) from None
        return {}
    except (OSError, UnicodeDecodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise ConfigError(
            f"cannot read the node's settings file {path} ({reason}): every account must be able to read it "
            f"(keep secrets in another EnvironmentFile= of the agent's unit), or point {NODE_ENV_FILE_VARIABLE} "
            "elsewhere"
        ) from None
    given: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        match = _LINE.fullmatch(stripped)
        if match is None:
            raise ConfigError(f"{path}:{number} is not a KEY=VALUE line")
        if match.group(1).startswith("TUNEPLANE_"):
            given[match.group(1)] = _value(match.group(2))
    return given


def node_file_path(env: Mapping[str, str]) -> Path:
    """Where the node's file is: ``TUNEPLANE_NODE_ENV_FILE``, else /etc/tpnode-tui/agent.env."""
    raw = env.get(NODE_ENV_FILE_VARIABLE, "").strip()
    if not raw:
        return Path(DEFAULT_NODE_ENV_FILE)
    try:
        return Path(raw).expanduser().absolute()
    except (RuntimeError, OSError) as e:  # ~nosuchuser/..., or a relative path in a directory that is gone
        raise ConfigError(f"{NODE_ENV_FILE_VARIABLE}={raw!r} cannot be read as a path: {e}") from None


def node_file_environ() -> dict[str, str]:
    """An environment that says only where the node's file is: settings read
    over it are the node's file's alone (:func:`beneath`)."""
    named = os.environ.get(NODE_ENV_FILE_VARIABLE)
    return {} if named is None else {NODE_ENV_FILE_VARIABLE: named}


def beneath(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` over the node's file: a setting the environment gives wins, and
    one it leaves out (or empty) is the node's."""
    given = {name: value for name, value in env.items() if value.strip()}
    return {**read_node_file(node_file_path(env), named=NODE_ENV_FILE_VARIABLE in given), **given}
