"""Other people's words reach the operator's terminal escaped, never obeyed.

Any local user names their own processes (``exec -a``), labels their own
containers and types their own reservation owner; the driver names the cards
and Docker, Redis and NVML write their own errors. These tests put control
sequences, a bidi override and Textual markup into each of those places, with
real processes and real records, and read what the CLI and the dashboard show:
the escaped text, on one line, and in ``--json`` the real value.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.load import cli, kill_process_jobs, node_env
from helpers.services import write_scene
from tpnode_tui.config.settings import load_settings
from tpnode_tui.model.jobs import JobState
from tpnode_tui.model.views import HolderInfo
from tpnode_tui.node.local import LocalNode
from tpnode_tui.text.printable import printable, printable_lines, printable_view
from tpnode_tui.tui.app import NodeDashboard
from tpnode_tui.tui.screens.dialogs.confirm import ConfirmScreen

#: clears the screen, retitles the window, turns what follows red
ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x1b[31mEVIL"
#: makes the rest of the line read right to left
BIDI = "alice\u202etxt.exe"
#: Textual markup: a closing tag with no opening one, and a clickable action
MARKUP = "[/][@click=app.quit]bob[/]"

SHOWN_ESCAPES = "\\x1b[2J\\x1b]0;pwned\\x07\\x1b[31mEVIL"


def on_one_screen(text: str) -> bool:
    """Nothing in ``text`` that a terminal would obey rather than show."""
    return all(ch == "\n" or ch.isprintable() for ch in text)


# ── the escaping itself ──────────────────────────────────────────────────────


def test_control_sequences_bidi_overrides_and_bad_bytes_are_shown_escaped():
    assert printable(ESCAPES) == SHOWN_ESCAPES
    assert printable(BIDI) == "alice\\u202etxt.exe"
    assert printable("ana\nroot") == "ana\\nroot"
    assert printable("python\udcfftrain") == "python\\udcfftrain"  # not UTF-8 in /proc
    assert printable("ünïcode 训练 ok") == "ünïcode 训练 ok"


def test_line_breaks_the_program_wrote_itself_stay_line_breaks():
    assert printable_lines(f"line one\n{ESCAPES}\n") == f"line one\n{SHOWN_ESCAPES}\n"


@given(st.text())
def test_escaped_text_is_always_printable_and_escaping_twice_changes_nothing(text):
    once = printable(text)
    assert once.isprintable()
    assert printable(once) == once


def test_a_reading_is_escaped_as_a_whole_field_by_field():
    holder = HolderInfo(pid=7, visible=True, user=BIDI, command=ESCAPES)
    job = JobState(
        name="n",
        run_id="r",
        gpus=(1,),
        status="running",
        owner="ana\nroot",
        command=("sh", "-c", ESCAPES),
        problems=(ESCAPES,),
    )
    shown = printable_view({"holders": (holder,), "jobs": [job], ESCAPES: 3})
    assert shown["holders"][0].command == SHOWN_ESCAPES
    assert shown["holders"][0].user == "alice\\u202etxt.exe"
    assert shown["jobs"][0].owner == "ana\\nroot"
    assert shown["jobs"][0].command == ("sh", "-c", SHOWN_ESCAPES)
    assert shown["jobs"][0].problems == (SHOWN_ESCAPES,)
    assert shown[SHOWN_ESCAPES] == 3
    assert shown["jobs"][0].gpus == (1,) and shown["holders"][0].pid == 7
    clean = replace(job, owner="ana", command=("sleep", "1"), problems=())
    assert printable_view(clean) is clean  # nothing to escape: nothing copied


# ── a real node: a squatter named by its owner, a hostile owner, a driver's card name


@pytest.fixture
def squatter():
    """A real process whose name (argv[0]) is a control sequence, as ``exec -a`` makes."""
    proc = subprocess.Popen([ESCAPES, "120"], executable=shutil.which("sleep"))
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def hostile_node(tmp_path, squatter):
    cards = [{"name": "NVIDIA H200", "memory_total_mib": 143771} for _ in range(4)]
    cards[0]["name"] = f"NVIDIA H200 {BIDI}"
    cards[2]["processes"] = [{"pid": squatter.pid, "used_memory_mib": 30000}]
    cards[2]["memory_used_mib"] = 30000
    scene = write_scene(tmp_path / "node.json", cards)
    return scene, tmp_path / "state"


def test_status_shows_every_outside_string_escaped_and_json_keeps_the_real_value(hostile_node, squatter):
    env = node_env(*hostile_node)
    owner = f"{ESCAPES}\n{MARKUP}"
    reserved = cli(env, "reserve", "--cards", "1", "--for", "1h", "--owner", owner, "--run-id", "rsv-1")
    assert reserved.returncode == 0, reserved.stderr
    try:
        text = cli(env, "status")
        assert text.returncode == 0 and text.stderr == "", text.stderr
        assert on_one_screen(text.stdout), repr(text.stdout)
        assert SHOWN_ESCAPES in text.stdout  # the squatter's name and the owner, escaped
        assert "alice\\u202etxt.exe" in text.stdout  # the driver's card name
        job_lines = [line for line in text.stdout.splitlines() if line.startswith("rsv-1")]
        assert len(job_lines) == 1 and "\\n[/]" in job_lines[0], text.stdout  # owner on its one line

        data = json.loads(cli(env, "status", "--json").stdout)
        [holder] = data["cards"][2]["holders"]
        assert ESCAPES in holder["command"]
        assert data["cards"][0]["name"] == f"NVIDIA H200 {BIDI}"
        assert [j["owner"] for j in data["jobs"]] == [owner]
    finally:
        cli(env, "stop", "rsv-1")


def test_errors_quoting_outside_text_are_one_escaped_line(hostile_node):
    env = node_env(*hostile_node)
    refused = cli(env, "launch", "--cards", "1", "--run-id", BIDI + ESCAPES, "--", "true")
    assert refused.returncode == 2
    assert on_one_screen(refused.stderr) and len(refused.stderr.splitlines()) == 1, repr(refused.stderr)
    assert "\\u202e" in refused.stderr


@pytest.mark.docker
def test_hand_set_labels_on_a_real_container_are_shown_escaped(dockerd, hostile_node):
    env = node_env(*hostile_node, runtime="docker", docker_host=dockerd.host)
    dockerd.cli(
        "run",
        "--name",
        "hand",
        "--label",
        "tuneplane.gpus=1",
        "--label",
        f"tuneplane.run_id={ESCAPES}",
        "--label",
        f"tuneplane.owner={BIDI}",
        dockerd.image,
        "true",
    )  # not detached: it has exited when this returns
    text = cli(env, "status")
    assert text.returncode == 0, text.stderr
    assert on_one_screen(text.stdout) and "alice\\u202etxt.exe" in text.stdout, repr(text.stdout)
    reclaimed = cli(env, "reclaim")
    assert reclaimed.returncode == 0, reclaimed.stderr
    assert on_one_screen(reclaimed.stdout) and "removed" in reclaimed.stdout, repr(reclaimed.stdout)
    assert json.loads(cli(env, "status", "--json").stdout)["jobs"] == []


# ── the dashboard ────────────────────────────────────────────────────────────


def screen_text(app: NodeDashboard) -> str:
    """What the dashboard hands the terminal for the current screen, as text."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text for strip in strips)


async def test_the_dashboard_shows_outside_strings_escaped_and_never_as_markup(hostile_node, squatter):
    scene, state = hostile_node
    node = LocalNode.from_settings(
        load_settings({}, probe_kind=f"simulated:{scene}", runtime_kind="process", state_dir=str(state)), interval=0.2
    )
    await node.service.allocator.reserve(1, 3600, owner=f"{MARKUP}{ESCAPES}", run_id="rsv-1")
    app = NodeDashboard(node)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            while app.follower.snapshot is None:
                await pilot.pause(0.05)
            await pilot.press("right", "right")  # card 2: the squatter
            await pilot.pause(0.2)
            shown = screen_text(app)
            assert on_one_screen(shown), repr(shown)
            assert "\\x1b[2J" in shown and "[/][@click=app.quit]bob[/]" in shown

            app.notify(f"the engine said: {ESCAPES} {MARKUP}")
            await pilot.pause(0.2)
            assert on_one_screen(screen_text(app))

            card = next(c for c in app.follower.snapshot.cards if c.run_id == "rsv-1")
            app.query_one("#grid").selected = card.index
            await pilot.press("s")  # the stop question quotes the owner
            await pilot.pause(0.2)
            assert isinstance(app.screen, ConfirmScreen)
            asked = screen_text(app)
            assert on_one_screen(asked) and "[@click=app.quit]" in asked, repr(asked)
            assert app.is_running
    finally:
        await node.close()
        kill_process_jobs(state)
