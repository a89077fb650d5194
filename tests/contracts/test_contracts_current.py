"""The committed schemas under contracts/ and schema/state/v1/ are what the Structs generate."""

from __future__ import annotations

import json

import jsonschema
import pytest

from agentcoordd.model import contracts
from contract_harness import REPO

OUTPUTS = contracts.outputs()


@pytest.mark.parametrize("rel", sorted(OUTPUTS))
def test_committed_schema_matches_the_structs(rel: str) -> None:
    committed = REPO / rel
    assert committed.is_file(), f"{rel} missing: run python -m agentcoordd.model.contracts --write"
    assert committed.read_text(encoding="utf-8") == OUTPUTS[rel], (
        f"{rel} is out of date with the Structs: run "
        "python -m agentcoordd.model.contracts --write contracts/ --write schema/state/v1/"
    )


@pytest.mark.parametrize("rel", sorted(OUTPUTS))
def test_every_schema_is_valid_draft_2020_12_with_contract_metadata(rel: str) -> None:
    doc = json.loads(OUTPUTS[rel])
    jsonschema.Draft202012Validator.check_schema(doc)
    assert doc["$schema"] == contracts.DRAFT
    assert {"$id", "title", "description", "x-contract-version", "x-record-family"} <= doc.keys()


@pytest.mark.parametrize("family", ["claim", "heartbeat", "batch", "event", "lane_closed"])
def test_record_families_allow_unknown_fields_and_never_null_optionals(family: str) -> None:
    contract = contracts.by_family()[family]
    doc = contracts.schema_for(contract)
    root = doc["$defs"][doc["$ref"].rsplit("/", 1)[1]]
    assert root["additionalProperties"] is True
    for name, prop in root["properties"].items():
        if name not in root.get("required", []):
            assert {"type": "null"} not in prop.get("anyOf", []), name


def test_check_mode_reports_a_stale_file(tmp_path) -> None:
    for rel, text in OUTPUTS.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    assert contracts.main(["--check", str(tmp_path)]) == 0
    (tmp_path / "contracts/claim-schema-v1.json").write_text("{}\n", encoding="utf-8")
    assert contracts.main(["--check", str(tmp_path)]) == 1
