"""Settings, from ``TUNEPLANE_*`` environment variables and command-line flags.

Every value is checked once, at start-up, and a bad one is refused with a
message that names the variable (or the flag that gave it). The settings come
in sections (:mod:`.sections`), read as ``settings.lock.redis_url``; where one
setting is named on its own (a flag's override, a test's), its name is its
section's and its field's joined: ``lock_redis_url``, ``state_dir``.
"""

from __future__ import annotations

import os
from dataclasses import Field, dataclass, field, fields
from typing import Any, Mapping, Optional

from tpnode_tui.config.declared import Declared
from tpnode_tui.config.nodefile import beneath
from tpnode_tui.config.sections import (
    AgentSettings,
    CardSettings,
    FleetSettings,
    LimitSettings,
    LockSettings,
    NotifySettings,
    PolicySettings,
    ProbeSettings,
    RuntimeSettings,
    StateSettings,
    TriageSettings,
    UsageSettings,
    WebSettings,
)


@dataclass(frozen=True)
class Settings:
    """The node's settings, section by section: a reader names the part it
    depends on (``settings.lock``, ``settings.fleet``), and each setting is
    found where an operator would look for it."""

    cards: CardSettings = field(default_factory=CardSettings)
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    state: StateSettings = field(default_factory=StateSettings)
    lock: LockSettings = field(default_factory=LockSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    policy: PolicySettings = field(default_factory=PolicySettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    triage: TriageSettings = field(default_factory=TriageSettings)
    usage: UsageSettings = field(default_factory=UsageSettings)
    notify: NotifySettings = field(default_factory=NotifySettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    web: WebSettings = field(default_factory=WebSettings)


#: each section's name -> its class
_SECTIONS: dict[str, type[Any]] = {f.name: type(getattr(Settings(), f.name)) for f in fields(Settings)}
#: each setting's name on its own ("lock_redis_url") -> its section's name, and its field there
_PLACES: dict[str, tuple[str, Field[Any]]] = {
    f"{section}_{f.name}": (section, f) for section, cls in _SECTIONS.items() for f in fields(cls)
}
#: each setting's name on its own -> how it is given, section by section
DECLARED: dict[str, Declared] = {name: f.metadata["declared"] for name, (_, f) in _PLACES.items()}


def settings_from_flags(flags: Mapping[str, object], environ: Optional[Mapping[str, str]] = None) -> Settings:
    """Settings from the environment and the command line's flags.

    ``flags`` maps each flag's name as argparse stores it ("gpu_count" for
    ``--gpu-count``) to its value, None where it was not given. Beneath the
    environment lies the node's own file (:mod:`.nodefile`), so that every
    account's commands find the agent and the state dir the agent was given.
    """
    overrides = {name: flags.get(d.flag[2:].replace("-", "_")) for name, d in DECLARED.items() if d.flag}
    return load_settings(beneath(os.environ if environ is None else environ), **overrides)


def flag_words(flags: Mapping[str, object]) -> list[str]:
    """The setting flags among ``flags`` (as :func:`settings_from_flags` takes
    them) written back as a command line: a command started from this one (the
    dashboard's shell key runs ``tpnode-tui shell``) with its settings, the
    environment beneath as this one had it."""
    words: list[str] = []
    for declared in DECLARED.values():
        if declared.flag is None:
            continue
        value = flags.get(declared.flag[2:].replace("-", "_"))
        if value is True:
            words.append(declared.flag)
        elif value is not None:
            words.append(f"{declared.flag}={value}")
    return words


def _given(name: str, declared: Declared, override: object, env: Mapping[str, str]) -> tuple[bool, Any]:
    """Whether the setting ``name`` is given (by a flag, else its variable), and its value."""
    if isinstance(override, bool):  # a switch on the command line (--allow-unverified): no text to read
        return True, override
    if override is not None:
        return True, declared.parse(declared.flag or name, str(override))
    if env.get(declared.env, "").strip():
        return True, declared.parse(declared.env, env[declared.env])
    return False, None


def load_settings(environ: Optional[Mapping[str, str]] = None, **overrides: object) -> Settings:
    """Settings from the environment, then flags (``overrides``, ``None`` = unset).

    ``overrides`` name each setting on its own, by its section and field
    (``state_dir="/tmp/st"``, ``lock_retry_ms=10``): a flag's text, or a switch's
    True. Raises ConfigError naming the first bad value.
    """
    unknown = set(overrides) - set(DECLARED)
    if unknown:
        raise TypeError(f"unknown settings: {sorted(unknown)}")
    env = os.environ if environ is None else environ
    values: dict[str, dict[str, Any]] = {section: {} for section in _SECTIONS}
    for name, declared in DECLARED.items():
        given, value = _given(name, declared, overrides.get(name), env)
        if given:
            section, f = _PLACES[name]
            values[section][f.name] = value
    return Settings(**{section: _SECTIONS[section](**given) for section, given in values.items()})
