"""health: each Dashboard Health Signal and each QA state, on generated state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentcoordd.coord import claims, heartbeats, telemetry
from agentcoordd.coord.batches import register_batch
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.events import record_event
from agentcoordd.coord.health import FIRST_HEARTBEAT_GRACE, health, prompt_drift
from agentcoordd.model.identity import Identity
from agentcoordd.store.local import LocalStore

REPO = "o/r"
PROMPT = "Repository: o/r\nBatch id: b1\nLane a: owner w-a, PR #1\nLane b: owner w-b, PR #2\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def ctx(root: Path, clock) -> Ctx:  # noqa: ANN001
    return Ctx(LocalStore(root), clock, Identity(machine_id="ws-1"))


async def _batch(ctx: Ctx, batch_id: str = "b1", prompt: str | None = PROMPT, **extra: Any) -> None:
    manifest = {
        "batch_id": batch_id,
        "repo": REPO,
        "targets": [{"type": "pull_request", "target": "1", "url": "https://github.com/o/r/pull/1"},
                    {"type": "pull_request", "target": "2", "url": "https://github.com/o/r/pull/2"}],
        "lanes": [{"name": "a", "owner": "w-a", "targets": ["1"]}, {"name": "b", "owner": "w-b", "targets": ["2"]}],
        **extra,
    }
    await register_batch(ctx, manifest=json.dumps(manifest).encode(), launch_prompt=prompt)


async def _clean(ctx: Ctx) -> None:
    """A batch whose telemetry is complete: every health signal stays quiet."""
    await _batch(ctx)
    for lane, target in (("a", "1"), ("b", "2")):
        await claims.claim(ctx, agent_id=f"w-{lane}", repo=REPO, target=target, batch_id="b1")
        await heartbeats.heartbeat(ctx, agent_id=f"w-{lane}", repo=REPO, target=target, batch_id="b1")


def _signals(payload: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [w for w in payload["warnings"] if w["signal"] == name]


async def test_complete_telemetry_is_clean_with_exit_0(ctx: Ctx) -> None:
    await _clean(ctx)

    result = await health(ctx)

    assert result["warnings"] == []
    assert result["verdict"] == "clean"
    assert result["exit_code"] == 0


async def test_records_without_machine_identity_warn(ctx: Ctx, root: Path) -> None:
    await _clean(ctx)
    bare = Ctx(ctx.store, ctx.clock)  # no AGENT_COORD_MACHINE_ID
    await heartbeats.heartbeat(bare, agent_id="w-c", batch_id="b1")
    # `host` is the app surface, not a machine label; `hostname` counts.
    (root / "heartbeats" / "w-d.json").write_text(json.dumps(
        {"schema_version": 1, "agent_id": "w-d", "status": "in_progress", "host": "codex", "hostname": "box",
         "updated_at": "2026-06-13T00:30:00Z", "expires_at": "2026-06-13T00:45:00Z", "batch_id": "b1"}))

    result = await health(ctx)

    flagged = _signals(result, "missing_machine_identity")
    assert [w["path"] for w in flagged] == ["heartbeats/w-c.json"]
    assert result["exit_code"] == 1


async def test_active_claim_without_matching_heartbeat_warns_after_the_grace(ctx: Ctx, clock) -> None:  # noqa: ANN001
    await _clean(ctx)
    await claims.claim(ctx, agent_id="w-x", repo=REPO, target="9", ttl=3600)  # no heartbeat at all
    await claims.claim(ctx, agent_id="w-a", repo=REPO, target="8", ttl=3600)  # w-a's names #1
    clock.advance(seconds=FIRST_HEARTBEAT_GRACE - 1)  # the normal delay before a first beat
    assert _signals(await health(ctx), "claim_without_heartbeat") == []

    clock.advance(seconds=2)
    result = await health(ctx)

    flagged = sorted(w["target"] for w in _signals(result, "claim_without_heartbeat"))
    assert flagged == ["8", "9"]
    assert _signals(await health(ctx, first_heartbeat_grace=3600), "claim_without_heartbeat") == []


async def test_released_or_expired_claims_need_no_heartbeat(ctx: Ctx, clock) -> None:  # noqa: ANN001
    await _clean(ctx)
    await claims.claim(ctx, agent_id="w-y", repo=REPO, target="7", ttl=60)
    await claims.claim(ctx, agent_id="w-z", repo=REPO, target="6")
    await claims.release(ctx, agent_id="w-z", repo=REPO, target="6")
    clock.advance(seconds=120)

    result = await health(ctx)

    assert _signals(result, "claim_without_heartbeat") == []


async def test_claims_and_heartbeats_naming_a_missing_manifest_warn(ctx: Ctx) -> None:
    await _clean(ctx)
    await claims.claim(ctx, agent_id="w-q", repo=REPO, target="5", batch_id="ghost")
    await heartbeats.heartbeat(ctx, agent_id="w-q", repo=REPO, target="5", batch_id="ghost")

    result = await health(ctx)

    flagged = _signals(result, "missing_batch_manifest")
    assert sorted(w["path"] for w in flagged) == ["claims/o/r/5.json", "heartbeats/w-q.json"]
    assert {w["batch_id"] for w in flagged} == {"ghost"}


async def test_manifest_without_launch_prompt_warns(ctx: Ctx) -> None:
    await _batch(ctx, "b2", prompt=None)

    result = await health(ctx)

    assert [w["batch_id"] for w in _signals(result, "manifest_without_launch_prompt")] == ["b2"]


async def test_launch_prompt_targets_drifting_from_manifest_warn(ctx: Ctx) -> None:
    drifting = "Batch id: b1\nRepository: o/r\nProcess PRs 1, 3 and https://github.com/o/r/pull/4.\n"
    await _batch(ctx, prompt=drifting)

    result = await health(ctx)

    (warning,) = _signals(result, "launch_prompt_target_drift")
    assert warning["prompt_only"] == ["3", "4"]
    assert warning["manifest_only"] == ["2"]


def test_prompt_reservations_urls_of_other_repos_and_plain_numbers_are_not_drift() -> None:
    manifest = {
        "repo": REPO,
        "targets": [{"type": "pull_request", "target": "1"}],
        "lanes": [{"name": "a", "owner": "w", "targets": ["2"]}],
        "reservations": [{"type": "pull_request", "target": "3"}],
        "launch_prompt": (
            "Batch id: batch-2026-06-20 (3 lanes, started 2026-06-20)\nRepository: o/r\n"
            "Targets: #1 and issue 2. See https://github.com/x/y/pull/99 for context.\n"
            "Reservations:\n- PR 3 waits for the release owner.\n\n"
            "Defer #10 to next week.\n"
        ),
    }

    assert prompt_drift(manifest) is None


async def test_lanes_without_heartbeat_warn_but_terminal_pool_and_held_lanes_do_not(
        ctx: Ctx, clock) -> None:  # noqa: ANN001
    await _batch(ctx, lanes=[{"name": "a", "owner": "w-a", "targets": ["1"]},
                             {"name": "b", "owner": "w-b", "targets": ["2"], "terminal": "done"},
                             {"name": "p", "owner": "pool", "pool": True, "targets": ["3"]},
                             {"name": "h", "owner": "w-h", "targets": ["4"]}])
    await heartbeats.heartbeat(ctx, agent_id="w-other", batch_id="b1", ttl=3600)
    await claims.claim(ctx, agent_id="w-other", repo=REPO, target="4", batch_id="b1", ttl=3600)
    assert _signals(await health(ctx), "lane_without_heartbeat") == []  # a batch just registered
    clock.advance(seconds=FIRST_HEARTBEAT_GRACE)

    result = await health(ctx)

    assert [w["lane"] for w in _signals(result, "lane_without_heartbeat")] == ["a"]


async def test_batch_without_history_events_warns(ctx: Ctx) -> None:
    await _batch(ctx)
    await _batch(ctx, "b3", prompt=PROMPT.replace("b1", "b3"))
    await record_event(ctx, batch_id="b3", type="batch.created")

    result = await health(ctx)

    assert [w["batch_id"] for w in _signals(result, "batch_without_history")] == ["b1"]


async def test_jsonl_history_counts_as_history(ctx: Ctx, root: Path) -> None:
    await _batch(ctx)
    (root / "events" / "batches").mkdir(parents=True)
    (root / "events" / "batches" / "b1.jsonl").write_text('{"type": "batch.created", "timestamp": "2026-06-12T00:00:00Z"}\n')

    result = await health(ctx)

    assert _signals(result, "batch_without_history") == []


QA_CASES = [
    ([], "missing"),
    (["qa.validation_requested"], "requested"),
    (["qa.validation_requested", "qa.validation_started"], "in_progress"),
    (["qa.validation_started", "qa.validation_passed"], "passed"),
    (["qa.validation_passed", "qa.validation_failed"], "failed"),
    (["qa.validation_requested", "qa.manual_note"], "unknown"),
]


@pytest.mark.parametrize(("types", "expected"), QA_CASES, ids=[c[1] for c in QA_CASES])
async def test_qa_status_per_pr_comes_from_the_latest_qa_event(ctx: Ctx, clock, types, expected) -> None:  # noqa: ANN001
    await _clean(ctx)
    for event_type in types:
        clock.advance(seconds=10)
        await record_event(ctx, batch_id="b1", type=event_type, repo=REPO, target="1", message=event_type)

    result = await health(ctx)

    rows = {row["target"]: row for row in result["qa"]}
    assert rows["1"]["qa"] == expected
    assert rows["2"]["qa"] == "missing"  # QA never leaks to another PR
    assert result["exit_code"] == 0  # QA state is shown, not a telemetry warning


async def test_batch_scope_checks_only_that_batch(ctx: Ctx) -> None:
    await _clean(ctx)
    await _batch(ctx, "b2", prompt=None)
    await claims.claim(ctx, agent_id="w-q", repo=REPO, target="5", batch_id="ghost")

    result = await health(ctx, batch_id="b1")

    assert result["scope"] == {"kind": "batch", "batch_id": "b1"}
    assert result["warnings"] == []
    assert result["exit_code"] == 0


async def test_an_unreadable_record_is_a_warning_naming_it(ctx: Ctx, root: Path) -> None:
    await _clean(ctx)
    (root / "claims" / "o" / "r" / "3.json").write_text("{not json")

    result = await health(ctx)

    assert (result["verdict"], result["exit_code"]) == ("warnings", 1)
    assert [u["path"] for u in result["unreadable"]] == ["claims/o/r/3.json"]
    assert result["signals"]["unreadable_record"] == 1
    [warning] = [w for w in result["warnings"] if w["signal"] == "unreadable_record"]
    assert warning["path"] == "claims/o/r/3.json" and "invalid JSON" in warning["message"]


async def test_an_unreadable_manifest_of_the_batch_asked_about_is_exit_2(ctx: Ctx, root: Path) -> None:
    await _clean(ctx)
    (root / "batches" / "b1.json").write_text("{not json")

    result = await health(ctx, batch_id="b1")

    assert (result["verdict"], result["exit_code"]) == ("unknown", 2)
    assert "batches/b1.json" in result["errors"][0]


async def test_stop_request_and_stopped_are_ordinary_events(ctx: Ctx) -> None:
    await _clean(ctx)
    assert await telemetry.stop_requested(ctx, "b1") is False

    written = await telemetry.request_stop(ctx, batch_id="b1", message="restart smaller")
    state = await telemetry.stop_state(ctx, "b1")
    await telemetry.mark_stopped(ctx, batch_id="b1")

    assert written["event"]["type"] == "batch.stop_requested"
    assert written["event"]["repo"] == REPO
    assert written["path"].startswith("events/b1/")
    assert await telemetry.stop_requested(ctx, "b1") is True
    assert state["message"] == "restart smaller"
    assert (await telemetry.stop_state(ctx, "b1"))["stopped"] is True
    assert "restart smaller" in (telemetry.stop_notice(state) or "")
