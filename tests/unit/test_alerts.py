"""The Prometheus rules of contrib/prometheus (alerts.yml; renamed.yml), checked and unit-tested by promtool.

promtool comes with Debian's ``prometheus`` package (tests/run.sh installs
it). Its rule tests (tests/promtool/alerts_test.yml) feed each alert series
that must make it fire and series that must not, and compare what fired,
with its labels and its words, at the minutes they name.
"""

from __future__ import annotations

import re
import shutil

from helpers.paths import CHECKOUT, TESTS
from helpers.services import promtool

RULES = CHECKOUT / "contrib" / "prometheus" / "alerts.yml"
RULE_TESTS = TESTS / "promtool" / "alerts_test.yml"
RENAMED = CHECKOUT / "contrib" / "prometheus" / "renamed.yml"
RENAMED_TESTS = TESTS / "promtool" / "renamed_test.yml"
METRICS_DOC = CHECKOUT / "docs" / "metrics.md"


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


def test_the_renamed_gauges_old_names_are_recorded_from_the_new_ones():
    """contrib/prometheus/renamed.yml gives each gauge the agent renamed its old
    name back (the agent cannot serve a gauge ending in _total), as its tests show;
    docs/metrics.md lists each, and every new name is one the agent serves."""
    checked = promtool("check", "rules", str(RENAMED))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(RENAMED_TESTS))
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    recorded = dict(re.findall(r"- record: (\w+)\n\s+expr: (\w+)\n", RENAMED.read_text()))
    assert recorded == {"tpnode_cards_total": "tpnode_cards", "tpnode_slices_total": "tpnode_slices"}
    doc = METRICS_DOC.read_text()
    for old, new in recorded.items():
        assert f"| `{old}` | `{new}` | recorded by contrib/prometheus/renamed.yml |" in doc
        assert re.search(rf"^\| `{new}` \| gauge \|", doc, re.MULTILINE)
