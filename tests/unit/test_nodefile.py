"""The node's settings file (/etc/tpnode-tui/agent.env): what every command reads beneath its environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpnode_tui.config.nodefile import node_file_path, read_node_file
from tpnode_tui.config.settings import settings_from_flags
from tpnode_tui.model.errors import ConfigError


def test_it_reads_systemd_s_format_and_takes_only_tuneplane_lines(tmp_path):
    path = tmp_path / "agent.env"
    path.write_text(
        '# the node\n\n; also a comment\nTUNEPLANE_AGENT_SOCKET="/run/x/agent.sock"\n'
        "TUNEPLANE_STATE_DIR = '/srv/tpn'\nDOCKER_HOST=unix:///run/d.sock\nexport TUNEPLANE_AGENT=on\n"
    )
    assert read_node_file(path) == {
        "TUNEPLANE_AGENT_SOCKET": "/run/x/agent.sock",
        "TUNEPLANE_STATE_DIR": "/srv/tpn",
        "TUNEPLANE_AGENT": "on",
    }


def test_no_file_is_no_setting_and_a_bad_line_is_refused_naming_it(tmp_path):
    assert read_node_file(tmp_path / "absent.env") == {}
    path = tmp_path / "agent.env"
    path.write_text("TUNEPLANE_AGENT=on\nthis is not a setting\n")
    with pytest.raises(ConfigError, match=r"agent\.env:2 is not a KEY=VALUE line"):
        read_node_file(path)


def test_a_file_named_that_is_not_there_is_said_and_the_default_s_absence_is_not(tmp_path):
    missing = tmp_path / "missing.env"
    with pytest.raises(
        ConfigError,
        match=rf"TUNEPLANE_NODE_ENV_FILE names the node's settings file {missing}, and there is none: "
        "correct the path, or unset TUNEPLANE_NODE_ENV_FILE to read /etc/tpnode-tui/agent.env",
    ):
        settings_from_flags({}, {"TUNEPLANE_NODE_ENV_FILE": str(missing)})
    assert settings_from_flags({}, {"TUNEPLANE_NODE_ENV_FILE": " "}).agent.env_file == Path("/etc/tpnode-tui/agent.env")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    for argv in (["status"], ["status", "--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "tpnode_tui", *argv],
            env={**env, "TUNEPLANE_NODE_ENV_FILE": str(missing)},
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
        )
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert done.stderr == (
            f"tpnode-tui: TUNEPLANE_NODE_ENV_FILE names the node's settings file {missing}, and there is none: "
            "correct the path, or unset TUNEPLANE_NODE_ENV_FILE to read /etc/tpnode-tui/agent.env\n"
        )


def test_a_file_that_cannot_be_read_is_said_not_skipped(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the node's settings file .* every account must be able"):
        read_node_file(tmp_path)  # a directory: there, but not a file anyone can read as one


def test_the_environment_wins_over_the_file_and_the_file_over_the_defaults(tmp_path):
    path = tmp_path / "agent.env"
    path.write_text("TUNEPLANE_AGENT_SOCKET=/run/node/agent.sock\nTUNEPLANE_STATE_DIR=/srv/node\n")
    env = {"TUNEPLANE_NODE_ENV_FILE": str(path), "TUNEPLANE_STATE_DIR": "/srv/mine", "TUNEPLANE_AGENT_SOCKET": " "}
    settings = settings_from_flags({}, env)
    assert settings.agent.socket == Path("/run/node/agent.sock")
    assert settings.state.dir == Path("/srv/mine")
    assert settings.agent.env_file == path


def test_a_file_named_by_a_path_that_cannot_be_made_is_refused_in_words_also_by_status_json(tmp_path):
    """``~nosuchuser/x`` has no home to expand into: one line and exit 2, also on
    ``status --json``'s quick path, which hands such a mistake to the ordinary one."""
    with pytest.raises(ConfigError, match=r"TUNEPLANE_NODE_ENV_FILE='~nosuchuser/x' cannot be read as a path"):
        node_file_path({"TUNEPLANE_NODE_ENV_FILE": "~nosuchuser/x"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    done = subprocess.run(
        [sys.executable, "-m", "tpnode_tui", "status", "--json"],
        env={**env, "TUNEPLANE_NODE_ENV_FILE": "~nosuchuser/x"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "") and done.stderr.startswith(
        "tpnode-tui: TUNEPLANE_NODE_ENV_FILE='~nosuchuser/x' cannot be read as a path"
    ), done.stderr
    assert "Traceback" not in done.stderr
