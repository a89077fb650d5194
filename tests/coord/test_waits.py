"""coord.waits: a lane's dependencies answered from its own few records."""

from __future__ import annotations

from agentcoordd.coord import waits
from agentcoordd.model import ids

BATCH = {"batch_id": "b1", "repo": "acme/widgets", "lanes": [
    {"name": "api", "owner": "agent-api", "targets": ["1"]},
    {"name": "db", "owner": "agent-db", "targets": ["2"], "terminal": "done"},
    {"name": "ui", "owner": "agent-ui", "targets": ["3"],
     "depends_on": ["b1:api", "b1:db", "other:lib"]},
    {"name": "bad", "owner": "agent-bad", "targets": ["4"], "depends_on": ["no-colon"]},
]}
OTHER = {"batch_id": "other", "repo": "acme/lib", "lanes": [{"name": "lib", "owner": "agent-lib", "targets": ["9"]}]}


async def _setup(store) -> None:
    await store.create("batches/b1.json", BATCH)
    await store.create("batches/other.json", OTHER)


async def test_blocked_until_every_dependency_is_done_by_stamp_event_or_heartbeat(ctx, store) -> None:
    await _setup(store)
    met, state = await waits.unblocked_state(ctx, "b1", "ui")
    assert not met and state["blocked_on"] == ["b1:api", "other:lib"]  # db is stamped done
    await store.create(ids.event_path("b1", ids.lane_closed_event_id("api")),
                       {"type": "lane_closed", "lane": "api", "terminal": "done"})
    await store.create("heartbeats/agent-lib.json", {"agent_id": "agent-lib", "status": "in_progress",
                                                     "updated_at": "2026-06-13T00:00:00Z",
                                                     "expires_at": "2099-01-01T00:00:00Z"})
    met, state = await waits.unblocked_state(ctx, "b1", "ui")
    assert not met and state["blocked_on"] == ["other:lib"]
    current = await store.get("heartbeats/agent-lib.json")
    await store.replace("heartbeats/agent-lib.json", {**current.data, "status": "done"}, current.version)
    met, state = await waits.unblocked_state(ctx, "b1", "ui")
    assert met and state["detail"] == "lane ui of b1 is unblocked"


async def test_an_abandoned_lane_closed_does_not_satisfy_and_malformed_refs_block(ctx, store) -> None:
    await _setup(store)
    await store.create(ids.event_path("b1", ids.lane_closed_event_id("api")),
                       {"type": "lane_closed", "lane": "api", "terminal": "abandoned"})
    met, state = await waits.unblocked_state(ctx, "b1", "ui")
    assert "b1:api" in state["blocked_on"]
    met, state = await waits.unblocked_state(ctx, "b1", "bad")
    assert not met and state["blocked_on"] == ["no-colon"]


async def test_wait_polls_until_met_or_times_out(ctx, store) -> None:
    await _setup(store)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:  # the dependency lands while we wait
            await store.create(ids.event_path("b1", ids.lane_closed_event_id("api")),
                               {"type": "lane_closed", "lane": "api", "terminal": "done"})
            await store.create(ids.event_path("other", ids.lane_closed_event_id("lib")),
                               {"type": "lane_closed", "lane": "lib", "terminal": "done"})

    answer = await waits.wait_until_unblocked(ctx, "b1", "ui", poll_seconds=0.5, timeout=10, sleep=sleep)
    assert answer["exit_code"] == 0 and slept == [0.5, 0.5]
    answer = await waits.wait_until_unblocked(ctx, "b1", "bad", poll_seconds=0.4, timeout=1.0, sleep=sleep)
    assert answer["exit_code"] == 2 and answer["timed_out"] and answer["blocked_on"] == ["no-colon"]
