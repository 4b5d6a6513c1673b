"""A card's check as JSON, and back: ``check --json``, the agent's answer, the state dir's record."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tpnode_tui.model.checks import FINDINGS, OUTCOMES, CardCheck, CommandRun, Finding
from tpnode_tui.port.wire.reader import Reader


def check_to_json(c: CardCheck) -> dict[str, Any]:
    """A card's check as ``check --json`` prints it, the agent answers it and ``status --json`` shows it."""
    return asdict(c) | {
        "findings": [asdict(f) for f in c.findings],
        "command": None if c.command is None else asdict(c.command) | {"tail": list(c.command.tail)},
    }


def _finding(r: Reader) -> Finding:
    return Finding(name=r.text("name"), outcome=r.choice("outcome", FINDINGS), words=r.text("words"))


def _command_run(r: Reader) -> CommandRun:
    return CommandRun(
        command=r.text("command"),
        exit_code=r.opt_whole("exit_code"),
        seconds=r.number("seconds"),
        tail=r.texts("tail"),
        timed_out=r.flag("timed_out", False),
        problem=r.opt_text("problem"),
    )


def check_from_json(doc: Any, where: str = "check") -> CardCheck:
    """The check :func:`check_to_json` wrote; WireError naming the first thing wrong."""
    r = Reader(doc, where).only("card", "uuid", "by", "began", "at", "boot", "outcome", "findings", "command", "effect")
    command = r.doc.get("command")
    return CardCheck(
        card=r.whole("card"),
        uuid=r.opt_text("uuid"),
        by=r.text("by"),
        began=r.number("began"),
        at=r.number("at"),
        boot=r.opt_text("boot"),
        outcome=r.choice("outcome", OUTCOMES),
        findings=tuple(r.each("findings", _finding)),
        command=None if command is None else _command_run(Reader(command, f"{where}.command")),
        effect=r.text("effect", ""),
    )
