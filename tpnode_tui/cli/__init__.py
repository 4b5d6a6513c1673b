"""The headless CLI: the same allocator and lock as the dashboard, for shells and scripts.

Exit codes are part of the interface, so scripts can tell "try later" from
"this is wrong": 0 done; 75 no capacity now, or the lock not had within
``--wait`` (EX_TEMPFAIL: try again later); 77 not allowed (EX_NOPERM); 1 any
other failure, including a request that can never fit; 2 bad usage or
configuration; 141 standard output closed early (as a program killed by
SIGPIPE: ``tpnode-tui status | head -1``). Errors are one line on stderr,
never a traceback.

Each command is declared once, with its arguments, in :mod:`.commands`; each
node setting once, in its section (:mod:`tpnode_tui.config.sections`), whose flags the
parser is made from. What a command needs is imported when it runs: a
command that only asks the node's agent loads no asyncio, no allocator and
no dashboard.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys

#: 128 + SIGPIPE: what a shell reports for a program a closed pipe ended
EXIT_PIPE = 141

# The interpreter's last garbage collection, as it exits, walks every object
# the imports made (some 27,000 where the node is served here): 15 to 20 ms of
# a command's time, spent on memory the process is about to give back whole.
# Frozen at exit, they are left out of that walk. It would only free memory:
# a command closes its files, sockets and locks itself before it returns.
atexit.register(gc.freeze)

__all__ = ["main", "build_parser", "EXIT_PIPE"]

# What the commands need is imported where it is used, not here: ``status
# --json`` through the agent (the quick path of tpnode_tui.node.choose) must cost little more than a Python
# start, and the settings, the port's types and argparse take five to import.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Optional, Sequence

    from tpnode_tui.cli.registry import Command
    from tpnode_tui.config.settings import Settings
    from tpnode_tui.port.node import Node


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The parser; given ``argv``, only the command it names gets its arguments
    (each command's are made only to be parsed, and a command should not pay
    for the others')."""
    from tpnode_tui import __version__
    from tpnode_tui.cli import commands  # noqa: F401  (each command registers itself)
    from tpnode_tui.cli.registry import COMMANDS, Parser, seconds
    from tpnode_tui.config.settings import DECLARED

    parser = Parser(
        prog="tpnode-tui",
        description="See who holds each GPU on this node, and hand cards to jobs without ever sharing one.",
    )
    parser.add_argument("--version", action="version", version=f"tpnode-tui {__version__}")
    node = parser.add_argument_group("node settings (each overrides its TUNEPLANE_* variable)")
    for declared in DECLARED.values():
        if declared.flag is None:
            continue
        if declared.metavar is None:  # a switch: given, it is on; not given, the variable decides
            node.add_argument(declared.flag, action="store_true", default=None, help=declared.help)
        else:
            node.add_argument(declared.flag, metavar=declared.metavar, help=declared.help)
    ui = parser.add_argument_group("dashboard (no command)")
    ui.add_argument("--demo", action="store_true", help="a simulated 8-card node: no GPU, Docker or Redis needed")
    ui.add_argument("--readonly", action="store_true", help="show only: every action is refused")
    ui.add_argument("--interval", type=seconds, default=1.0, metavar="S", help="seconds between polls (0.2 to 3600)")
    ui.add_argument("-v", "--verbose", action="store_true", help="log to stderr")

    named = None if argv is None else _command_named(parser, argv)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS.values():
        # every one, for --help and a mistyped name; its help is its page's description
        # unless its arguments write a longer one
        its = sub.add_parser(command.name, help=command.help, description=command.help)
        if named not in COMMANDS or named == command.name:
            command.arguments(its)
    return parser


def _command_named(parser: argparse.ArgumentParser, argv: Sequence[str]) -> Optional[str]:
    """The command ``argv`` names, where the options before it leave no doubt
    which word it is; None where they do (an abbreviated option, ``--``): then
    every command gets its arguments and argparse decides, as it always did."""
    options = parser._option_string_actions  # the options' table argparse reads the line with
    words = iter(argv)
    for word in words:
        if not word.startswith("-"):
            return word
        action = options.get(word.split("=", 1)[0])
        if action is None:
            return None
        if action.nargs != 0 and "=" not in word:
            next(words, None)  # the option's value, whatever it says
    return None


def _state_dir_note(settings: Settings) -> Optional[str]:
    """A plain sentence when the state dir this command uses does not exist yet.

    A mistyped TUNEPLANE_STATE_DIR otherwise shows every card free and makes a
    launch start a second, private record of the node: the one thing worse
    than no record. A state dir that is not a directory is a ConfigError.
    """
    from tpnode_tui.config.statedir import state_dir_to_serve
    from tpnode_tui.runtimes import choose_runtime

    process = choose_runtime(settings) == "process"
    if not process and settings.lock.redis_url:  # docker with a Redis lease: no state dir at all
        return None
    if state_dir_to_serve(settings.state.dir):
        return None
    recorded = "no job has been recorded here" if process else "no launch has taken the allocation lock here"
    return (
        f"no state dir at {settings.state.dir}: {recorded}. If jobs were expected, check "
        "TUNEPLANE_STATE_DIR: everyone who allocates on this node must use the same one"
    )


def _logging(args: argparse.Namespace) -> None:
    """Warnings (and with -v everything) to stderr: what serves a node here, or
    the agent, logs. A command run straight through on the agent logs nothing,
    so it does not load logging unless asked to (-v). The agent and -v write
    log lines (time, level, module); a command's warning or error is a line
    like its refusals, "tpnode-tui: warning: ...", for the person who typed it."""
    import logging

    if args.verbose or args.command == "agent":
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return

    class Said(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return f"tpnode-tui: {record.levelname.lower()}: {record.getMessage()}"

    handler = logging.StreamHandler()
    handler.setFormatter(Said())
    logging.basicConfig(level=logging.WARNING, handlers=[handler])


def _run(command: Command, args: argparse.Namespace, settings: Settings) -> int:
    from tpnode_tui.node.choose import agent_for

    if args.verbose or command.alone is not None:
        _logging(args)
    if command.alone is not None:
        _started()
        return command.alone(args, settings)
    if command.straight and settings.agent.host is not None:  # that node's agent, or nothing
        from tpnode_tui.node.http import straight  # the agent's client: not loaded by TUNEPLANE_AGENT=off

        agent = agent_for(settings, blocking=True)
        return straight(_on_node(command, agent, args, settings, None))
    if command.straight and settings.agent.mode != "off":
        from tpnode_tui.node.http import straight

        agent = agent_for(settings, blocking=True)
        if straight(agent.answers()):
            return straight(_on_node(command, agent, args, settings, None))
        straight(agent.close())
    _logging(args)
    import asyncio  # here, not at the top: a command run straight through never loads it

    return asyncio.run(_in_loop(command, args, settings))


async def _in_loop(command: Command, args: argparse.Namespace, settings: Settings) -> int:
    from tpnode_tui.cli.registry import say_once
    from tpnode_tui.node.choose import open_node

    node = await open_node(settings, interval=args.interval, max_wait_s=getattr(args, "wait", None), on_wait=say_once())
    return await _on_node(command, node, args, settings, _state_dir_note(settings) if node.in_process else None)


async def _on_node(
    command: Command, node: Node, args: argparse.Namespace, settings: Settings, note: Optional[str]
) -> int:
    """Run ``command`` on ``node``; ``note``: the state dir's, for a node served here."""
    from tpnode_tui.cli.registry import Run, say
    from tpnode_tui.model.errors import EXIT_OK

    assert command.on_node is not None
    try:
        _started()
        await command.on_node(Run(node, args, note))
        if note and settings.state.dir.is_dir():
            # Said after the fact, and only on success: a refusal stays one line.
            say(
                f"created the state dir {settings.state.dir}, which did not exist: everyone who "
                "allocates on this node must use this same one (TUNEPLANE_STATE_DIR)"
            )
        return EXIT_OK
    finally:
        await node.close()


def _fail(message: str, code: int) -> int:
    from tpnode_tui.cli.registry import say

    say(message)
    return code


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last
    flush into a closed pipe does not print an error of its own."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Optional[Sequence[str]] = None) -> int:
    if (sys.argv[1:] if argv is None else list(argv)) == ["status", "--json"]:
        code = _quick()
        if code is not None:
            return code
    if argv is None:  # this process is the command (a caller's, a test's, keeps its collector as it is)
        _pause_collection()
    import contextlib

    from tpnode_tui.text.printable import PrintableStream

    # Everything the commands print, errors and log lines included, reaches
    # the terminal escaped: much of it was written by other users (process
    # names, labels, owners) or by Docker, Redis and the driver.
    try:
        with (
            contextlib.redirect_stdout(PrintableStream(sys.stdout)),
            contextlib.redirect_stderr(PrintableStream(sys.stderr)),
        ):
            return _main(argv)
    finally:
        _started()


#: whether main paused the garbage collector (see _pause_collection)
_paused = False


def _pause_collection() -> None:
    """No garbage collection while the command's modules are imported: what
    they make lives as long as the process, and each collection their
    allocations set off walks all of it again (some 5 ms where the node is
    served here). On again once the command starts its work (:func:`_started`)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def _started() -> None:
    """The command's modules are loaded: what they made is set apart (frozen),
    never walked again, and garbage is collected from here on, as before."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


def _quick() -> Optional[int]:
    """``status --json`` as the agent wrote it (tpnode_tui.node.choose's quick path); None: the ordinary way."""
    from tpnode_tui.node.choose import quick_status

    try:
        return quick_status()
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_PIPE
    except KeyboardInterrupt:
        return _fail("interrupted", 130)


def _main(argv: Optional[Sequence[str]]) -> int:
    from tpnode_tui.cli.registry import COMMANDS, UsageError, not_a_command
    from tpnode_tui.config.nodefile import node_file_environ
    from tpnode_tui.config.settings import flag_words, settings_from_flags
    from tpnode_tui.config.statedir import state_dir_exists
    from tpnode_tui.model.errors import EXIT_FAIL, EXIT_USAGE, TpnodeError, error_line, exit_code

    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(words)
    try:
        named = _command_named(parser, words)
        if named is not None and named not in COMMANDS:
            raise not_a_command(named)
        args = parser.parse_args(argv)
        if not 0.2 <= args.interval <= 3600:
            raise UsageError(f"--interval {args.interval:g}: give seconds from 0.2 to 3600")
        if args.command is None:
            _logging(args)
            settings = None
            if args.demo and args.host:
                raise UsageError("the demo is a pretend node served here; --host reaches a real one: give one of them")
            if not args.demo:
                settings = settings_from_flags(vars(args))
                state_dir_exists(settings.state.dir)  # a file there is refused before the screen opens
            from tpnode_tui.tui import run_dashboard  # the only import of the UI, and only when asked for

            _started()
            return run_dashboard(
                settings,
                demo=args.demo,
                readonly=args.readonly,
                interval=args.interval,
                verbose=args.verbose,
                setting_flags=flag_words(vars(args)),
            )
        command = COMMANDS[args.command]
        settings = settings_from_flags(vars(args), node_file_environ() if command.node_file_only else None)
        if settings.agent.host is not None and args.agent == "off":
            raise UsageError(
                f"--host {settings.agent.host} reaches that node's agent, and --agent off asks for none: "
                "give one of them"
            )
        return _run(command, args, settings)
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_PIPE
    except UsageError as e:
        return _fail(str(e), EXIT_USAGE)
    except TpnodeError as e:  # each kind has its exit code: 75 try later, 77 not allowed, ...
        return _fail(error_line(e), exit_code(e))
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as e:  # a bug of ours: still one line, with the detail in the log
        import logging

        logging.getLogger(__name__).debug("unexpected error", exc_info=True)
        return _fail(f"unexpected error ({type(e).__name__}: {e}); run with -v for details", EXIT_FAIL)
