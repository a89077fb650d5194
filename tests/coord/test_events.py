"""record-event: free-form and typed operational-signal events, status vocabulary.

Spec: CLI (record-event), Typed operational-signal events, Event Schema;
conformance/golden record_event_* scenarios.
"""

from __future__ import annotations

from agentcoordd.store.base import Capabilities

import json
import re
from pathlib import Path

import pytest

from agentcoordd.coord import events
from agentcoordd.coord.context import Ctx
from agentcoordd.model.errors import UsageError
from agentcoordd.model.identity import Identity
from agentcoordd.model.records import Metadata
from agentcoordd.model.timefmt import format_ts
from agentcoordd.store.base import Unavailable
from coord_support import HOSTILE, ODD_TEXT, UNSTORABLE

EVENT_ID = re.compile(r"\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{8}")


def batch_events(root: Path, batch: str = "b1") -> list[dict]:
    directory = root / "events" / batch
    found = [json.loads(p.read_text()) for p in directory.glob("*.json")] if directory.is_dir() else []
    return sorted(found, key=lambda e: e["event_id"])


def all_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


async def record(ctx, type="note", batch_id="b1", **kwargs):
    return await events.record_event(ctx, batch_id=batch_id, type=type, **kwargs)


def payload(event: dict) -> dict:
    return {k: v for k, v in event.items() if k not in ("schema_version", "event_id", "batch_id", "at")}


# ---- ordinary events -------------------------------------------------------------------


async def test_event_is_written_under_its_batch_with_a_time_sortable_id(ctx, root, clock):
    result = await record(ctx, "phase", lane="docs", agent_id="worker-3972", repo="acme/widgets",
                          target="3972", branch="jg/3972-docs", message="running tests",
                          meta=Metadata(thread_handle="thread-docs", host="codex", operator="justin",
                                        phase="validating"))
    event = result["event"]
    assert EVENT_ID.fullmatch(event["event_id"])
    assert event["event_id"].startswith(clock.now().strftime("%Y%m%dT%H%M%S.%f"))
    assert result["path"] == f"events/b1/{event['event_id']}.json"
    assert json.loads((root / result["path"]).read_text()) == {
        "schema_version": 1,
        "event_id": event["event_id"],
        "batch_id": "b1",
        "type": "phase",
        "lane": "docs",
        "agent_id": "worker-3972",
        "repo": "acme/widgets",
        "target": "3972",
        "branch": "jg/3972-docs",
        "thread_handle": "thread-docs",
        "host": "codex",
        "operator": "justin",
        "phase": "validating",
        "message": "running tests",
        "at": format_ts(clock.now()),
    }


async def test_events_at_the_same_instant_get_distinct_ids(ctx, root):
    for _ in range(20):
        await record(ctx)
    assert len({e["event_id"] for e in batch_events(root)}) == 20


async def test_batch_id_with_a_colon_and_a_lane_with_a_dot_are_accepted(ctx, root):
    """Golden bad_ids step 10."""
    await record(ctx, batch_id="b:1", lane="a.b")
    (event,) = batch_events(root, "b:1")
    assert (event["batch_id"], event["lane"]) == ("b:1", "a.b")


async def test_free_form_types_stay_unvalidated(ctx, root):
    """Golden record_event_typed_valid step 5: a free-form type may carry any typed field."""
    await record(ctx, "note", typed={"severity": "P9"}, message="free-form type skips typed validation")
    (event,) = batch_events(root)
    assert payload(event) == {
        "type": "note",
        "message": "free-form type skips typed validation",
        "severity": "P9",
    }


# ---- typed events ------------------------------------------------------------------------

VALID_TYPED = [
    pytest.param("help_requested", {"reason": "question"}, None, id="help_requested"),
    pytest.param("help_requested", {"reason": "blocked-user-input"}, None, id="help_requested-blocked"),
    pytest.param("help_requested", {"reason": "permission"}, None, id="help_requested-permission"),
    pytest.param("escalation_requested", {"from_route": "gpt/low", "to_route": "gpt/high",
                                          "evidence": "ci red twice"}, None, id="escalation_requested"),
    pytest.param("error", {"severity": "P1", "category": "ci"}, "boom", id="error"),
    pytest.param("human_intervention", {"kind": "manual-fix"}, None, id="human_intervention"),
]


@pytest.mark.parametrize(("event_type", "typed", "message"), VALID_TYPED)
async def test_typed_event_with_its_required_fields_is_recorded(ctx, root, event_type, typed, message):
    await record(ctx, event_type, typed=typed, message=message)
    (event,) = batch_events(root)
    expected = {"type": event_type, **typed}
    if message:
        expected["message"] = message
    assert payload(event) == expected


@pytest.mark.parametrize(
    ("event_type", "typed", "message", "flag"),
    [
        ("help_requested", {}, None, "--reason"),
        ("escalation_requested", {"from_route": "a", "to_route": "b"}, None, "--evidence"),
        ("escalation_requested", {"to_route": "b", "evidence": "e"}, None, "--from-route"),
        ("escalation_requested", {"from_route": "a", "to_route": "b", "evidence": "  "}, None,
         "--evidence"),  # blank counts as missing
        ("error", {"severity": "P1", "category": "ci"}, None, "--message"),
        ("error", {"severity": "P1"}, "boom", "--category"),
        ("error", {"category": "ci"}, "boom", "--severity"),
        ("human_intervention", {}, None, "--kind"),
    ],
)
async def test_typed_event_missing_a_required_field_is_refused(ctx, root, event_type, typed, message, flag):
    with pytest.raises(UsageError) as excinfo:
        await record(ctx, event_type, typed=typed, message=message)
    assert excinfo.value.exit_code == 1
    assert str(excinfo.value) == f"missing required {flag}"  # agent-coord's words
    assert all_files(root) == []


@pytest.mark.parametrize(
    ("event_type", "typed", "message"),
    [
        ("help_requested", {"reason": "bored"}, None),
        ("error", {"severity": "P4", "category": "ci"}, "boom"),
        ("error", {"severity": "p1", "category": "ci"}, "boom"),
        ("human_intervention", {"kind": "manual_fix"}, None),
    ],
)
async def test_typed_event_with_a_value_outside_its_set_is_refused(ctx, root, event_type, typed, message):
    with pytest.raises(UsageError, match=r"^--(reason|severity|kind) must be one of: ") as excinfo:
        await record(ctx, event_type, typed=typed, message=message)
    assert excinfo.value.exit_code == 1
    assert all_files(root) == []


@pytest.mark.parametrize(
    ("event_type", "typed", "message", "foreign"),
    [
        ("help_requested", {"reason": "question", "severity": "P1"}, None, "--severity"),
        ("human_intervention", {"kind": "drain", "reason": "question"}, None, "--reason"),
        ("error", {"severity": "P1", "category": "ci", "evidence": "x"}, "boom", "--evidence"),
        ("escalation_requested", {"from_route": "a", "to_route": "b", "evidence": "e", "kind": "drain"}, None,
         "--kind"),
    ],
)
async def test_typed_event_rejects_another_types_fields(ctx, root, event_type, typed, message, foreign):
    with pytest.raises(UsageError) as excinfo:
        await record(ctx, event_type, typed=typed, message=message)
    assert foreign in str(excinfo.value)
    assert all_files(root) == []


@pytest.mark.parametrize("blank", ["", "   "])
async def test_escalation_fields_must_be_non_empty(ctx, root, blank):
    with pytest.raises(UsageError):
        await record(ctx, "escalation_requested", typed={"from_route": "a", "to_route": blank, "evidence": "e"})
    assert all_files(root) == []


async def test_unknown_typed_field_names_are_refused(ctx, root):
    with pytest.raises(UsageError, match="unknown typed event field"):
        await record(ctx, "note", typed={"batch_path": "../x"})
    assert all_files(root) == []


async def test_typed_fields_never_become_path_segments(ctx, root):
    await record(ctx, "escalation_requested", typed={"from_route": "../../x", "to_route": "a/b", "evidence": "e"})
    assert [p.parent.name for p in (root / "events").rglob("*.json")] == ["b1"]


# ---- status vocabulary on events ---------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "status", "status_raw"),
    [
        ("In-Progress", "in_progress", "In-Progress"),
        ("completed", "done", "completed"),
        ("ready-to-merge", "ready", "ready-to-merge"),
        ("done", "done", None),
        ("released", "released", "released"),
        ("weird_value", "weird_value", "weird_value"),
    ],
)
async def test_event_status_is_normalized_like_heartbeats(ctx, root, given, status, status_raw):
    """Golden record_event_status_vocabulary."""
    await record(ctx, "phase", lane="backend", status=given, message=given)
    (event,) = batch_events(root)
    assert event["status"] == status
    assert event.get("status_raw") == status_raw


async def test_unknown_event_status_warns_without_failing(ctx, root):
    await record(ctx, "phase", status="weird_value")
    assert len(batch_events(root)) == 1
    warning, unregistered = ctx.warnings  # the batch is not registered either (issue 20)
    assert 'status "weird_value" is not in the canonical status vocabulary' in warning
    assert unregistered.endswith("is not registered; event recorded anyway")


# ---- attribution -------------------------------------------------------------------------


async def test_event_stamps_the_attribution_tuple(store, root, clock):
    await record(Ctx(store, clock, Identity("m5", "s-1", "agent_coord_session_id")))
    (event,) = batch_events(root)
    assert (event["machine_id"], event["session_id"], event["session_source"]) == (
        "m5", "s-1", "agent_coord_session_id",
    )


async def test_event_without_identity_carries_no_attribution(ctx, root):
    await record(ctx)
    (event,) = batch_events(root)
    assert not {"machine_id", "session_id", "session_source"} & set(event)


# ---- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE)
async def test_a_hostile_batch_id_is_a_usage_error_leaving_no_file(ctx, root, value):
    with pytest.raises(UsageError) as excinfo:
        await events.record_event(ctx, batch_id=value, type="note")
    assert excinfo.value.exit_code == 1
    assert "\n" not in str(excinfo.value)
    assert all_files(root) == []


@pytest.mark.parametrize("value", UNSTORABLE)
@pytest.mark.parametrize("field", ["lane", "agent_id", "repo", "target"])
async def test_unstorable_payload_text_is_a_usage_error_leaving_no_file(ctx, root, field, value):
    args = {"batch_id": "b1", "type": "note", field: value}
    with pytest.raises(UsageError) as excinfo:
        await events.record_event(ctx, **args)
    assert "\n" not in str(excinfo.value)
    assert all_files(root) == []


@pytest.mark.parametrize("value", ODD_TEXT)
@pytest.mark.parametrize("field", ["lane", "agent_id", "repo", "target"])
async def test_payload_ids_are_kept_as_given(ctx, root, field, value):
    """agent-coord validates only the path (batch id) and the type; the rest is payload."""
    await events.record_event(ctx, batch_id="b1", type="note", **{field: value})
    (event,) = batch_events(root)
    assert event[field] == value


@pytest.mark.parametrize(("lane", "says"), [("b1:backend", "cannot contain ':'"), (":", "cannot contain ':'"),
                                             ("", "--lane must not be empty")])
async def test_an_event_lane_is_not_empty_nor_a_lane_ref(ctx, root, lane, says):
    with pytest.raises(UsageError, match=says) as excinfo:
        await record(ctx, lane=lane)
    assert excinfo.value.exit_code == 1
    assert all_files(root) == []


@pytest.mark.parametrize("event_type", ["", "  ", "x" * 10_000, "no\x00te", None])
async def test_event_type_is_required_and_bounded(ctx, root, event_type):
    with pytest.raises(UsageError):
        await record(ctx, event_type)
    assert all_files(root) == []


async def test_a_target_without_a_repo_is_kept(ctx, root):
    await record(ctx, target="12")
    (event,) = batch_events(root)
    assert event["target"] == "12" and "repo" not in event


@pytest.mark.parametrize(
    "kwargs",
    [{"terminal": "done"}, {"pr_state": "merged"}, {"evidence_url": "https://e.test/"}, {"workspace": "w"}],
)
async def test_closeout_options_need_type_lane_closed(ctx, root, kwargs):
    with pytest.raises(UsageError, match="lane_closed"):
        await record(ctx, "note", **kwargs)
    assert all_files(root) == []


async def test_typed_fields_do_not_apply_to_lane_closed(ctx, root):
    with pytest.raises(UsageError):
        await record(ctx, "lane_closed", terminal="done", agent_id="a", repo="acme/w", target="1",
                     typed={"severity": "P1"})
    assert all_files(root) == []


# ---- emit: best effort -------------------------------------------------------------------


async def test_emit_without_a_batch_writes_nothing(ctx, root):
    assert await events.emit(ctx, None, "claim.acquired", {"agent_id": "a"}) is None
    assert all_files(root) == []


async def test_emit_turns_a_backend_failure_into_a_warning(store, clock):
    class Down:
        name = "down"

        async def create(self, path, data):
            raise Unavailable("backend unreachable")

    ctx = Ctx(Down(), clock)
    assert await events.emit(ctx, "b1", "claim.released", {"agent_id": "a"}) is None
    assert ctx.warnings == ["claim.released event not recorded: backend unreachable"]


async def test_emit_turns_an_os_error_into_a_warning(clock):
    class Broken:
        capabilities = Capabilities()  # a plain Store: every read goes through it
        name = "broken"

        async def create(self, path, data):
            raise OSError(5, "Input/output error")

    ctx = Ctx(Broken(), clock)
    assert await events.emit(ctx, "b1", "phase.changed", {}) is None
    assert len(ctx.warnings) == 1 and "phase.changed" in ctx.warnings[0]
