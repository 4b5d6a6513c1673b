"""Each command declared once, with its arguments beside it.

A command is registered where it is written: its name, its help, the
function that adds its arguments and the function that runs it, so adding or
changing one touches one place. The parser and the dispatch are made from
:data:`COMMANDS`, in the order the commands are declared.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Optional

from tpnode_tui.config.settings import Settings
from tpnode_tui.config.values import decimal_number, typed_duration, whole_number
from tpnode_tui.model.errors import BadRequest
from tpnode_tui.port.node import Node
from tpnode_tui.text.printable import printable


class UsageError(Exception):
    """A command line that cannot be run as written: exit 2, one line."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line instead of exiting on its own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A word that starts like a negative number ("-5m", "-1", "-.5") is a value,
        # never an option none of ours is: "--for -5m" then reaches --for, which says
        # what is wrong with it, instead of "expected one argument".
        self._negative_number_matcher = re.compile(r"^-\.?[0-9]")

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse's, but a word no parser took is said with the help page of
        the command it was given to ("see tpnode-tui stop --help"), not the top one."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            named = getattr(parsed, "command", None)
            ours = [i for i, word in enumerate(extra) if word.split("=", 1)[0] in self._option_string_actions]
            if named and ours:  # a setting's flag or the dashboard's, written after the command
                first = extra[ours[0]]
                flag = first.split("=", 1)[0]
                takes = "=" not in first and self._option_string_actions[flag].nargs != 0
                given = " ".join(extra[ours[0] : ours[0] + (2 if takes else 1)])
                raise UsageError(
                    f"{flag} is not an argument of {named}: give it before the command, as in "
                    f"{self.prog} {given} {named} (see {self.prog} --help)"
                )
            prog = f"{self.prog} {named}" if named else self.prog
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see {prog} --help)")
        return parsed


@dataclass(frozen=True)
class Run:
    """One command's node, arguments, and the state dir's note (a node served here)."""

    node: Node
    args: argparse.Namespace
    note: Optional[str]


Arguments = Callable[[argparse.ArgumentParser], None]
OnNode = Callable[["Run"], Awaitable[None]]
Alone = Callable[[argparse.Namespace, Settings], int]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    arguments: Arguments
    #: a command on a node: run with the node the settings name
    on_node: Optional[OnNode] = None
    #: a command of its own (the agent, the fleet): given the arguments and settings, returns the exit code
    alone: Optional[Alone] = None
    #: it asks the agent and waits for nothing else, so when an agent answers it
    #: runs straight through on a blocking connection with no event loop
    #: (tpnode_tui.node.http.straight): most of a short command's time otherwise
    straight: bool = False
    #: its settings are the node's file's and its own flags, never the caller's
    #: environment (dial-stdio: sshd runs it in whatever environment the login has)
    node_file_only: bool = False


#: every command, in the order declared (the order --help lists them)
COMMANDS: dict[str, Command] = {}


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def node_command(
    name: str, help: str, arguments: Arguments = _no_arguments, *, straight: bool = False
) -> Callable[[OnNode], OnNode]:
    """Register the decorated coroutine as the command ``name``, run on the node."""

    def register(run: OnNode) -> OnNode:
        COMMANDS[name] = Command(name, help, arguments, on_node=run, straight=straight)
        return run

    return register


def command(
    name: str, help: str, arguments: Arguments = _no_arguments, *, node_file_only: bool = False
) -> Callable[[Alone], Alone]:
    """Register the decorated function as the command ``name``, run on its own."""

    def register(run: Alone) -> Alone:
        COMMANDS[name] = Command(name, help, arguments, alone=run, node_file_only=node_file_only)
        return run

    return register


def say(message: str) -> None:
    print(f"tpnode-tui: {printable(message)}", file=sys.stderr, flush=True)


def say_once() -> Callable[[str], None]:
    """What a waiting launch says: the first reason only, so a wait of an
    hour is one line, not one per retry."""
    said = False

    def once(why: str) -> None:
        nonlocal said
        if not said:
            said = True
            say(why)

    return once


# -- argument types -------------------------------------------------------------


def cards(text: str) -> int:
    value = whole_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of cards")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} cards: a job needs at least 1")
    return value


def process_id(text: str) -> int:
    """A process id: ASCII digits, above 0."""
    value = whole_number(text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id (a whole number above 0)")
    return value


def descriptor(text: str) -> int:
    """An open file descriptor handed down by whoever started the command: above 2."""
    value = whole_number(text)
    if value is None or value < 3:
        raise argparse.ArgumentTypeError(f"{text!r} is not an open file descriptor above 2")
    return value


def card_list(text: str) -> tuple[int, ...]:
    """ "3" or "0,1,5": card indices as ASCII digits, none twice."""
    listed = [whole_number(part.strip()) for part in text.split(",")]
    if not listed or any(c is None for c in listed):
        raise argparse.ArgumentTypeError(f"{text!r} is not a card index or a list like 0,1,5")
    indices = tuple(c for c in listed if c is not None)
    if len(set(indices)) != len(indices):
        raise argparse.ArgumentTypeError(f"{text!r} names a card twice")
    return indices


def duration(text: str) -> float:
    """A length of time with its unit: 90s, 30m, 2h, 1h30m, 1d (never a bare number)."""
    try:
        return typed_duration(text)
    except BadRequest as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def not_a_command(word: str) -> UsageError:
    """A command line whose first word names no command: the nearest ones, if any is near."""
    near = difflib.get_close_matches(word, COMMANDS, n=3, cutoff=0.6)
    nearest = f": did you mean {' or '.join(near)}?" if near else ""
    return UsageError(f"{word!r} is not a tpnode-tui command{nearest} (see tpnode-tui --help)")


def seconds(text: str) -> float:
    value = decimal_number(text)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (write it like 30 or 0.5)")
    return value


def unix_time(text: str) -> float:
    """A time as unix seconds ("1764680000", "1764680000.25"), as the pages' "older entries" line gives it."""
    value = decimal_number(text)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time in unix seconds (write it like 1764680000)")
    return value
