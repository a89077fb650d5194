"""A checked history under faults, on every backend, as CI can afford it (the full size is
bench/history_check.py: 10,000 operations per backend)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from sim import chaos

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.mark.parametrize("backend", ["local", "http", "etcd"])
def test_a_fleet_under_faults_leaves_a_history_without_violations(backend: str, tmp_path: Path) -> None:
    args = argparse.Namespace(backend=backend, agents=8, ops=400, targets=4, faults="all", seed=3,
                              timeout=300.0)
    result = chaos.Run(args, tmp_path / "run").execute()
    assert result["violations"] == 0, (tmp_path / "run" / "violations.txt").read_text()
    assert not result["timed_out"]
    assert result["operations"] >= 400 and result["grants"] > 0
    assert result["fenced_writes_accepted"] > 0
    assert result["faults_injected"] >= 2, result["faults"]  # the skew, and at least one more
    assert "skew" in result["faults"]
    history = [json.loads(line) for path in (tmp_path / "run" / "history").glob("*.jsonl")
               for line in path.read_text().splitlines() if line.startswith("{") and line.endswith("}")]
    assert any(row.get("phase") == "invoke" for row in history)
