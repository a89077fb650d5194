"""The existing tool's published fixtures, through our Structs and procedural checks.

Deliberate differences are listed in DIFFERENCES (xfail, with the reason).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcoordd.model import validation as validate
from contract_harness import load, procedural_expectations, replay, schema_errors, target_of, verdict_of

# Copied verbatim from ../shared/spec/peer-contracts (tests/fixtures/peer-contracts/README.md).
_PEER = Path(__file__).resolve().parents[1] / "fixtures" / "peer-contracts"
FIXTURES = sorted(str(p.relative_to(_PEER)) for p in _PEER.rglob("fixtures/**/*.json"))
assert len(FIXTURES) == 101, f"tests/fixtures/peer-contracts holds {len(FIXTURES)} fixtures, not 101"

# fixture path -> why we deliberately give a different verdict
DIFFERENCES: dict[str, str] = {}


@pytest.mark.parametrize("rel", FIXTURES)
def test_peer_fixture_verdict(rel: str, fixtures_dir: Path) -> None:
    if rel in DIFFERENCES:
        pytest.xfail(DIFFERENCES[rel])
    path = fixtures_dir / "peer-contracts" / rel
    data = load(path)
    verdict = verdict_of(path)
    if verdict == "replay":
        assert replay(path, data) == []
        return
    family, target = target_of(path, data)
    record, by_struct = validate.struct_violations(family, target)
    if verdict == "valid":
        assert validate.validate_record(family, target) == []
        assert schema_errors(family, target) == []
    elif verdict == "invalid":
        assert validate.validate_record(family, target), (
            "our Struct/procedural checks accept a fixture the published contract rejects"
        )
        assert schema_errors(family, target)
    else:
        assert by_struct == []
        assert validate.procedural_violations(family, record, target)
        assert procedural_expectations(family, target, data) == []
