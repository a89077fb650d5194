"""Each lane's row is told from that lane's own claim (coord/holders.py): who holds it,
since when, how alive, at what phase; closed, blocked, released and never-started lanes
say so; one agent's heartbeat is never painted on its other lanes."""

from __future__ import annotations

import json

import pytest

from agentcoordd.coord.batches import register_batch
from agentcoordd.coord.claims import claim, release
from agentcoordd.coord.heartbeats import heartbeat
from agentcoordd.coord.status import status
from agentcoordd.model.records import Metadata

REPO = "acme/widgets"


def _lane(name: str, target: str, owner: str = "pool", **extra: object) -> dict:
    pool = {"pool": True} if owner == "pool" else {}
    return {"name": name, "owner": owner, "targets": [target], **pool, **extra}


MANIFEST = {"batch_id": "b1", "repo": REPO, "lanes": [
    _lane("live", "1"), _lane("stale", "2"), _lane("dead", "3"), _lane("done", "4"),
    _lane("free", "5"), _lane("released", "6"),
    _lane("ops", "7", owner="w-ops"),
    _lane("docs", "8", owner="w-ops", depends_on="b1:free"),
    _lane("solo", "9", owner="w-solo"),
]}


async def _fleet(ctx, clock) -> None:  # noqa: ANN001
    await register_batch(ctx, manifest=json.dumps(MANIFEST).encode())
    for agent, target in (("a-live", "1"), ("a-stale", "2"), ("a-dead", "3")):
        await claim(ctx, agent_id=agent, repo=REPO, target=target, batch_id="b1", ttl=3600)
    await heartbeat(ctx, agent_id="a-dead", repo=REPO, target="3", ttl=10)
    await heartbeat(ctx, agent_id="a-stale", repo=REPO, target="2", ttl=60)
    await claim(ctx, agent_id="a-done", repo=REPO, target="4", batch_id="b1")
    await release(ctx, agent_id="a-done", repo=REPO, target="4", terminal="done")
    await claim(ctx, agent_id="a-rel", repo=REPO, target="6", batch_id="b1")
    await release(ctx, agent_id="a-rel", repo=REPO, target="6")
    await claim(ctx, agent_id="w-ops", repo=REPO, target="7", batch_id="b1", ttl=3600)
    clock.advance(seconds=100)  # a-stale's heartbeat (TTL 60) is stale, a-dead's (TTL 10) dead
    await heartbeat(ctx, agent_id="a-live", repo=REPO, target="1", ttl=60,
                    meta=Metadata(phase="implement"))
    await heartbeat(ctx, agent_id="w-ops", repo=REPO, target="7", ttl=60, status="blocked_user_input",
                    meta=Metadata(phase="review"))
    await heartbeat(ctx, agent_id="w-solo", repo=REPO, target="9", ttl=60)  # works without a claim


def _rows(payload: dict) -> dict[str, dict]:
    (batch,) = payload["batches"]
    return {lane["name"]: lane for lane in batch["lanes"]}


@pytest.mark.parametrize("scope", ["batch", "full"])
async def test_every_lane_says_its_own_holder_and_state(ctx, clock, scope: str) -> None:  # noqa: ANN001
    await _fleet(ctx, clock)
    payload = await status(ctx, batch_id="b1") if scope == "batch" else await status(ctx)
    rows = _rows(payload)
    assert {name: row["lane_state"] for name, row in rows.items()} == {
        "live": "held", "stale": "stale_holder", "dead": "dead_holder", "done": "closed",
        "free": "not_started", "released": "released", "ops": "held", "docs": "blocked",
        "solo": "held"}
    live = rows["live"]
    assert live["holder"]["agent_id"] == "a-live" and live["holder"]["liveness"] == "live"
    assert live["holder"]["phase"] == "implement" and live["holder"]["since"]
    assert live["holder"]["fencing_token"] >= 1
    # a pool lane's status and liveness are its holder's, not the pool name's "no-heartbeat"
    assert (live["status"], live["liveness"]) == ("in_progress", "live")
    assert (rows["stale"]["liveness"], rows["stale"]["holder"]["agent_id"]) == ("stale", "a-stale")
    assert rows["dead"]["holder"]["liveness"] == "dead"
    assert "heartbeat dead" in rows["dead"]["holder"]["detail"]
    # closed: its terminal, no holder and no liveness alarm of its own
    assert rows["done"]["closed_as"] == "done" and "holder" not in rows["done"]
    for quiet in ("free", "released", "docs", "done"):
        assert "holder" not in rows[quiet], quiet
    assert rows["docs"]["blocked_on"] == ["b1:free"]
    ops = rows["ops"]["holder"]
    assert (ops["agent_id"], ops["status"], ops["phase"]) == ("w-ops", "blocked_user_input", "review")
    # agent-coord's status/liveness of an owned lane stay the owner's heartbeat (compat #lane-holders)
    assert (rows["docs"]["status"], rows["docs"]["liveness"]) == ("blocked_user_input", "live")
    solo = rows["solo"]["holder"]
    assert (solo["agent_id"], solo["since"], solo["liveness"]) == ("w-solo", None, "live")


async def test_a_heartbeat_about_another_lane_says_nothing_of_this_one(ctx, clock) -> None:  # noqa: ANN001
    await _fleet(ctx, clock)
    # a-live moves on to another target: lane "live" is still held (its claim), but its
    # status and phase are no longer told from a heartbeat about something else
    await heartbeat(ctx, agent_id="a-live", repo=REPO, target="99", ttl=60,
                    meta=Metadata(phase="qa"))
    live = _rows(await status(ctx, batch_id="b1"))["live"]
    assert live["lane_state"] == "held" and live["holder"]["liveness"] == "live"
    assert "phase" not in live["holder"] and "status" not in live["holder"]


async def test_a_fresh_claim_without_its_first_heartbeat_is_held_not_dead(ctx, clock) -> None:  # noqa: ANN001
    await register_batch(ctx, manifest=json.dumps(MANIFEST).encode())
    await claim(ctx, agent_id="a-new", repo=REPO, target="1", batch_id="b1", ttl=600)
    clock.advance(seconds=30)
    live = _rows(await status(ctx, batch_id="b1"))["live"]
    assert live["lane_state"] == "held"
    assert live["holder"]["liveness"] == "missing"
    assert "fallback claim expires at" in live["holder"]["detail"]
    clock.advance(seconds=600)  # the claim's own expiry: nobody heartbeat for it
    assert _rows(await status(ctx, batch_id="b1"))["live"]["lane_state"] == "dead_holder"


async def test_an_unreadable_lease_claim_is_unknown_never_free(ctx, clock, root) -> None:  # noqa: ANN001
    await register_batch(ctx, manifest=json.dumps(MANIFEST).encode())
    path = root / "claims" / "acme" / "widgets" / "1.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{torn")
    for payload in (await status(ctx, batch_id="b1"), await status(ctx)):
        assert _rows(payload)["live"]["lane_state"] == "unknown"
