"""version and config show: key sets and values as the existing tool prints them.

Spec: "Legacy / Non-Stack CLI Contract And Exit Codes", Heartbeat status
vocabulary; tests/fixtures/spec-outputs/version-json.txt, config-show-json.txt.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentcoordd.coord.info import config_info, version_info


def recorded(fixtures_dir: Path, name: str) -> dict:
    text = (fixtures_dir / "spec-outputs" / name).read_text()
    body = text.split("# stdout:\n", 1)[1].split("# stderr:", 1)[0]
    return json.loads(body)


def test_version_matches_the_existing_tool(fixtures_dir: Path) -> None:
    assert version_info() == recorded(fixtures_dir, "version-json.txt")


def test_config_show_matches_the_existing_tool_plus_the_contract_working_statuses(
    fixtures_dir: Path,
) -> None:
    expected = recorded(fixtures_dir, "config-show-json.txt")
    # docs/compat.md: the telemetry contract's working statuses are listed too.
    expected["heartbeat_status_vocabulary"]["working"] += ["queued", "token_limit_pause", "continued"]
    # docs/compat.md#reservation-exit-code: exit 4 now that reserve emits it.
    expected["exit_codes"]["reservation_refused"] = 4
    assert config_info() == expected


def test_exit_code_table_lists_only_emitted_codes() -> None:
    """4 is listed now that the capacity reservation commands emit it (the spec: config
    show reports exit 4 once those commands exist)."""
    codes = config_info()["exit_codes"]
    assert sorted(codes.values()) == [1, 2, 3, 4, 64]
    assert codes["reservation_refused"] == 4


def test_vocabulary_aliases_all_resolve_to_canonical_statuses() -> None:
    vocabulary = config_info()["heartbeat_status_vocabulary"]
    canonical = set(vocabulary["working"]) | set(vocabulary["terminal"])
    assert set(vocabulary["aliases"].values()) <= canonical
    assert "released" not in vocabulary["aliases"] and "released" not in canonical


def test_payloads_are_fresh_copies() -> None:
    config_info()["heartbeat_status_vocabulary"]["working"].append("x")
    assert "x" not in config_info()["heartbeat_status_vocabulary"]["working"]
