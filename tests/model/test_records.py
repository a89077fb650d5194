"""Record Structs: the spec's example shapes and the existing tool's records round-trip."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from agentcoordd.model.errors import OperationalError
from agentcoordd.model.records import (
    Batch,
    Claim,
    Event,
    Heartbeat,
    LaneClosed,
    dump,
    load,
)
from agentcoordd.store.local import encode_record

# ---- the spec's examples, copied verbatim from agent-coordination-readme.txt ----

SPEC_CLAIM = json.loads("""
{
  "schema_version": 1,
  "repo": "shakacode/react_on_rails",
  "target": "3969",
  "agent_id": "worker-3969",
  "batch_id": "batch-2026-06-13",
  "branch": "jg-codex/3969-agent-coord-backend",
  "thread_handle": "batch13-backend-quokka",
  "host": "codex",
  "machine_id": "m5",
  "session_id": "019a2f6c-codex-thread",
  "session_source": "codex_thread_id",
  "operator": "justin",
  "phase": "claimed",
  "generation": 3,
  "instance_id": "m5-codex-20260708T180000Z",
  "status": "active",
  "claimed_at": "2026-06-13T00:30:00Z",
  "updated_at": "2026-06-13T00:30:00Z",
  "expires_at": "2026-06-13T04:30:00Z"
}
""")

SPEC_HEARTBEAT = json.loads("""
{
  "schema_version": 1,
  "agent_id": "worker-3969",
  "repo": "shakacode/react_on_rails",
  "target": "3969",
  "batch_id": "batch-2026-06-13",
  "branch": "jg-codex/3969-agent-coord-backend",
  "thread_handle": "batch13-backend-quokka",
  "host": "codex",
  "machine_id": "m5",
  "session_id": "019a2f6c-codex-thread",
  "session_source": "codex_thread_id",
  "pr_url": "https://github.com/shakacode/react_on_rails/pull/3969",
  "dashboard_url": "https://coord.example.test/batches/batch-2026-06-13/backend",
  "operator": "justin",
  "phase": "validating",
  "generation": 3,
  "instance_id": "m5-codex-20260708T180000Z",
  "status": "in_progress",
  "updated_at": "2026-06-13T00:40:00Z",
  "expires_at": "2026-06-13T00:55:00Z"
}
""")

SPEC_EVENT = json.loads("""
{
  "schema_version": 1,
  "event_id": "20260708T235500.123456Z-deadbeef",
  "batch_id": "batch-2026-06-13",
  "type": "phase",
  "lane": "docs",
  "agent_id": "worker-3972",
  "repo": "shakacode/react_on_rails",
  "target": "3972",
  "branch": "jg-codex/3972-docs",
  "thread_handle": "thread-docs",
  "host": "codex",
  "operator": "justin",
  "phase": "validating",
  "message": "running tests",
  "at": "2026-06-13T00:42:00Z"
}
""")

SPEC_BATCH = json.loads("""
{
  "schema_version": 1,
  "batch_id": "batch-2026-06-13",
  "repo": "shakacode/react_on_rails",
  "objective": "Ship backend and docs updates",
  "operator": "justin",
  "dashboard_url": "https://coord.example.test/batches/batch-2026-06-13",
  "lanes": [
    {
      "name": "backend",
      "owner": "worker-3969",
      "targets": ["3969"],
      "thread_handle": "thread-backend",
      "host": "m5",
      "pr_url": "https://github.com/shakacode/react_on_rails/pull/3969",
      "depends_on": []
    },
    {
      "name": "docs",
      "owner": "worker-3972",
      "targets": ["3972"],
      "thread_handle": "thread-docs",
      "host": "m1",
      "depends_on": ["batch-2026-06-13:backend"]
    }
  ],
  "registered_at": "2026-06-13T00:30:00Z",
  "updated_at": "2026-06-13T00:30:00Z"
}
""")

SPEC_EXAMPLES = [
    pytest.param(Claim, SPEC_CLAIM, id="claim"),
    pytest.param(Heartbeat, SPEC_HEARTBEAT, id="heartbeat"),
    pytest.param(Event, SPEC_EVENT, id="event"),
    pytest.param(Batch, SPEC_BATCH, id="batch"),
]

FOREIGN = {
    "x_future_field": {"nested": [1, "two", None], "flag": True},
    "route": "gpt-5.6-sol/xhigh",
    "updated_by": "m5",
}


def round_trip(cls, raw):
    return dump(load(cls, raw), base=raw)


@pytest.mark.parametrize(("cls", "raw"), SPEC_EXAMPLES)
def test_spec_example_loads_and_rewrites_equal(cls, raw):
    assert round_trip(cls, raw) == raw


@pytest.mark.parametrize(("cls", "raw"), SPEC_EXAMPLES)
def test_unknown_fields_survive_a_rewrite_unchanged(cls, raw):
    stored = {**copy.deepcopy(raw), **copy.deepcopy(FOREIGN)}
    assert round_trip(cls, stored) == stored


def test_unknown_fields_on_batch_lanes_survive_a_rewrite():
    stored = copy.deepcopy(SPEC_BATCH)
    stored["lanes"][0]["x_lane_extra"] = {"k": "v"}
    assert round_trip(Batch, stored) == stored


def test_generation_keeps_the_type_its_writer_chose():
    as_string = dict(SPEC_CLAIM, generation="3")
    assert round_trip(Claim, as_string)["generation"] == "3"
    assert round_trip(Claim, SPEC_CLAIM)["generation"] == 3


def test_dump_of_a_new_record_leads_with_required_fields():
    record = load(Claim, SPEC_CLAIM)
    keys = list(dump(record))
    assert keys[:8] == [
        "schema_version", "repo", "target", "agent_id", "status",
        "claimed_at", "updated_at", "expires_at",
    ]


def test_a_known_field_set_to_none_is_removed_on_rewrite():
    record = load(Claim, SPEC_CLAIM)
    record.session_id = None
    rewritten = dump(record, base=SPEC_CLAIM)
    assert "session_id" not in rewritten
    assert rewritten["machine_id"] == "m5"


@pytest.mark.parametrize(
    ("cls", "raw", "missing"),
    [
        (Claim, SPEC_CLAIM, "claimed_at"),
        (Claim, SPEC_CLAIM, "agent_id"),
        (Heartbeat, SPEC_HEARTBEAT, "expires_at"),
        (Event, SPEC_EVENT, "event_id"),
        (Event, SPEC_EVENT, "at"),
        (Batch, SPEC_BATCH, "batch_id"),
    ],
)
def test_missing_required_field_is_an_error_naming_the_path(cls, raw, missing):
    broken = {k: v for k, v in raw.items() if k != missing}
    with pytest.raises(OperationalError) as excinfo:
        load(cls, broken, "some/record.json")
    assert "some/record.json" in str(excinfo.value)
    assert missing in str(excinfo.value)
    assert excinfo.value.exit_code == 2


def test_a_non_object_record_is_an_error_naming_the_path():
    with pytest.raises(OperationalError, match="claims/a/b/1.json"):
        load(Claim, ["not", "an", "object"], "claims/a/b/1.json")


def test_wrong_field_type_is_an_error():
    with pytest.raises(OperationalError):
        load(Heartbeat, dict(SPEC_HEARTBEAT, updated_at=12), "heartbeats/x.json")


# ---- the existing tool's state root ------------------------------------------------


def sample_files(fixtures_dir: Path) -> list[Path]:
    root = fixtures_dir / "state-root-sample"
    return sorted(root.rglob("*.json"))


def record_class(rel: str, raw: dict):
    family = rel.split("/")[0]
    if family == "events":
        return LaneClosed if raw.get("type") == "lane_closed" else Event
    return {"claims": Claim, "heartbeats": Heartbeat, "batches": Batch}[family]


def test_every_sample_record_loads_rewrites_and_compares_equal(fixtures_dir):
    root = fixtures_dir / "state-root-sample"
    files = sample_files(fixtures_dir)
    assert len(files) == 12
    for file in files:
        rel = file.relative_to(root).as_posix()
        raw = json.loads(file.read_bytes())
        assert round_trip(record_class(rel, raw), raw) == raw, rel


def test_sample_records_are_byte_identical_to_our_encoding(fixtures_dir):
    """Same pretty JSON as the existing tool: 2-space indent, `": "`, trailing newline."""
    for file in sample_files(fixtures_dir):
        data = file.read_bytes()
        assert encode_record(json.loads(data), file.name) == data, file.name


# ---- the lane_closed v2 contract ---------------------------------------------------


@pytest.fixture
def lane_closed_validator(fixtures_dir):
    jsonschema = pytest.importorskip("jsonschema")
    contracts = fixtures_dir / "peer-contracts" / "contracts"
    schema = json.loads((contracts / "state-schema-v2.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_contract_fixture_validates_loads_and_round_trips(fixtures_dir, lane_closed_validator):
    fixture = json.loads(
        (fixtures_dir / "peer-contracts/contracts/fixtures/v2/lane_closed.json").read_text()
    )
    lane_closed_validator.validate(fixture)
    assert round_trip(LaneClosed, fixture) == fixture


def test_sample_lane_closed_record_passes_the_v2_contract(fixtures_dir, lane_closed_validator):
    path = fixtures_dir / "state-root-sample/events/batch-0001/lane_closed-76a23cdf1916414d.json"
    raw = json.loads(path.read_text())
    lane_closed_validator.validate(raw)
    assert round_trip(LaneClosed, raw) == raw


@pytest.mark.parametrize(
    "change",
    [
        {"schema_version": 1},
        {"terminal": "merged"},
        {"type": "lane_closed_v2"},
        {"closed_by": {"agent_id": "a"}},
    ],
)
def test_lane_closed_struct_refuses_what_the_contract_refuses(fixtures_dir, lane_closed_validator, change):
    fixture = json.loads(
        (fixtures_dir / "peer-contracts/contracts/fixtures/v2/lane_closed.json").read_text()
    )
    bad = dict(fixture, **change)
    assert not lane_closed_validator.is_valid(bad)
    with pytest.raises(OperationalError):
        load(LaneClosed, bad, "events/b/lane_closed-x.json")
