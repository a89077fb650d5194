"""Capacity reservation rules at run time (coord/capacity.py) on a real local store with
a fake clock: partial consume/release, owner enforcement, fail-closed inputs, the host
limit gate. The contract's replay fixtures run on every backend:
tests/store/test_admission_replay.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentcoordd.coord import capacity
from agentcoordd.coord.context import Ctx
from agentcoordd.model.errors import ReservationRefused
from agentcoordd.model.identity import Identity
from agentcoordd.model.timefmt import parse_ts
from agentcoordd.store.local import LocalStore
from integration.capacity_flow import attempt, seed, used

@pytest.fixture
def planner(store: LocalStore, clock: Any) -> Ctx:
    return Ctx(store, clock, identity=Identity(machine_id="planner-box"))


async def test_partial_consume_then_release_moves_forward_only(planner: Ctx, clock: Any) -> None:
    await seed(planner, max_concurrency=3)
    request = {"reservation_id": "hold-a", "capacity_profile_id": "claude-pool",
               "inbox_id": "triage", "batch_id": "wave-9", "owner_id": "sched",
               "instance_id": "run-1", "lane_refs": ["wave-9:lexer", "wave-9:emitter"]}
    assert await attempt(planner, request) == "accepted"
    clock.advance(seconds=10)
    owner = {"owner_id": "sched", "instance_id": "run-1"}
    await capacity.settle(planner, workspace="default", reservation_id="hold-a", state="consumed",
                          lane_refs=["wave-9:lexer"], **owner)
    view = await used(planner)
    assert view["used_lane_refs"] == ["wave-9:emitter", "wave-9:lexer"]  # once each
    assert view["active_reservations"] == ["hold-a"]
    released = await capacity.settle(planner, workspace="default", reservation_id="hold-a",
                                     state="released", lane_refs=None, **owner)
    states = {h["lane_ref"]: h["state"] for h in released["reservation"]["lane_holds"]}
    assert states == {"wave-9:lexer": "consumed", "wave-9:emitter": "released"}
    assert (await used(planner))["used_lane_refs"] == ["wave-9:lexer"]  # occupied, not held
    with pytest.raises(ReservationRefused, match="^RESERVATION_REFUSED: no active hold"):
        await capacity.settle(planner, workspace="default", reservation_id="hold-a",
                              state="consumed", lane_refs=None, **owner)


async def test_only_the_owner_may_settle(planner: Ctx, store: LocalStore, clock: Any) -> None:
    await seed(planner, max_concurrency=2)
    assert await attempt(planner, {
        "reservation_id": "hold-a", "capacity_profile_id": "claude-pool", "inbox_id": "triage",
        "planning_attempt_id": "plan-1", "owner_id": "sched", "instance_id": "run-1",
        "lane_refs": ["wave-9:lexer"]}) == "accepted"
    other_machine = Ctx(store, clock, identity=Identity(machine_id="other-box"))
    for ctx, owner in ((planner, "intruder"), (other_machine, "sched")):
        with pytest.raises(ReservationRefused, match="owner tuple"):
            await capacity.settle(ctx, workspace="default", reservation_id="hold-a",
                                  state="released", owner_id=owner, instance_id="run-1",
                                  lane_refs=None)
    assert (await used(planner))["active_reservations"] == ["hold-a"]


@pytest.mark.parametrize("case, change", [
    ("missing profile", {"capacity_profile_id": "nope"}),
    ("missing inbox", {"inbox_id": "nope"}),
    ("foreign-batch lane", {"lane_refs": ["wave-10:lexer"]}),
    ("both scopes", {"planning_attempt_id": "plan-1"}),
    ("ttl over max", {"ttl_seconds": 3601}),
    ("malformed lane ref", {"lane_refs": ["no-colon"]}),
])
async def test_malformed_or_mismatched_input_fails_closed(planner: Ctx, case: str,
                                                          change: dict[str, Any]) -> None:
    await seed(planner, max_concurrency=5)
    request = {"reservation_id": "hold-a", "capacity_profile_id": "claude-pool",
               "inbox_id": "triage", "batch_id": "wave-9", "owner_id": "sched",
               "instance_id": "run-1", "lane_refs": ["wave-9:lexer"], **change}
    assert await attempt(planner, request) == "RESERVATION_REFUSED", case
    assert (await used(planner))["used_lane_refs"] == []


async def test_inbox_bound_to_another_profile_is_refused(planner: Ctx) -> None:
    await seed(planner, max_concurrency=5)
    await capacity.set_profile(planner, workspace="default", profile_id="other-pool",
                               max_concurrency=5, enabled=True)
    assert await attempt(planner, {
        "reservation_id": "hold-a", "capacity_profile_id": "other-pool", "inbox_id": "triage",
        "batch_id": "wave-9", "owner_id": "sched", "instance_id": "run-1",
        "lane_refs": ["wave-9:lexer"]}) == "RESERVATION_REFUSED"



async def test_a_lane_on_a_limited_quota_host_is_refused_naming_the_limit(planner: Ctx, clock: Any) -> None:
    from agentcoordd.coord import host_limits
    from agentcoordd.coord.batches import register_batch

    await register_batch(planner, manifest=json.dumps({
        "batch_id": "wave-9", "repo": "acme/widgets", "lanes": [
            {"name": "lexer", "owner": "pool", "pool": True, "targets": ["1"],
             "quota_host": "pool-east"},
            {"name": "emitter", "owner": "pool", "pool": True, "targets": ["2"]}]}).encode())
    await seed(planner, max_concurrency=5)
    await host_limits.report(planner, workspace="default", quota_host="pool-east", scope="5h",
                             resets_at="2026-06-13T01:00:00Z")
    request = {"reservation_id": "hold-a", "capacity_profile_id": "claude-pool",
               "inbox_id": "triage", "batch_id": "wave-9", "owner_id": "sched",
               "instance_id": "run-1", "lane_refs": ["wave-9:emitter", "wave-9:lexer"]}
    with pytest.raises(ReservationRefused) as refused:
        await capacity.reserve(planner, workspace="default", request=request)
    assert refused.value.message == ("RESERVATION_REFUSED: lane wave-9:lexer is on host limit "
                                     "pool-east/5h on planner-box until 2026-06-13T01:00:00Z")
    assert (await used(planner))["used_lane_refs"] == []  # all or nothing
    clock.current = parse_ts("2026-06-13T01:00:00Z")  # the reset: the limit stops counting
    assert (await capacity.reserve(planner, workspace="default", request=request))["outcome"] == "accepted"
