"""docs/dashboard.md "QA events" lists exactly the types the code maps, and a type
outside them (`qa.passed`) shows QA unknown."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentcoordd.coord.telemetry import QA_TYPES
from integration.helpers import Daemon

DOC = Path(__file__).resolve().parents[2] / "docs" / "dashboard.md"


def test_the_documented_qa_types_are_the_code_s() -> None:
    section = DOC.read_text(encoding="utf-8").split("## QA events", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(qa\.[a-z_]+)` \| ([a-z_]+) \|$", section, re.M))
    assert rows == QA_TYPES


@pytest.mark.parametrize(("kind", "shown"), [("qa.validation_passed", "passed"), ("qa.passed", "unknown")])
def test_qa_state_comes_from_the_type_and_qa_passed_is_unknown(batch: dict, daemon: Daemon, kind: str,
                                                                 shown: str) -> None:
    done = daemon.ctl("record-event", "--batch-id", "b1", "--type", kind, "--repo", "acme/widgets",
                      "--target", "1", "--status", "passed")
    assert done.returncode == 0, done.stderr
    rows = json.loads(daemon.ctl("health", "--json").stdout)["qa"]
    assert [(r["target"], r["qa"]) for r in rows if r.get("repo") == "acme/widgets"
            and str(r.get("target")) == "1"] == [("1", shown)]
