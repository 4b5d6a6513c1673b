"""A node reached over SSH: the destination, checked before ssh ever sees it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from tpnode_tui.model.errors import ConfigError

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
