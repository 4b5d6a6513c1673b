"""The agent's systemd unit: valid for systemd, and in step with the product's defaults."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from helpers.paths import CHECKOUT
from helpers.services import unavailable
from tpnode_tui.config.sections import DEFAULT_AGENT_SOCKET, DEFAULT_STATE_DIR

UNIT = CHECKOUT / "contrib" / "systemd" / "tpnode-tui-agent.service"


def _section(name: str) -> dict[str, list[str]]:
    """A unit section's settings; a key given twice (Environment=) keeps both."""
    settings: dict[str, list[str]] = {}
    current = None
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            current = line.strip("[]")
        elif current == name and line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_the_unit_serves_the_default_socket_and_state_dir_and_leaves_jobs_running():
    service = {k: v[-1] for k, v in _section("Service").items()}
    env = dict(item.split("=", 1) for item in _section("Service")["Environment"])
    assert env == {"TUNEPLANE_STATE_DIR": DEFAULT_STATE_DIR, "TUNEPLANE_AGENT_SOCKET": DEFAULT_AGENT_SOCKET}
    assert f"/run/{service['RuntimeDirectory']}" == str(Path(DEFAULT_AGENT_SOCKET).parent)
    assert f"/var/lib/{service['StateDirectory']}" == DEFAULT_STATE_DIR
    assert service["KillMode"] == "process"  # stopping the agent must not end the jobs
    assert service["Delegate"] == "yes"  # per-job cgroups below the agent's
    assert service["ExecStart"].split()[-1] == "agent"


def test_systemd_accepts_the_unit(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        unavailable("systemd-analyze is not installed")
    here = Path(sys.executable).parent / "tpnode-tui"
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/tpnode-tui", str(here)))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr
