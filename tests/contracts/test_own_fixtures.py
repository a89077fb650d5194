"""Every fixture of ours validates as its folder says, by JSON Schema and by Struct."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcoordd.model import validation as validate
from contract_harness import (
    REPO,
    load,
    procedural_expectations,
    replay,
    schema_errors,
    target_of,
    verdict_of,
)

FIXTURES = sorted(
    p
    for root in (REPO / "schema/state/v1", REPO / "contracts")
    for p in root.rglob("fixtures/**/*.json")
)


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_every_contract_has_fixtures_in_each_folder() -> None:
    dirs = {"fixtures", "capacity-reservation", "usage", "route", "merge-authority",
            "batch-completion", "batch-blocker"}
    seen = {(p.relative_to(REPO / "schema/state/v1").parts[0], verdict_of(p))
            for p in FIXTURES if "schema" in p.parts}
    for d in dirs:
        for verdict in ("valid", "invalid", "replay"):
            assert (d, verdict) in seen, (d, verdict)


@pytest.mark.parametrize("path", FIXTURES, ids=_id)
def test_fixture_verdict(path: Path) -> None:
    data = load(path)
    verdict = verdict_of(path)
    if verdict == "replay":
        assert replay(path, data) == []
        return
    family, target = target_of(path, data)
    by_schema = schema_errors(family, target)
    record, by_struct = validate.struct_violations(family, target)
    if verdict == "valid":
        assert by_schema == []
        assert validate.validate_record(family, target) == []
    elif verdict == "invalid":
        assert by_schema, "JSON Schema accepted an invalid fixture"
        found = validate.validate_record(family, target)
        assert found, "Struct and procedural checks accepted an invalid fixture"
        assert all(v.path.startswith("$") for v in found)
    else:  # procedural: the schema cannot tell, the procedural check must
        assert by_schema == []
        assert by_struct == []
        assert validate.procedural_violations(family, record, target)
        assert procedural_expectations(family, target, data) == []
