"""docs/metrics-alerts.yml: the alert rules docs/metrics.md quotes are valid Prometheus
rules (`promtool check rules`), behave as their comments say (`promtool test rules`
with tests/fixtures/metrics/alerts-test.yml), and the page quotes the file as it is."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "docs" / "metrics-alerts.yml"
RULE_TESTS = REPO / "tests" / "fixtures" / "metrics" / "alerts-test.yml"


@pytest.fixture
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true and promtool is missing (Debian's prometheus package)")
        pytest.skip("promtool not installed: apt-get install prometheus")
    return found


def test_the_alert_rules_are_valid_prometheus_rules(promtool: str) -> None:
    result = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


def test_the_alert_rules_fire_as_documented(promtool: str) -> None:
    # a dead holder alerts per daemon with its machine, until its view is 15 minutes old;
    # waits that end on their timeout never count as request errors
    result = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_docs_metrics_md_quotes_the_rules_file_as_it_is() -> None:
    page = (REPO / "docs" / "metrics.md").read_text()
    quoted = re.search(r"^## Alerts\n.*?```yaml\n(.*?)```\n", page, re.S | re.M)
    assert quoted is not None, "docs/metrics.md has no ## Alerts section with a yaml block"
    assert quoted.group(1) == RULES.read_text()
