"""coord.ready: every lane ready or not (and why), in start order; claim --next takes the
first lane an agent may take with the ordinary claim rule."""

from __future__ import annotations

import json

import pytest

from agentcoordd.coord import ready
from agentcoordd.coord.batches import register_batch
from agentcoordd.coord.claims import claim, release
from agentcoordd.coord.heartbeats import heartbeat
from agentcoordd.model import ids
from agentcoordd.model.errors import ClaimRefused, OperationalError, UsageError

from coord_support import batch_events, ts


def manifest(*lanes: dict, batch_id: str = "b1", repo: str | None = "acme/widgets") -> bytes:
    data: dict = {"batch_id": batch_id, "lanes": list(lanes)}
    if repo is not None:
        data["repo"] = repo
    return json.dumps(data).encode()


def lane(name: str, target: str, owner: str = "pool", **extra: object) -> dict:
    return {"name": name, "owner": owner, "targets": [target], **extra}


def states(view: dict) -> dict[str, str]:
    return {row["name"]: row["state"] for row in view["lanes"]}


async def test_priority_lanes_come_first_lower_first_then_manifest_order(ctx) -> None:
    await register_batch(ctx, manifest=manifest(
        lane("plain1", "1"), lane("p1", "2", priority=1), lane("plain2", "3"),
        lane("p0", "4", priority=0), lane("p1b", "5", priority=1)))
    view = await ready.ready_lanes(ctx, batch_id="b1")
    assert view["ready"] == ["p0", "p1", "p1b", "plain1", "plain2"]
    assert [row["name"] for row in view["lanes"]] == view["ready"]


async def test_each_lane_not_ready_says_why_closed_blocked_or_held(ctx, clock) -> None:
    await register_batch(ctx, manifest=manifest(
        lane("done", "1"), lane("next", "2", depends_on="b1:done"),
        lane("later", "3", depends_on=["b1:next"]), lane("taken", "4"), lane("free", "5")))
    await claim(ctx, agent_id="w1", repo="acme/widgets", target="1", batch_id="b1")
    await release(ctx, agent_id="w1", repo="acme/widgets", target="1", terminal="done")
    await heartbeat(ctx, agent_id="w2", ttl=600)
    await claim(ctx, agent_id="w2", repo="acme/widgets", target="4", batch_id="b1")
    view = await ready.ready_lanes(ctx, batch_id="b1")
    rows = {row["name"]: row for row in view["lanes"]}
    assert states(view) == {"done": "closed", "next": "ready", "later": "blocked",
                            "taken": "held", "free": "ready"}
    assert rows["done"]["terminal"] == "done"
    assert rows["later"]["blocked_on"] == ["b1:next"]
    assert rows["taken"]["held_by"] == [{"target": "4", "agent_id": "w2", "liveness": "live"}]
    assert view["counts"] == {"ready": 2, "blocked": 1, "held": 1, "closed": 1}


async def test_a_dead_holder_does_not_hold_a_lane_a_stale_one_does(ctx, clock) -> None:
    await register_batch(ctx, manifest=manifest(lane("l", "1")))
    await heartbeat(ctx, agent_id="w2", ttl=60)
    await claim(ctx, agent_id="w2", repo="acme/widgets", target="1", batch_id="b1")
    clock.advance(seconds=90)  # expired, within the stale grace
    stale = await ready.ready_lanes(ctx, batch_id="b1")
    assert stale["lanes"][0]["held_by"][0]["liveness"] == "stale"
    clock.advance(days=1)
    assert states(await ready.ready_lanes(ctx, batch_id="b1")) == {"l": "ready"}


async def test_a_terminal_owner_status_closes_an_owned_lane(ctx) -> None:
    await register_batch(ctx, manifest=manifest(lane("mine", "1", owner="w1"),
                                                lane("dep", "2", depends_on="b1:mine")))
    await heartbeat(ctx, agent_id="w1", status="done", ttl=600)
    view = await ready.ready_lanes(ctx, batch_id="b1")
    assert states(view) == {"mine": "closed", "dep": "ready"}


async def test_agent_view_marks_own_and_pool_lanes(ctx) -> None:
    await register_batch(ctx, manifest=manifest(
        lane("theirs", "1", owner="w2"), lane("mine", "2", owner="w1"),
        lane("shared", "3", pool=True)))
    view = await ready.ready_lanes(ctx, batch_id="b1", agent_id="w1")
    assert {row["name"]: row["may_take"] for row in view["lanes"]} == \
        {"theirs": False, "mine": True, "shared": True}
    assert view["takeable"] == ["mine", "shared"] and view["ready"] == ["theirs", "mine", "shared"]


async def test_claim_next_takes_the_first_takeable_lane_and_names_it_on_the_event(ctx) -> None:
    await register_batch(ctx, manifest=manifest(
        lane("theirs", "1", owner="w2", priority=0), lane("shared", "2", pool=True),
        lane("urgent", "3", pool=True, priority=5)))
    taken = await ready.claim_next(ctx, batch_id="b1", agent_id="w1")
    assert (taken["lane"], taken["repo"], taken["target"]) == ("urgent", "acme/widgets", "3")
    assert taken["claim"]["agent_id"] == "w1" and taken["claim"]["batch_id"] == "b1"
    acquired = [e for e in batch_events(ctx.store.root) if e["type"] == "claim.acquired"]
    assert [(e["lane"], e["target"]) for e in acquired] == [("urgent", "3")]
    second = await ready.claim_next(ctx, batch_id="b1", agent_id="w1")
    # issue 40: a retry (its reply lost) gets the lane it holds back, never a second one
    assert (second["lane"], second["action"], second["already_held"]) == ("urgent", "renewed", True)
    acquired = [e for e in batch_events(ctx.store.root) if e["type"] == "claim.acquired"]
    assert len(acquired) == 1
    await release(ctx, agent_id="w1", repo="acme/widgets", target="3", terminal="done")
    third = await ready.claim_next(ctx, batch_id="b1", agent_id="w1")
    assert third["lane"] == "shared" and "already_held" not in third


async def test_a_retried_claim_next_writes_the_acquisition_its_first_call_lost(ctx) -> None:
    """A daemon killed between the claim write and its claim.acquired (issue 40, finding 3):
    the agent's retry gets the lane back and the trail gets its one acquisition."""
    await register_batch(ctx, manifest=manifest(lane("a", "1", pool=True)))
    first = await ready.claim_next(ctx, batch_id="b1", agent_id="w1")
    (path,) = [p for p in (ctx.store.root / "events" / "b1").glob("*.json")]
    event_id = path.stem
    path.unlink()  # the event the killed daemon never wrote
    again = await ready.claim_next(ctx, batch_id="b1", agent_id="w1")
    assert (again["lane"], again["already_held"]) == ("a", True)
    (event,) = batch_events(ctx.store.root)
    assert (event["event_id"], event["type"], event["lane"]) == (event_id, "claim.acquired", "a")
    assert event["fencing_token"] == first["claim"]["fencing_token"]
    await ready.claim_next(ctx, batch_id="b1", agent_id="w1")  # once: a third call adds nothing
    assert len(batch_events(ctx.store.root)) == 1


async def test_claim_next_moves_past_a_lane_someone_else_just_took(ctx) -> None:
    await register_batch(ctx, manifest=manifest(lane("a", "1", pool=True), lane("b", "2", pool=True)))
    view = await ready.ready_lanes(ctx, batch_id="b1", agent_id="w1")
    assert view["takeable"] == ["a", "b"]
    await claim(ctx, agent_id="w2", repo="acme/widgets", target="1", batch_id="b1")  # the race
    taken = await ready.claim_next(ctx, batch_id="b1", agent_id="w1")
    assert taken["lane"] == "b"


async def test_claim_next_refuses_with_counts_of_the_agents_lanes(ctx) -> None:
    await register_batch(ctx, manifest=manifest(
        lane("a", "1", pool=True), lane("b", "2", pool=True, depends_on="b1:a"),
        lane("other", "3", owner="w9")))
    await ready.claim_next(ctx, batch_id="b1", agent_id="w1")
    with pytest.raises(ClaimRefused) as refused:
        await ready.claim_next(ctx, batch_id="b1", agent_id="w2")
    assert refused.value.message == "CLAIM_REFUSED: no ready lane in batch b1 (1 blocked, 1 held, 0 closed)"
    assert refused.value.exit_code == 3


async def test_a_claimed_pool_lane_closes_and_unblocks_its_dependent(ctx) -> None:
    await register_batch(ctx, manifest=manifest(lane("a", "1", pool=True),
                                                lane("b", "2", pool=True, depends_on="b1:a")))
    await ready.claim_next(ctx, batch_id="b1", agent_id="w1")
    await release(ctx, agent_id="w1", repo="acme/widgets", target="1", terminal="done")
    taken = await ready.claim_next(ctx, batch_id="b1", agent_id="w2")
    assert taken["lane"] == "b"
    view = await ready.ready_lanes(ctx, batch_id="b1")
    assert states(view) == {"a": "closed", "b": "held"}


async def test_unknown_batch_is_operational_bad_ids_are_usage(ctx) -> None:
    with pytest.raises(OperationalError, match="batch nope not found"):
        await ready.ready_lanes(ctx, batch_id="nope")
    with pytest.raises(UsageError):
        await ready.ready_lanes(ctx, batch_id="../x")
    with pytest.raises(UsageError):
        await ready.claim_next(ctx, batch_id="b1", agent_id="a/b")


async def test_claim_next_needs_the_batch_repo(ctx) -> None:
    await register_batch(ctx, manifest=manifest(lane("a", "1", pool=True), repo=None))
    view = await ready.ready_lanes(ctx, batch_id="b1")
    assert view["ready"] == ["a"] and any("declares no repo" in w for w in ctx.warnings)
    with pytest.raises(UsageError, match="declares no repo"):
        await ready.claim_next(ctx, batch_id="b1", agent_id="w1")


@pytest.mark.parametrize(("extra", "why"), [
    ({"pool": "yes"}, "pool"), ({"pool": 1}, "pool"), ({"priority": "high"}, "priority"),
    ({"priority": 1.5}, "priority"), ({"priority": -1}, "priority"), ({"priority": True}, "priority"),
    ({"priority": 10**12}, "priority"),
])
async def test_weird_pool_or_priority_values_are_refused_at_registration(ctx, extra, why) -> None:
    with pytest.raises(UsageError, match=why):
        await register_batch(ctx, manifest=manifest(lane("a", "1", **extra)))


async def test_wait_until_ready_returns_once_a_lane_is_ready(ctx) -> None:
    await register_batch(ctx, manifest=manifest(lane("a", "1", owner="w2"),
                                                lane("b", "2", pool=True, depends_on="b1:a")))
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            await ctx.store.create(ids.event_path("b1", ids.lane_closed_event_id("a")),
                                   {"type": "lane_closed", "lane": "a", "terminal": "done"})

    answer = await ready.wait_until_ready(ctx, "b1", "w1", poll_seconds=0.5, timeout=10, sleep=sleep)
    assert answer["exit_code"] == 0 and answer["lane"] == "b" and slept == [0.5, 0.5]
    slept.clear()
    answer = await ready.wait_until_ready(ctx, "nope", "w1", poll_seconds=0.5, timeout=1, sleep=sleep)
    # a batch with no manifest and no event: nothing to wait for, said at once
    why = "batch nope is not registered (check --batch-id)"
    assert answer == {"batch_id": "nope", "detail": why, "unknown_batch": True, "exit_code": 2,
                      "exit_error": why}
    assert slept == []


async def test_wait_until_ready_ends_when_nothing_is_left_open_for_the_agent(ctx) -> None:
    await register_batch(ctx, manifest=manifest(lane("a", "1", pool=True), lane("b", "2", owner="w2")))
    await ready.claim_next(ctx, batch_id="b1", agent_id="w1")
    met, state = await ready.ready_state(ctx, "b1", "w9")
    assert not met and state["counts"] == {"ready": 0, "blocked": 0, "held": 1, "closed": 0}
    await release(ctx, agent_id="w1", repo="acme/widgets", target="1", terminal="done")
    met, state = await ready.ready_state(ctx, "b1", "w9")  # b is w2's: nothing left for w9
    assert met and state["closed"] is True and state["lane"] is None
    assert state["detail"] == "no lane of b1 is left open for w9 (1 closed): nothing to wait for"


async def test_concurrent_ready_waiters_of_one_batch_share_their_reads(ctx, store, clock) -> None:
    import anyio

    from agentcoordd.coord.context import Ctx
    from agentcoordd.daemon.recent import SharedReads

    await register_batch(ctx, manifest=manifest(*(lane(f"l{i}", str(i), depends_on=f"b1:l{i - 1}", pool=True)
                                                  if i else lane("l0", "0", owner="w0")
                                                  for i in range(20))))
    alone = SharedReads(store, timer=lambda: 0.0)
    await ready.ready_state(Ctx(alone, clock), "b1", "w1")
    one_waiter = alone.reads
    shared = SharedReads(store, timer=lambda: 0.0)  # every read stays fresh for the test
    answers = []

    async def waiter(i: int) -> None:
        answers.append(await ready.ready_state(Ctx(shared, clock), "b1", f"x{i}"))

    async with anyio.create_task_group() as tg:
        for i in range(100):
            tg.start_soon(waiter, i)
    assert len(answers) == 100 and not any(met for met, _ in answers)
    assert shared.reads == one_waiter  # 100 waiters cost one waiter's reads

    shared = SharedReads(store, timer=lambda: 0.0)
    answers.clear()

    async def sharing_waiter(i: int) -> None:
        answers.append(await ready.ready_state(Ctx(shared, clock), "b1", f"x{i}",
                                               shared.results.share))

    async with anyio.create_task_group() as tg:
        for i in range(100):
            tg.start_soon(sharing_waiter, i)
    assert len(answers) == 100 and shared.results.computed == 1  # one classification for all
    assert {state["detail"] for _, state in answers} == {
        f"no lane of b1 ready for x{i} (19 blocked, 0 held, 0 closed)" for i in range(100)}


async def test_claim_next_never_takes_over_a_claim_made_since_its_survey(ctx, clock) -> None:
    await register_batch(ctx, manifest=manifest(lane("a", "1", pool=True)))
    await heartbeat(ctx, agent_id="w2", ttl=60)
    clock.advance(hours=1)  # w2's heartbeat from an earlier lane is dead now
    survey = await ready.ready_lanes(ctx, batch_id="b1", agent_id="w1")
    assert survey["takeable"] == ["a"] and "dead_holders" not in survey["lanes"][0]
    await claim(ctx, agent_id="w2", repo="acme/widgets", target="1", batch_id="b1")  # the race
    with pytest.raises(ClaimRefused, match="claimed since the lane was surveyed"):
        await claim(ctx, agent_id="w1", repo="acme/widgets", target="1", batch_id="b1",
                    surveyed_holder=None)
    # w2's dead heartbeat is older than its claim: it says nothing about w2 since
    # (docs/compat.md#fresh-claims), so the lane is held until w2 beats or the claim expires
    view = await ready.ready_lanes(ctx, batch_id="b1", agent_id="w1")
    assert view["lanes"][0]["held_by"] == [
        {"target": "1", "agent_id": "w2", "liveness": "predates_claim"}]
    with pytest.raises(ClaimRefused, match="no ready lane"):
        await ready.claim_next(ctx, batch_id="b1", agent_id="w1")


async def test_claim_next_skips_a_lane_closed_since_its_survey_without_claiming_it(
        ctx, store, clock) -> None:
    from agentcoordd.coord.context import Ctx
    from agentcoordd.daemon.recent import SharedReads

    await register_batch(ctx, manifest=manifest(lane("a", "1", pool=True), lane("b", "2", pool=True)))
    survey = Ctx(SharedReads(store, timer=lambda: 0.0), clock)  # its reads never age
    await ready.ready_lanes(survey, batch_id="b1")
    await ready.claim_next(ctx, batch_id="b1", agent_id="w1")
    await release(ctx, agent_id="w1", repo="acme/widgets", target="1", terminal="done")
    stale = await ready.ready_lanes(survey, batch_id="b1", agent_id="w2")
    assert stale["takeable"] == ["a", "b"]  # the old view: a is still open
    taken = await ready.claim_next(ctx, batch_id="b1", agent_id="w2", survey=survey)
    assert taken["lane"] == "b"
    acquired = [e for e in batch_events(ctx.store.root) if e["type"] == "claim.acquired"]
    assert sorted((e["agent_id"], e["lane"]) for e in acquired) == [("w1", "a"), ("w2", "b")]
