"""The Prometheus alerting rules (contrib/prometheus/alerts.yml), checked and unit-tested by promtool.

promtool comes with Debian's ``prometheus`` package (tests/run.sh installs
it). Its rule tests (tests/promtool/alerts_test.yml) feed each alert series
that must make it fire and series that must not, and compare what fired,
with its labels and its words, at the minutes they name.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from helpers.paths import CHECKOUT, TESTS
from helpers.services import unavailable

RULES = CHECKOUT / "contrib" / "prometheus" / "alerts.yml"
RULE_TESTS = TESTS / "promtool" / "alerts_test.yml"
METRICS_DOC = CHECKOUT / "docs" / "metrics.md"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    if found is None:
        unavailable("promtool is not installed (Debian: apt-get install --no-install-recommends prometheus)")
    return subprocess.run([str(found), *args], capture_output=True, text=True, timeout=120)


def alert_names() -> list[str]:
    return re.findall(r"^\s*- alert: (\w+)\s*$", RULES.read_text(), re.MULTILINE)


def test_the_rules_are_valid():
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in done.stdout


def test_each_alert_fires_and_stays_quiet_as_its_tests_say():
    done = promtool("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_a_rule_test_that_expects_otherwise_fails(tmp_path):
    """The rule tests can fail: an alert expected one minute early is caught."""
    (tmp_path / "contrib" / "prometheus").mkdir(parents=True)
    shutil.copy(RULES, tmp_path / "contrib" / "prometheus" / "alerts.yml")
    (tmp_path / "tests" / "promtool").mkdir(parents=True)
    text = RULE_TESTS.read_text()
    assert text.count("eval_time: 12m\n        alertname: TpnodeAgentDown") == 1
    wrong = text.replace(
        "eval_time: 12m\n        alertname: TpnodeAgentDown", "eval_time: 11m\n        alertname: TpnodeAgentDown"
    )
    (tmp_path / "tests" / "promtool" / "alerts_test.yml").write_text(wrong)
    done = promtool("test", "rules", str(tmp_path / "tests" / "promtool" / "alerts_test.yml"))
    assert done.returncode != 0 and "TpnodeAgentDown" in done.stdout + done.stderr


def test_every_alert_is_shown_firing_and_not_firing():
    tests = RULE_TESTS.read_text()
    names = alert_names()
    assert len(names) == 7, names
    for name in names:
        evals = re.findall(rf"alertname: {name}\n\s*exp_alerts:( \[\])?", tests)
        assert "" in evals, f"{name} is never shown firing"
        assert " []" in evals, f"{name} is never shown not firing"


def test_every_metric_an_alert_reads_is_documented():
    named = set(re.findall(r"\b((?:tpnode|DCGM)_[A-Za-z0-9_:]*)", RULES.read_text()))
    documented = set(re.findall(r"^\| `((?:tpnode|DCGM)_[A-Za-z0-9_]*)`", METRICS_DOC.read_text(), re.MULTILINE))
    assert named and named - documented == set()
    assert "tpnode_intruders" in documented and "tpnode_no_such_metric" not in documented  # the check can fail
