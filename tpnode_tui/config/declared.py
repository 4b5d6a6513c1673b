"""How one setting is declared: its variable, its flag, its help and its reader, beside its default."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from tpnode_tui.config.readers import Parse


@dataclass(frozen=True)
class Declared:
    """How one setting is given: its variable, the flag that overrides it (if
    any), what it does in a few words (for docs/configuration.md and --help), and how its
    text is read (checked, or a ConfigError naming the variable)."""

    env: str
    help: str
    parse: Parse
    flag: Optional[str] = None
    metavar: Optional[str] = None


def setting(
    default: Any,
    env: str,
    help: str,
    parse: Parse,
    *,
    flag: Optional[str] = None,
    metavar: Optional[str] = None,
    secret: bool = False,
) -> Any:
    """One field of a settings section, declared once: its default here, the rest in its metadata.
    A ``secret`` (a password in a URL, a token) is left out of the section's repr, so no log
    line or traceback that shows the settings shows it."""
    return field(default=default, repr=not secret, metadata={"declared": Declared(env, help, parse, flag, metavar)})
