"""The parser made for one command line reads it as the parser of every command does.

Only the command a line names gets its arguments (a command should not pay
for the others'); where the options before it leave doubt which word is the
command, every command gets them. Either way the line must read the same:
the same values, or the same one-line refusal.
"""

from __future__ import annotations

import pytest

from tpnode_tui.cli import build_parser
from tpnode_tui.cli.registry import UsageError

LINES = [
    ["status", "--json"],
    ["--agent", "on", "status", "--json"],
    ["--agent=on", "queue", "--json"],
    ["-v", "--state-dir", "status", "queue"],
    ["--host", "queue", "status", "--json"],
    ["--ho", "queue", "status", "--json"],
    ["--age", "on", "status"],
    ["--", "status"],
    ["stauts"],
    ["status", "--jsn"],
    ["launch", "--cards", "2", "--same-switch", "--", "python", "train.py"],
    ["launch", "--cards", "x"],
    ["reserve", "--cards", "1"],
    ["usage", "--by", "card", "--since", "7d"],
    ["events", "--card", "3", "--follow"],
    ["--interval", "2", "--demo"],
    ["status", "--state-dir", "/x"],
    ["status", "--json", "--agent=off"],
    ["web", "--demo", "--listen", "127.0.0.1:9000"],
    ["web", "--fleet", "--demo"],
    ["web", "--listen", "nowhere"],
    ["--demo", "web"],
    [],
]


def read(parser, argv):
    try:
        return vars(parser.parse_args(argv))
    except UsageError as e:
        return str(e)


@pytest.mark.parametrize("argv", LINES, ids=" ".join)
def test_a_line_reads_the_same_with_only_its_command_made(argv):
    assert read(build_parser(argv), argv) == read(build_parser(), argv)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["status", "--state-dir", "/x"],
            "--state-dir is not an argument of status: give it before the command, as in "
            "tpnode-tui --state-dir /x status (see tpnode-tui --help)",
        ),
        (
            ["launch", "--cards", "1", "--allow-unverified", "--", "true"],
            "--allow-unverified is not an argument of launch: give it before the command, as in "
            "tpnode-tui --allow-unverified launch (see tpnode-tui --help)",
        ),
        (["stop", "r1", "r2"], "unrecognized arguments: r2 (see tpnode-tui stop --help)"),
    ],
)
def test_a_word_a_command_does_not_take_is_said_with_where_it_belongs(argv, said):
    assert read(build_parser(argv), argv) == said


def test_only_the_named_command_gets_its_arguments():
    made = build_parser(["--agent", "on", "queue", "--json"])
    sub = next(a for a in made._actions if a.dest == "command")
    assert [a.dest for a in sub.choices["queue"]._actions] == ["help", "json"]
    assert [a.dest for a in sub.choices["launch"]._actions] == ["help"]


@pytest.mark.parametrize(
    "given",
    [
        [],
        ["--state-dir", "/srv/a b", "--agent", "off", "--gpu-count", "4"],
        ["--state-dir=-odd", "--allow-unverified"],
    ],
)
def test_the_setting_flags_written_back_read_as_the_same_settings(given, tmp_path):
    """The dashboard's shell key runs ``tpnode-tui shell`` with the dashboard's
    own setting flags: written back and read again, they are the same settings."""
    from tpnode_tui.config.settings import flag_words, settings_from_flags

    first = vars(build_parser(given).parse_args(given))
    words = flag_words(first)
    line = [*words, "shell", "--started-fd", "7", "--", "r1"]
    again = vars(build_parser(line).parse_args(line))
    assert (again["command"], again["run_id"], again["started_fd"], again["argv"]) == ("shell", "r1", 7, [])
    node_file = tmp_path / "agent.env"  # the machine's own /etc file, if any, is no part of this
    node_file.write_text("")
    environ = {"TUNEPLANE_NODE_ENV_FILE": str(node_file)}
    assert settings_from_flags(again, environ) == settings_from_flags(first, environ)
    assert len(words) == sum(word.startswith("--") for word in given)


def refusal(argv):
    with pytest.raises(UsageError) as refused:
        build_parser(argv).parse_args(argv)
    return str(refused.value)


@pytest.mark.parametrize("pid", ["abc", "-5", "0", "٣"])
def test_a_pid_that_is_no_process_id_is_refused_in_process_words(pid):
    said = refusal(["evict", "3", "--pid", pid])
    assert f"{pid!r} is not a process id (a whole number above 0)" in said
    assert "cards" not in said


def test_before_is_refused_as_a_time_in_unix_seconds():
    said = refusal(["audit", "--before", "bogus"])
    assert "'bogus' is not a time in unix seconds (write it like 1764680000)" in said
    assert build_parser().parse_args(["events", "--before", "1764680000.5"]).before == 1764680000.5


@pytest.mark.parametrize("command", ["launch", "reserve"])
def test_cards_and_a_slice_refuse_each_other(command):
    argv = [command, "--cards", "1", "--slice", "1g.18gb", "--for", "1h", "--", "true"]
    if command == "launch":
        argv.remove("--for")
        argv.remove("1h")
    said = refusal(argv)
    assert "argument --slice: not allowed with argument --cards" in said
    assert f"see tpnode-tui {command} --help" in said


def test_a_word_a_command_does_not_take_names_that_commands_help():
    assert refusal(["stop", "j1", "j2"]) == "unrecognized arguments: j2 (see tpnode-tui stop --help)"
    assert refusal(["--demo", "extra"]).endswith("(see tpnode-tui --help)")


def test_every_command_page_has_a_description_and_a_longer_one_is_kept():
    from tpnode_tui.cli.registry import COMMANDS

    pages = next(a for a in build_parser()._actions if a.dest == "command").choices
    for name, command in COMMANDS.items():
        assert pages[name].description, name
        if name not in ("agent", "shell", "notify", "web"):
            assert pages[name].description == command.help, name
    assert pages["shell"].description.startswith("Run your login shell")
    assert "mesg y" in pages["notify"].description and "Apprise" in pages["notify"].description
    web = pages["web"].description
    assert "127.0.0.1:8470" in web and "never as root" in web and "GET only" in web
    agent = pages["agent"].description
    assert "as root" in agent and "/run/tpnode-tui/agent.sock" in agent and "--agent-socket" in agent


def test_the_web_pages_arguments():
    args = build_parser().parse_args(["web", "--fleet", "--listen", "[::1]:8480"])
    assert (args.command, args.fleet, args.web_demo, args.listen) == ("web", True, False, ("::1", 8480))
    assert build_parser().parse_args(["web"]).listen is None  # TUNEPLANE_WEB_LISTEN decides
    with pytest.raises(UsageError, match="not allowed with argument"):
        build_parser().parse_args(["web", "--demo", "--fleet"])
    with pytest.raises(UsageError, match="--listen='nowhere' is not HOST:PORT"):
        build_parser().parse_args(["web", "--listen", "nowhere"])
    with pytest.raises(UsageError, match="--listen is empty"):
        build_parser().parse_args(["web", "--listen", ""])
