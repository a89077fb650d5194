"""heartbeat: upsert heartbeats/<agent-id>.json, status vocabulary, phase.changed.

Spec: CLI (heartbeat), Heartbeat Schema, Heartbeat status vocabulary, Auto-emitted
lifecycle events; conformance/golden heartbeat_* scenarios.
"""

from __future__ import annotations

import json

import pytest

from agentcoordd.coord import heartbeats
from agentcoordd.coord.batches import register_batch
from agentcoordd.coord.context import Ctx
from agentcoordd.model.errors import OperationalError, UsageError
from agentcoordd.model.identity import Identity
from agentcoordd.model.records import Metadata
from agentcoordd.store.base import Unavailable
from coord_support import HOSTILE, ODD_TEXT, UNSTORABLE, all_files, batch_events, read, ts

HB = "heartbeats/agent-a.json"





async def beat(ctx, agent="agent-a", **kwargs):
    return await heartbeats.heartbeat(ctx, agent_id=agent, **kwargs)


# ---- the record ------------------------------------------------------------------------


async def test_first_heartbeat_writes_the_record_with_a_fifteen_minute_ttl(ctx, root, clock):
    result = await beat(ctx)
    assert result["path"] == HB
    assert read(root, HB) == {
        "schema_version": 1,
        "agent_id": "agent-a",
        "status": "in_progress",
        "updated_at": ts(clock),
        "expires_at": ts(clock, minutes=15),
    }


async def test_heartbeat_records_lane_fields_and_metadata(ctx, root):
    await beat(
        ctx,
        repo="acme/widgets",
        target="1",
        batch_id="b1",
        branch="feat/1",
        meta=Metadata(thread_handle="t", host="codex", operator="justin", generation=3, instance_id="i-1"),
    )
    record = read(root, HB)
    assert {k: record[k] for k in ("repo", "target", "batch_id", "branch", "thread_handle", "host",
                                   "operator", "generation", "instance_id")} == {
        "repo": "acme/widgets", "target": "1", "batch_id": "b1", "branch": "feat/1",
        "thread_handle": "t", "host": "codex", "operator": "justin", "generation": 3, "instance_id": "i-1",
    }


async def test_ttl_sets_the_expiry(ctx, root, clock):
    await beat(ctx, ttl=300)
    assert read(root, HB)["expires_at"] == ts(clock, minutes=5)


async def test_renewal_keeps_earlier_fields_and_moves_the_timestamps(ctx, root, clock):
    """Golden heartbeat_phase_change: fields preserved on renewal, ttl back to the default."""
    await beat(ctx, repo="acme/widgets", target="1", batch_id="b1", branch="feat/1",
               meta=Metadata(phase="implementing"), ttl=300)
    clock.advance(minutes=4)
    await beat(ctx, batch_id="b1", meta=Metadata(phase="implementing"))
    assert read(root, HB) == {
        "schema_version": 1,
        "agent_id": "agent-a",
        "repo": "acme/widgets",
        "target": "1",
        "batch_id": "b1",
        "branch": "feat/1",
        "phase": "implementing",
        "status": "in_progress",
        "updated_at": ts(clock),
        "expires_at": ts(clock, minutes=15),
    }


async def test_a_beat_on_the_same_lane_keeps_its_fields_and_drops_foreign_ones(ctx, store, root):
    """agent-coord: the stored lane and metadata fields carry forward, nothing else."""
    await beat(ctx, batch_id="b1", meta=Metadata(thread_handle="th"))
    current = await store.get(HB)
    await store.replace(HB, dict(current.data, route={"model": "m", "effort": "high"}), current.version)
    await beat(ctx, status="blocked", batch_id="b1")
    record = read(root, HB)
    assert record["thread_handle"] == "th" and record["batch_id"] == "b1"
    assert "route" not in record


async def test_a_beat_on_another_lane_keeps_only_the_repo_and_target_it_did_not_change(ctx, root):
    await beat(ctx, repo="acme/widgets", target="1", batch_id="b1", meta=Metadata(operator="op"))
    await beat(ctx, branch="feat/9")
    record = read(root, HB)
    assert (record["repo"], record["target"], record["branch"]) == ("acme/widgets", "1", "feat/9")
    assert "batch_id" not in record and "operator" not in record
    await beat(ctx, repo="acme/other")
    record = read(root, HB)
    assert record["repo"] == "acme/other" and "target" not in record


async def test_state_root_sample_heartbeat_renews_with_every_field_kept(fixtures_dir, store, root, clock):
    sample = json.loads((fixtures_dir / "state-root-sample/heartbeats/agent-000001.json").read_text())
    await store.create("heartbeats/agent-000001.json", sample)
    await beat(Ctx(store, clock), "agent-000001", status="done")
    renewed = read(root, "heartbeats/agent-000001.json")
    assert {k: v for k, v in renewed.items() if k not in ("updated_at", "expires_at")} == {
        k: v for k, v in sample.items() if k not in ("updated_at", "expires_at")
    }


# ---- status vocabulary -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "status", "status_raw"),
    [
        ("Done", "done", "Done"),
        ("validating", "in_progress", "validating"),
        ("waiting-on-checks-or-review", "waiting_on_checks_or_review", "waiting-on-checks-or-review"),
        ("released", "released", "released"),
        ("blocked_user_input", "blocked_user_input", None),
        (None, "in_progress", None),
    ],
)
async def test_status_is_normalized_with_status_raw_when_changed(ctx, root, given, status, status_raw):
    """Golden heartbeat_status_vocabulary."""
    await beat(ctx, status=given)
    record = read(root, HB)
    assert record["status"] == status
    assert record.get("status_raw") == status_raw


async def test_unknown_status_warns_and_still_succeeds(ctx, root):
    await beat(ctx, status="mystery")
    assert read(root, HB)["status"] == "mystery"
    (warning,) = ctx.warnings
    assert warning.startswith('status "mystery" is not in the canonical status vocabulary')


async def test_unknown_status_is_warned_about_before_a_bad_ttl_refuses(ctx, root):
    """agent-coord's order (differential tester): the status warning, then the TTL error."""
    with pytest.raises(UsageError, match="--ttl must be positive"):
        await beat(ctx, status="mystery", ttl=-5)
    (warning,) = ctx.warnings
    assert warning.startswith('status "mystery" is not in the canonical status vocabulary')
    assert all_files(root) == []


async def test_known_status_does_not_warn(ctx):
    await beat(ctx, status="Done")
    assert ctx.warnings == []


async def test_canonical_rewrite_clears_a_stale_status_raw(ctx, root):
    await beat(ctx, status="mystery")
    await beat(ctx, status="blocked_user_input")
    assert "status_raw" not in read(root, HB)


# ---- phase.changed -------------------------------------------------------------------------


async def test_phase_transition_emits_phase_changed_with_previous_phase(ctx, root, clock):
    """Golden heartbeat_phase_change step 3."""
    await beat(ctx, repo="acme/widgets", target="1", batch_id="b1", branch="feat/1",
               meta=Metadata(phase="implementing"))
    await beat(ctx, batch_id="b1", meta=Metadata(phase="validating"))
    (event,) = batch_events(root)
    del event["event_id"]
    assert event == {
        "schema_version": 1,
        "batch_id": "b1",
        "type": "phase.changed",
        "agent_id": "agent-a",
        "repo": "acme/widgets",
        "target": "1",
        "branch": "feat/1",
        "message": "phase implementing -> validating",
        "previous_phase": "implementing",
        "phase": "validating",
        "at": ts(clock),
    }


async def test_a_phase_change_names_the_lane_of_the_registered_batch(ctx, root):
    manifest = {"batch_id": "b1", "repo": "acme/widgets", "lanes": [
        {"name": "api", "owner": "agent-a", "targets": ["1"]},
        {"name": "ui", "owner": "agent-a", "targets": ["2"]}]}
    await register_batch(ctx, manifest=json.dumps(manifest).encode())
    await beat(ctx, repo="acme/widgets", target="1", batch_id="b1", meta=Metadata(phase="implementing"))
    await beat(ctx, batch_id="b1", meta=Metadata(phase="validating"))
    (event,) = [e for e in batch_events(root) if e["type"] == "phase.changed"]
    assert (event["lane"], event["target"]) == ("api", "1")


async def test_first_phase_assignment_emits_nothing(ctx, root):
    await beat(ctx, batch_id="b1")
    await beat(ctx, batch_id="b1", meta=Metadata(phase="implementing"))
    assert batch_events(root) == []


async def test_same_phase_renewal_emits_nothing(ctx, root):
    await beat(ctx, batch_id="b1", meta=Metadata(phase="implementing"))
    await beat(ctx, batch_id="b1", meta=Metadata(phase="implementing"))
    await beat(ctx, batch_id="b1")
    assert batch_events(root) == []


async def test_phase_change_without_a_batch_emits_nothing(ctx, root):
    await beat(ctx, meta=Metadata(phase="implementing"))
    await beat(ctx, meta=Metadata(phase="validating"))
    assert not (root / "events").exists()


async def test_phase_change_uses_the_batch_recorded_on_the_heartbeat(ctx, root):
    await beat(ctx, batch_id="b1", meta=Metadata(phase="implementing"))
    await beat(ctx, meta=Metadata(phase="validating"))
    assert [e["type"] for e in batch_events(root)] == ["phase.changed"]


async def test_failed_phase_event_write_is_a_warning_not_a_failed_heartbeat(store, root, clock):
    class FailingEvents:
        name = store.name

        async def create(self, path, data):
            if path.startswith("events/"):
                raise Unavailable(f"cannot write {path}")
            return await store.create(path, data)

        def __getattr__(self, name):
            return getattr(store, name)

    await beat(Ctx(store, clock), batch_id="b1", meta=Metadata(phase="implementing"))
    ctx = Ctx(FailingEvents(), clock)
    await beat(ctx, batch_id="b1", meta=Metadata(phase="validating"))
    assert read(root, HB)["phase"] == "validating"
    assert len(ctx.warnings) == 1 and "phase.changed" in ctx.warnings[0]


# ---- attribution ---------------------------------------------------------------------------


async def test_heartbeat_stamps_the_attribution_tuple(store, root, clock):
    await beat(Ctx(store, clock, Identity("m5", "019a2f6c-codex-thread", "codex_thread_id")))
    record = read(root, HB)
    assert (record["machine_id"], record["session_id"], record["session_source"]) == (
        "m5", "019a2f6c-codex-thread", "codex_thread_id",
    )


async def test_renewal_without_identity_preserves_attribution(store, root, clock):
    await beat(Ctx(store, clock, Identity("m5", "s1", "agent_coord_session_id")))
    await beat(Ctx(store, clock))
    assert (read(root, HB)["machine_id"], read(root, HB)["session_id"]) == ("m5", "s1")


async def test_renewal_from_a_new_machine_clears_the_stale_session(store, root, clock):
    await beat(Ctx(store, clock, Identity("m5", "s1", "agent_coord_session_id")))
    await beat(Ctx(store, clock, Identity(machine_id="m1")))
    record = read(root, HB)
    assert record["machine_id"] == "m1" and "session_id" not in record and "session_source" not in record


async def test_renewal_with_a_new_session_clears_the_stale_machine(store, root, clock):
    await beat(Ctx(store, clock, Identity("m5", "s1", "agent_coord_session_id")))
    await beat(Ctx(store, clock, Identity(session_id="s2", session_source="codex_thread_id")))
    record = read(root, HB)
    assert "machine_id" not in record and record["session_id"] == "s2"


# ---- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE)
async def test_a_hostile_agent_id_is_a_usage_error_leaving_no_file(ctx, root, value):
    with pytest.raises(UsageError) as excinfo:
        await heartbeats.heartbeat(ctx, agent_id=value)
    assert excinfo.value.exit_code == 1
    assert "\n" not in str(excinfo.value)
    assert all_files(root) == []


@pytest.mark.parametrize("value", UNSTORABLE)
@pytest.mark.parametrize("field", ["repo", "target", "batch_id", "branch"])
async def test_unstorable_lane_text_is_a_usage_error_leaving_no_file(ctx, root, field, value):
    with pytest.raises(UsageError):
        await heartbeats.heartbeat(ctx, agent_id="agent-a", **{field: value})
    assert all_files(root) == []


@pytest.mark.parametrize("value", ODD_TEXT)
@pytest.mark.parametrize("field", ["repo", "target", "batch_id"])
async def test_lane_fields_are_kept_as_given(ctx, root, field, value):
    """agent-coord stores what the agent says it works on; an unusable batch id only
    costs the phase event (a warning)."""
    await heartbeats.heartbeat(ctx, agent_id="agent-a", **{field: value})
    assert read(root, HB)[field] == value


async def test_a_phase_change_for_an_unusable_batch_id_is_a_warning(ctx, root):
    await heartbeats.heartbeat(ctx, agent_id="agent-a", batch_id="../x", meta=Metadata(phase="p1"))
    await heartbeats.heartbeat(ctx, agent_id="agent-a", meta=Metadata(phase="p2"))
    assert read(root, HB)["phase"] == "p2"
    assert len(ctx.warnings) == 1
    assert ctx.warnings[0].startswith("phase.changed event not recorded: invalid batch-id: ../x (want ")


async def test_heartbeat_for_an_agent_id_with_a_colon(ctx, root):
    """Golden bad_ids step 8: `heartbeat --agent-id a:b` is accepted."""
    await beat(ctx, "a:b")
    assert read(root, "heartbeats/a:b.json")["agent_id"] == "a:b"


async def test_a_target_without_a_repo_is_kept(ctx, root):
    await heartbeats.heartbeat(ctx, agent_id="agent-a", target="1")
    assert read(root, HB)["target"] == "1" and "repo" not in read(root, HB)


@pytest.mark.parametrize("ttl", [0, -5, True, 2.5, "900"])
async def test_ttl_must_be_a_positive_integer(ctx, root, ttl):
    with pytest.raises(UsageError, match="--ttl"):
        await beat(ctx, ttl=ttl)
    assert all_files(root) == []


@pytest.mark.parametrize("status", ["a" * 10_000, "do\x00ne", "\udcff"])
async def test_bad_status_is_a_usage_error(ctx, root, status):
    with pytest.raises(UsageError):
        await beat(ctx, status=status)
    assert all_files(root) == []


@pytest.mark.parametrize("status", ["", "   "])
async def test_a_blank_status_is_kept_verbatim_with_a_warning(ctx, root, status):
    """agent-coord: not in the vocabulary, so stored as given with a status_raw copy."""
    await beat(ctx, status=status)
    record = read(root, HB)
    assert (record["status"], record["status_raw"]) == (status, status)
    assert any("not in the canonical status vocabulary" in w for w in ctx.warnings)


async def test_a_synthetic_kind_without_synthetic_is_kept(ctx, root):
    await beat(ctx, meta=Metadata(synthetic_kind="smoke"))
    assert read(root, HB)["synthetic_kind"] == "smoke"


@pytest.mark.parametrize("stored", [{"agent_id": "agent-a", "phase": "x"}, {}, "str", None, [1], 42])
async def test_a_stored_value_that_is_not_a_heartbeat_is_overwritten(ctx, store, root, stored):
    """The agent's own record; agent-coord overwrites it (recorded: non_object_state_records)."""
    await store.create(HB, stored)
    await beat(ctx)
    record = json.loads((root / HB).read_text())
    assert record["agent_id"] == "agent-a" and record["status"] == "in_progress"
    assert "phase" not in record  # nothing of an invalid record is kept
