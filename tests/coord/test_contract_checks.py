"""Writes checked against the published contracts (issue 12 item 4).

record-event (ordinary and lane_closed) and register-batch run the same
checks as `agentcoordctl validate`; a violation is a UsageError (exit 1) whose
message is validate's `$.path: message`, never an OperationalError (exit 2).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from agentcoordd.coord import batches, closeout, events
from agentcoordd.coord.context import Ctx
from agentcoordd.model.validation import contract_error, one_line, validate_record
from agentcoordd.model.errors import EXIT_USAGE, UsageError

LANE_CLOSED = {
    "schema_version": 2, "event_id": "lane_closed-0123456789abcdef", "batch_id": "b1",
    "type": "lane_closed", "lane": "backend", "agent_id": "agent-a", "repo": "acme/widgets",
    "target": "1", "terminal": "done", "workspace": "default",
    "closed_by": {"agent_id": "agent-a", "machine": "m1"}, "at": "2026-01-01T00:00:00Z",
}


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.json"))


@pytest.mark.parametrize(("change", "path"), [
    ({"pr_url": "ftp://x/1"}, "$.pr_url"),
    ({"evidence_url": "not a url"}, "$.evidence_url"),
    ({"repo": "acme"}, "$.repo"),
    ({"branch": ""}, "$.branch"),
    ({"closed_by": {"agent_id": "agent-a"}}, "$.closed_by.machine"),
])
def test_lane_closed_contract_violation_is_a_usage_error_in_validates_words(
        change: dict, path: str) -> None:
    event = {**LANE_CLOSED, **change}
    [first, *_] = validate_record("lane_closed", event)

    with pytest.raises(UsageError) as caught:
        closeout.check_contract(event)

    assert caught.value.exit_code == EXIT_USAGE
    assert caught.value.message == f"lane_closed event violates the lane_closed contract: {one_line(first)}"
    assert first.path == path


def test_valid_lane_closed_passes_the_contract_check() -> None:
    closeout.check_contract(dict(LANE_CLOSED, pr_url="https://github.com/acme/widgets/pull/1"))


def test_explicit_event_is_checked_against_the_event_contract(ctx: Ctx) -> None:
    with pytest.raises(UsageError, match=r"^event violates the event contract: \$\.reason: "
                                         r"type help_requested requires reason$"):
        events.build_event(ctx, "b1", {"type": "help_requested"}, contract=True)


def test_lifecycle_events_keep_their_old_check(ctx: Ctx) -> None:
    path, record = events.build_event(ctx, "b1", {"type": "claim.acquired", "agent_id": "agent-a"})
    assert path.startswith("events/b1/") and record["type"] == "claim.acquired"


async def test_record_event_with_free_form_type_and_unknown_typed_value_is_written(
        ctx: Ctx, root: Path) -> None:
    written = await events.record_event(ctx, batch_id="b1", type="qa.custom", typed={"kind": "anything"})
    assert written["event"]["kind"] == "anything"
    assert len(files(root)) == 1


def test_contract_error_counts_further_violations_on_one_line() -> None:
    error = contract_error("batch", {"batch_id": "b1", "objective": None, "status": None, "lanes": [{}]},
                           "batch manifest")
    assert error is not None
    assert error.message.startswith("batch manifest violates the batch contract: $.objective: must be omitted")
    assert "(+2 more; see `agentcoordctl validate --family batch`)" in error.message
    assert "\n" not in error.message


def test_long_messages_are_bounded() -> None:
    error = contract_error("lane_closed", dict(LANE_CLOSED, at="yesterday"), "lane_closed event")
    assert error is not None and len(error.message) < 400 and "$.at: " in error.message


@pytest.mark.parametrize("manifest", [
    {"batch_id": "b1", "status": None, "lanes": [{"name": "a", "owner": "x", "targets": ["1"]}]},
    {"batch_id": "b1", "lanes": [{"name": "a", "owner": "x", "targets": ["1"], "terminal": 3}]},
    {"batch_id": "b1", "merge_authority": None, "lanes": [{"name": "a", "owner": "x", "targets": ["1"]}]},
    {"batch_id": "b1", "lanes": [{"name": "a", "owner": "x", "targets": ["1"], "route": None}]},
])
async def test_register_batch_contract_violation_writes_nothing(ctx: Ctx, root: Path, manifest: dict) -> None:
    with pytest.raises(UsageError, match="^batch manifest violates the (batch|merge_authority|route) contract: "):
        await batches.register_batch(ctx, manifest=msgspec.json.encode(manifest))
    assert files(root) == []


async def test_register_batch_checks_the_manifest_not_the_stamps(ctx: Ctx, root: Path) -> None:
    manifest = {"batch_id": "b1", "registered_at": 5, "lanes": [{"name": "a", "owner": "x", "targets": ["1"]}]}
    written = await batches.register_batch(ctx, manifest=msgspec.json.encode(manifest))
    assert isinstance(written["batch"]["registered_at"], str)  # a non-timestamp is replaced, as before
