"""The admission contracts' replay fixtures, run against the runtime use cases
(coord/capacity.py, coord/host_limits.py, coord/ready.py) on every backend — a local
root, our Worker, etcd — with a fake clock: final-slot contention, idempotent retry,
payload conflict, disabled inbox, TTL bounds and boundary, a blocked lane and a hold
counted once, and the host-limit reset/unmatched-lanes projection.

Fixtures: schema/state/v1/capacity-reservation/fixtures/replay/ and
schema/state/v1/fixtures/replay/host-limit-reset-and-unmatched-lanes.json. Each test
works in a workspace of its own (the Worker and etcd are shared by the session)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentcoordd.coord import capacity, host_limits
from agentcoordd.coord.batches import register_batch
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.ready import ready_lanes
from agentcoordd.model.identity import Identity
from agentcoordd.model.timefmt import parse_ts
from etcd_cluster import etcd_server  # noqa: F401 - fixture used by name
from integration.capacity_flow import attempt, replay, seed, used

HOST_LIMIT_REPLAY = (Path(__file__).resolve().parents[2]
                     / "schema/state/v1/fixtures/replay/host-limit-reset-and-unmatched-lanes.json")


@pytest.fixture
def ws() -> str:
    return f"ws-{uuid.uuid4().hex[:10]}"


def as_machine(store: Any, clock: Any, machine: str = "planner-box") -> Ctx:
    return Ctx(store, clock, identity=Identity(machine_id=machine))


async def test_retry_conflict_and_refusals_replay(every_backend: Any, clock: Any, ws: str) -> None:
    planner = as_machine(every_backend, clock)
    fixture = replay("retry-conflict-and-refusals.json")
    clock.current = parse_ts(fixture["as_of"])
    profile = fixture["capacity_profile"]
    await capacity.set_profile(planner, workspace=ws, profile_id=profile["capacity_profile_id"],
                               max_concurrency=profile["max_concurrency"], enabled=True)
    for inbox in fixture["inboxes"]:
        await capacity.set_inbox(planner, workspace=ws, inbox_id=inbox["inbox_id"],
                                 profile_id=inbox["capacity_profile_id"],
                                 enabled=inbox["status"] == "enabled")
    for occ in fixture["lane_occupancies"]:
        await capacity.set_occupancy(planner, workspace=ws, lane_ref=occ["lane_ref"],
                                     profile_id=occ["capacity_profile_id"], inbox_id=occ["inbox_id"],
                                     state=occ["state"], reason=occ.get("blocked_reason"))
    outcomes = {}
    for request in fixture["requests"]:
        assert request["owner_machine"] == "planner-box"
        outcomes[request["attempt"]] = await attempt(planner, request, ws)
    assert outcomes == fixture["expected"]["outcomes"]
    view = await used(planner, ws)
    assert view["used_lane_refs"] == fixture["expected"]["effective_used_lane_refs"]
    assert view["remaining_slots"] == fixture["expected"]["remaining_slots"]


async def test_blocked_lane_and_hold_count_once_replay(every_backend: Any, clock: Any, ws: str) -> None:
    fixture = replay("blocked-lane-and-hold-count-once.json")
    planner = as_machine(every_backend, clock)
    for scenario in fixture["scenarios"]:  # each from the fixture's starting state
        space = f"{ws}-{scenario['name']}"
        await seed(planner, max_concurrency=fixture["max_concurrency"],
                   occupied=fixture["occupied_lane_refs"], ws=space)
        outcome = await attempt(planner, {
            "reservation_id": "hold-1", "capacity_profile_id": "claude-pool", "inbox_id": "triage",
            "batch_id": "wave-9", "owner_id": "scheduler", "instance_id": "run-1",
            "lane_refs": scenario["requested_lane_refs"]}, space)
        expected = fixture["expected"][scenario["name"]]
        assert outcome == expected["outcome"]
        assert (await used(planner, space))["used_lane_refs"] == expected["used_lane_refs_after"]


async def test_short_ttl_boundary_replay(every_backend: Any, clock: Any, ws: str) -> None:
    planner = as_machine(every_backend, clock)
    fixture = replay("short-ttl-boundary.json")
    hold = fixture["reservation"]
    clock.current = parse_ts(hold["created_at"])
    await seed(planner, max_concurrency=fixture["max_concurrency"], ws=ws)
    made = await capacity.reserve(planner, workspace=ws, request={
        "reservation_id": hold["reservation_id"], "capacity_profile_id": "claude-pool",
        "inbox_id": "triage", "batch_id": hold["batch_id"], "owner_id": hold["owner_id"],
        "instance_id": hold["instance_id"], "ttl_seconds": hold["ttl_seconds"],
        "lane_refs": [h["lane_ref"] for h in hold["lane_holds"]]})
    # expires_at == created_at + ttl_seconds exactly, on the (fake) server clock
    assert made["reservation"] == {**hold, "workspace": ws}
    for moment, expected in fixture["expected"].items():
        clock.current = parse_ts(fixture["as_of"][moment])
        view = await used(planner, ws)
        assert (view["used_lane_refs"], view["remaining_slots"]) == (
            expected["used_lane_refs"], expected["remaining_slots"])
    shown = await capacity.show_reservation(planner, workspace=ws,
                                            reservation_id=hold["reservation_id"])
    assert {(h["state"], h["expired_at"]) for h in shown["reservation"]["lane_holds"]} == {
        ("expired", hold["expires_at"])}


async def test_host_limit_reset_and_unmatched_lanes_replay(every_backend: Any, clock: Any) -> None:
    """The records are reported (and cleared) at their fixture times by their machines;
    at `as_of`, each lane is read by its own machine: only `api` is blocked on a limit."""
    fixture = json.loads(HOST_LIMIT_REPLAY.read_text())
    for record in fixture["status"]["host_limits"]:
        reporter = as_machine(every_backend, clock, record["machine"])
        clock.current = parse_ts(record["observed_at"])
        await host_limits.report(reporter, workspace="default", quota_host=record["quota_host"],
                                 scope=record["scope"], resets_at=record["resets_at"],
                                 source=record["source"])
        if record["status"] == "cleared":
            clock.current = parse_ts(record["cleared_at"])
            await host_limits.clear(reporter, workspace="default", quota_host=record["quota_host"],
                                    scope=record["scope"])
    clock.current = parse_ts(fixture["as_of"])
    batch = f"hl-{uuid.uuid4().hex[:8]}"
    lanes = [{"name": lane["lane"], "owner": "pool", "pool": True, "targets": [str(i)],
              **({"quota_host": lane["quota_host"]} if "quota_host" in lane else {})}
             for i, lane in enumerate(fixture["lanes"])]
    await register_batch(as_machine(every_backend, clock), manifest=json.dumps(
        {"batch_id": batch, "repo": "acme/widgets", "lanes": lanes}).encode())
    statuses = {}
    for lane in fixture["lanes"]:
        view = await ready_lanes(as_machine(every_backend, clock, lane["machine"]), batch_id=batch)
        row = next(r for r in view["lanes"] if r["name"] == lane["lane"])
        statuses[lane["lane"]] = "blocked-on-limit" if row.get("blocked_on_limit") else None
        assert row["state"] == ("blocked" if statuses[lane["lane"]] else "ready")
    assert statuses == fixture["expected"]["lane_statuses"]
    listed = await host_limits.list_limits(as_machine(every_backend, clock), workspace="default")
    mine = [r for r in listed["host_limits"] if r["machine"] in {"ci-linux-07", "ci-linux-08"}]
    assert sum(r["effective"] for r in mine) == fixture["expected"]["effective_record_count"]
