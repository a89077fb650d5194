"""Keep-alive renewal of a lane's heartbeat, fenced by the claim it holds.

A renewal never clobbers the agent: it re-reads the heartbeat and CAS-writes it
back with only updated_at/expires_at moved, so a status or phase the agent
wrote in between is kept. Before renewing it checks that the claim still has
the identity the lane remembered; a takeover or re-acquire always changes that
identity, and a displaced holder must never renew someone else's claim.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from agentcoordd.coord.batches import lane_for_target
from agentcoordd.coord.cas import Keep, Put, cas_update, cas_update_blocking
from agentcoordd.coord.claims import HANDOFF_FIELDS, RELEASED_FIELDS
from agentcoordd.coord.context import Clock, Ctx
from agentcoordd.coord.events import emit, lifecycle_fields
from agentcoordd.model import ids
from agentcoordd.model.errors import CoordError
from agentcoordd.model.identity import stamp_attribution
from agentcoordd.model.records import HOLDER_EXITED, Claim, Heartbeat, load
from agentcoordd.model.status import is_terminal
from agentcoordd.model.timefmt import expiry, format_ts
from agentcoordd.store.base import BatchOps, BlockingStore, Conflict, Get, NotFound, Replace, Versioned, known


class Fence(msgspec.Struct, frozen=True, omit_defaults=True):
    """The identity of the claim a keep-alive lane holds."""

    repo: str
    target: str
    agent_id: str
    claimed_at: str
    instance_id: str | None = None
    generation: int | str | None = None
    fencing_token: int | None = None  # every grant has its own (coord/lease.py)

    @classmethod
    def of(cls, claim: dict[str, Any]) -> Fence:
        token = claim.get("fencing_token")
        return cls(
            repo=claim["repo"],
            target=claim["target"],
            agent_id=claim["agent_id"],
            claimed_at=claim["claimed_at"],
            instance_id=claim.get("instance_id"),
            generation=claim.get("generation"),
            fencing_token=token if isinstance(token, int) and not isinstance(token, bool) else None,
        )

    def same_grant(self, other: Fence) -> bool:
        """The same grant: every field equal, the token too when both have one (agent-coord
        renews a claim without the token it does not know; that is still this grant)."""
        tokens = (self.fencing_token, other.fencing_token)
        if None in tokens:
            return msgspec.structs.replace(self, fencing_token=None) == \
                msgspec.structs.replace(other, fencing_token=None)
        return self == other


class LaneEnded(CoordError):
    """Renewal must stop for good; `reason` says why (fenced, released, terminal…)."""

    def __init__(self, reason: str, message: str, new_holder: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.new_holder = new_holder


def fence_verdict(current: Versioned | None, fence: Fence) -> None:
    """Raise LaneEnded unless the claim (as read) still has the lane's identity."""
    if current is None:
        raise LaneEnded("released", f"claim {fence.repo}#{fence.target} no longer exists")
    claim = load(Claim, current.data, ids.claim_path(fence.repo, fence.target))
    if claim.status == "released" and claim.agent_id == fence.agent_id and claim.claimed_at == fence.claimed_at:
        raise LaneEnded("released", f"claim {fence.repo}#{fence.target} was released")
    if not Fence.of(current.data).same_grant(fence) or claim.status != "active":
        raise LaneEnded(
            "fenced",
            f"claim {fence.repo}#{fence.target} is now held by {claim.agent_id} "
            f"(claimed_at {claim.claimed_at}); renewal stopped",
            new_holder=claim.agent_id,
        )


def renewal(current: Versioned | None, *, path: str, agent_id: str, ttl: int,
            now: dt.datetime) -> Put:
    """The renewed heartbeat: only updated_at/expires_at move (what the agent wrote stays)."""
    if current is None:
        raise LaneEnded("heartbeat_missing", f"heartbeat {path} no longer exists")
    beat = load(Heartbeat, current.data, path)
    if is_terminal(beat.status):
        raise LaneEnded("terminal", f"heartbeat {agent_id} reports terminal status {beat.status}")
    record = dict(current.data)
    record["updated_at"] = format_ts(now)
    record["expires_at"] = expiry(now, ttl)
    return Put(record, record)


async def check_fence(ctx: Ctx, fence: Fence) -> None:
    fence_verdict(await ctx.store.get(ids.claim_path(fence.repo, fence.target)), fence)


async def renew(ctx: Ctx, *, agent_id: str, ttl: int, fence: Fence | None = None) -> dict[str, Any]:
    """Move the heartbeat's lease forward; raise LaneEnded when renewal must stop."""
    path = ids.heartbeat_path(agent_id)
    if fence is not None:
        await check_fence(ctx, fence)

    async def decide(current: Versioned | None) -> Put:
        return renewal(current, path=path, agent_id=agent_id, ttl=ttl, now=ctx.clock.now())

    return await cas_update(ctx.store, path, decide)


def renew_blocking(store: BlockingStore, clock: Clock, *, agent_id: str, ttl: int,
                   fence: Fence | None = None) -> dict[str, Any]:
    """`renew` inline on a blocking store (one worker thread renews a batch of lanes)."""
    path = ids.heartbeat_path(agent_id)
    if fence is not None:
        fence_verdict(store.get_sync(ids.claim_path(fence.repo, fence.target)), fence)
    return cas_update_blocking(
        store, path, lambda current: renewal(current, path=path, agent_id=agent_id, ttl=ttl,
                                             now=clock.now()))


async def release_exited(ctx: Ctx, fence: Fence, *, lane: str | None, batch_id: str | None,
                         detail: str) -> dict[str, Any] | None:
    """agentcoordd's release of the claim a lane held, once its watched process exited
    (docs/keepalive.md): non-terminal, everything the claim records (branch, PR, phase)
    kept for the next claimant, `release_mode: holder_exited`, and its claim.released
    event with the lane. Only that claim: one released, re-acquired or taken over since
    is left alone (None)."""
    path = ids.claim_path(fence.repo, fence.target)

    def decide(current: Versioned | None) -> Keep | Put:
        stored = current.data if current is not None and isinstance(current.data, dict) else None
        if stored is None or stored.get("status") != "active":
            return Keep(None)
        try:
            if not Fence.of(stored).same_grant(fence):
                return Keep(None)
        except (KeyError, TypeError):
            return Keep(None)  # not the claim the lane held
        now = format_ts(ctx.clock.now())
        record = {k: v for k, v in stored.items() if k not in HANDOFF_FIELDS}
        record.update(status="released", released_by=fence.agent_id, released_at=now,
                      updated_at=now, expires_at=now, release_mode=HOLDER_EXITED)
        record = stamp_attribution(record, ctx.identity)
        load(Claim, record, path)
        return Put(record, record)

    record = await cas_update(ctx.store, path, decide)
    if record is None:
        return None
    fields = lifecycle_fields(record, RELEASED_FIELDS)
    batch = record.get("batch_id") or batch_id
    lane = lane or (await lane_for_target(ctx, batch, fence.target) if batch else None)
    if lane:
        fields["lane"] = lane
    fields["message"] = detail
    await emit(ctx, record.get("batch_id"), "claim.released", fields)
    return record


class Renewal(msgspec.Struct, frozen=True):
    """One lane's renewal as renew_batched takes it."""

    agent_id: str
    ttl: int
    fence: Fence | None = None


class RenewSingly(Exception):
    """This lane's batched renewal met a concurrent write (or shares its heartbeat
    with another lane of the batch): renew it on its own, with re-reads."""


async def renew_batched(batch: BatchOps, clock: Clock, lanes: list[Renewal]) -> list[Exception | None]:
    """`renew` for many lanes in two round trips: one batch reads every claim and
    heartbeat, one CAS-writes every renewed heartbeat. Each lane's outcome is its
    own (None, LaneEnded, a StoreError, or RenewSingly for a lost race)."""
    reads = list(dict.fromkeys(
        path for lane in lanes for path in (
            ids.heartbeat_path(lane.agent_id),
            *((ids.claim_path(lane.fence.repo, lane.fence.target),) if lane.fence else ()))))
    read = dict(zip(reads, await batch.run_batch([Get(path) for path in reads]), strict=True))
    outcomes: list[Exception | None] = [None] * len(lanes)
    writes: dict[str, tuple[int, Replace]] = {}
    now = clock.now()
    for index, lane in enumerate(lanes):
        path = ids.heartbeat_path(lane.agent_id)
        try:
            if path in writes:
                raise RenewSingly(f"heartbeat {path} is renewed for another lane of this batch")
            if lane.fence is not None:
                fence_verdict(known(read[ids.claim_path(lane.fence.repo, lane.fence.target)]), lane.fence)
            current = known(read[path])
            put = renewal(current, path=path, agent_id=lane.agent_id, ttl=lane.ttl, now=now)
            assert current is not None  # renewal() ends the lane when it is missing
            writes[path] = (index, Replace(path, put.record, current.version))
        except Exception as exc:  # noqa: BLE001 - this lane's outcome, not the batch's
            outcomes[index] = exc
    written = await batch.run_batch([op for _, op in writes.values()])
    for (index, _), result in zip(writes.values(), written, strict=True):
        if isinstance(result, (Conflict, NotFound)):
            outcomes[index] = RenewSingly(result.message)
        elif isinstance(result, Exception):
            outcomes[index] = result
    return outcomes
