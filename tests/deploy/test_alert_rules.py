"""deploy/prometheus/alerts.yml: valid for promtool, and every alert has a unit test."""

from __future__ import annotations

from pathlib import Path

import yaml
from deploy_support import DEPLOY, run, tool

PROMETHEUS = DEPLOY / "prometheus"


def _alerts() -> set[str]:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text(encoding="utf-8"))
    return {rule["alert"] for group in rules["groups"] for rule in group["rules"]}


def test_promtool_checks_the_rules() -> None:
    """`promtool check rules` accepts alerts.yml."""
    done = run([tool("promtool"), "check", "rules", str(PROMETHEUS / "alerts.yml")])
    assert f"SUCCESS: {len(_alerts())} rules found" in done.stdout + done.stderr


def test_promtool_unit_tests_pass() -> None:
    """`promtool test rules alerts.test.yml` passes: each alert fires when it should."""
    done = run([tool("promtool"), "test", "rules", "alerts.test.yml"], cwd=PROMETHEUS)
    assert "SUCCESS" in done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    """Each alert is tested both firing and, earlier or on other series, not firing."""
    suite = yaml.safe_load((PROMETHEUS / "alerts.test.yml").read_text(encoding="utf-8"))
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in suite["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    assert firing == _alerts()
    assert quiet == _alerts()


def test_a_broken_expectation_fails_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests have teeth: expecting a quiet alert to fire makes promtool fail."""
    suite = yaml.safe_load((PROMETHEUS / "alerts.test.yml").read_text(encoding="utf-8"))
    suite["rule_files"] = [str(PROMETHEUS / "alerts.yml")]
    first = suite["tests"][0]["alert_rule_test"][0]
    first["exp_alerts"] = [{"exp_labels": {"severity": "warning"}}]
    broken = tmp_path / "alerts.test.yml"
    broken.write_text(yaml.safe_dump(suite), encoding="utf-8")
    done = run([tool("promtool"), "test", "rules", str(broken)], check=False)
    assert done.returncode != 0
