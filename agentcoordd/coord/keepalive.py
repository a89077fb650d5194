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

from agentcoordd.coord.common import CAS_ATTEMPTS, contention
from agentcoordd.coord.context import Ctx
from agentcoordd.model import ids
from agentcoordd.model.errors import CoordError
from agentcoordd.model.records import Claim, Heartbeat, load
from agentcoordd.model.status import is_terminal
from agentcoordd.model.timefmt import format_ts
from agentcoordd.store.base import Conflict, NotFound


class Fence(msgspec.Struct, frozen=True, omit_defaults=True):
    """The identity of the claim a keep-alive lane holds."""

    repo: str
    target: str
    agent_id: str
    claimed_at: str
    instance_id: str | None = None
    generation: int | str | None = None

    @classmethod
    def of(cls, claim: dict[str, Any]) -> Fence:
        return cls(
            repo=claim["repo"],
            target=claim["target"],
            agent_id=claim["agent_id"],
            claimed_at=claim["claimed_at"],
            instance_id=claim.get("instance_id"),
            generation=claim.get("generation"),
        )


class LaneEnded(CoordError):
    """Renewal must stop for good; `reason` says why (fenced, released, terminal…)."""

    def __init__(self, reason: str, message: str, new_holder: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.new_holder = new_holder


async def check_fence(ctx: Ctx, fence: Fence) -> None:
    path = ids.claim_path(fence.repo, fence.target)
    current = await ctx.store.get(path)
    if current is None:
        raise LaneEnded("released", f"claim {fence.repo}#{fence.target} no longer exists")
    claim = load(Claim, current.data, path)
    if claim.status == "released" and claim.agent_id == fence.agent_id and claim.claimed_at == fence.claimed_at:
        raise LaneEnded("released", f"claim {fence.repo}#{fence.target} was released")
    if Fence.of(current.data) != fence or claim.status != "active":
        raise LaneEnded(
            "fenced",
            f"claim {fence.repo}#{fence.target} is now held by {claim.agent_id} "
            f"(claimed_at {claim.claimed_at}); renewal stopped",
            new_holder=claim.agent_id,
        )


async def renew(ctx: Ctx, *, agent_id: str, ttl: int, fence: Fence | None = None) -> dict[str, Any]:
    """Move the heartbeat's lease forward; raise LaneEnded when renewal must stop."""
    path = ids.heartbeat_path(agent_id)
    if fence is not None:
        await check_fence(ctx, fence)
    for _ in range(CAS_ATTEMPTS):
        current = await ctx.store.get(path)
        if current is None:
            raise LaneEnded("heartbeat_missing", f"heartbeat {path} no longer exists")
        beat = load(Heartbeat, current.data, path)
        if is_terminal(beat.status):
            raise LaneEnded("terminal", f"heartbeat {agent_id} reports terminal status {beat.status}")
        now = ctx.clock.now()
        record = dict(current.data)
        record["updated_at"] = format_ts(now)
        record["expires_at"] = format_ts(now + dt.timedelta(seconds=ttl))
        try:
            await ctx.store.replace(path, record, current.version)
        except Conflict:
            continue  # the agent wrote in between: re-read, keep what it wrote
        except NotFound:
            raise LaneEnded("heartbeat_missing", f"heartbeat {path} no longer exists") from None
        return record
    raise contention(path)
