"""claim and release: leases on a repo target, refereed by heartbeat liveness."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agentcoordd.coord import closeout
from agentcoordd.coord.cas import Keep, Put, cas_update
from agentcoordd.coord.common import metadata_fields, positive_ttl, text_field
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.events import emit, lifecycle_fields
from agentcoordd.model import ids
from agentcoordd.model.errors import ClaimRefused, UsageError
from agentcoordd.model.identity import stamp_attribution
from agentcoordd.model.liveness import liveness
from agentcoordd.model.records import SCHEMA_VERSION, Claim, Heartbeat, Metadata, load, try_load
from agentcoordd.model.timefmt import expiry, format_ts, parse_ts
from agentcoordd.store.base import InvalidRecord, Versioned

DEFAULT_CLAIM_TTL = 4 * 3600
ACQUIRED_FIELDS = (
    "agent_id", "repo", "target", "branch", "phase", "generation", "instance_id",
    "synthetic", "synthetic_kind",
)
RELEASED_FIELDS = (
    "agent_id", "repo", "target", "branch", "status", "pr_url", "phase", "generation",
    "instance_id", "release_mode", "handoff_to", "handoff_note", "synthetic", "synthetic_kind",
)


def _label(repo: str, target: str) -> str:
    return f"{repo}#{target}"


async def claim(
    ctx: Ctx,
    *,
    agent_id: str,
    repo: str,
    target: str,
    batch_id: str | None = None,
    branch: str | None = None,
    ttl: int | None = None,
    meta: Metadata = Metadata(),
) -> dict[str, Any]:
    """Acquire or renew a lease; refuse while another holder is live or stale."""
    ids.agent_id(agent_id)
    path = ids.claim_path(repo, target)
    if batch_id is not None:
        ids.batch_id(batch_id)
    text_field("branch", branch)
    ttl = positive_ttl(ttl, DEFAULT_CLAIM_TTL)
    fields = metadata_fields(meta)
    if batch_id is not None:
        fields["batch_id"] = batch_id
    if branch is not None:
        fields["branch"] = branch

    async def decide(current: Versioned | None) -> Put:
        now = ctx.clock.now()
        stamps = {"updated_at": format_ts(now), "expires_at": expiry(now, ttl)}
        fresh = stamp_attribution(
            {
                "schema_version": SCHEMA_VERSION,
                "repo": repo,
                "target": target,
                "agent_id": agent_id,
                **fields,
                "status": "active",
                "claimed_at": stamps["updated_at"],
                **stamps,
            },
            ctx.identity,
        )
        if current is None:
            action, record = "acquired", fresh
        else:
            held = load(Claim, current.data, path)
            if held.status == "released":
                action, record = "acquired", fresh
            elif held.agent_id == agent_id:
                action, record = "renewed", _renewed(current.data, fields, stamps, ctx)
            else:
                await _check_takeover(ctx, held, repo, target, now)
                action, record = "taken_over", fresh
        load(Claim, record, path)
        return Put(record, (action, current, record))

    action, previous, record = await cas_update(ctx.store, path, decide)
    if action != "renewed" or _is_new_acquisition(previous, record):
        await emit(ctx, record.get("batch_id"), "claim.acquired", lifecycle_fields(record, ACQUIRED_FIELDS))
    return {"action": action, "path": path, "claim": record}


def _renewed(stored: dict[str, Any], fields: dict[str, Any], stamps: dict[str, str], ctx: Ctx) -> dict:
    """Same holder: keep claimed_at and everything stored, move the lease forward."""
    record = dict(stored)
    record.update(fields)
    record.update(status="active", **stamps)
    return stamp_attribution(record, ctx.identity)


def _is_new_acquisition(previous: Versioned | None, record: dict[str, Any]) -> bool:
    """A renewal that changes the lane (batch) or generation/instance is an acquire."""
    if previous is None:
        return True
    before = previous.data
    return any(before.get(k) != record.get(k) for k in ("batch_id", "generation", "instance_id"))


async def _check_takeover(ctx: Ctx, held: Claim, repo: str, target: str, now: dt.datetime) -> None:
    """Raise ClaimRefused unless the holder is recoverable.

    The holder's heartbeat decides: live or stale refuses, dead allows. Without
    a usable heartbeat the claim's own expires_at is the fallback.
    """
    label = _label(repo, target)
    beat = None
    unreadable = False
    try:
        stored = await ctx.store.get(ids.heartbeat_path(held.agent_id))
    except UsageError:
        stored = None  # a legacy holder id that is not a valid path segment
    except InvalidRecord:
        stored, unreadable = None, True  # not JSON: an invalid heartbeat, not a backend failure
    if stored is not None:
        beat = try_load(Heartbeat, stored.data)
    state = liveness(beat.updated_at, beat.expires_at, now) if beat is not None else "unknown"
    if state in ("live", "stale"):
        raise ClaimRefused(
            f"CLAIM_REFUSED: active claim for {label} held by {held.agent_id}; heartbeat {state}",
            holder=held.agent_id,
            liveness=state,
        )
    if state == "dead":
        return
    expires = parse_ts(held.expires_at)
    reason = "missing" if stored is None and not unreadable else "invalid"
    if expires is None or now < expires:
        until = f"claim expires at {held.expires_at}" if expires else "claim expiry unreadable"
        raise ClaimRefused(
            f"CLAIM_REFUSED: active claim for {label} held by {held.agent_id}; "
            f"heartbeat {reason}, {until}",
            holder=held.agent_id,
            liveness=reason,
        )


async def release(
    ctx: Ctx,
    *,
    agent_id: str,
    repo: str,
    target: str,
    meta: Metadata = Metadata(),
    handoff_to: str | None = None,
    handoff_note: str | None = None,
    terminal: str | None = None,
    pr_state: str | None = None,
    evidence_url: str | None = None,
    workspace: str | None = None,
) -> dict[str, Any]:
    """Release the caller's claim: plain, structured handoff, or terminal closeout."""
    ids.agent_id(agent_id)
    path = ids.claim_path(repo, target)
    fields = metadata_fields(meta)
    handoff = handoff_to is not None or handoff_note is not None
    if handoff_to is not None:
        ids.agent_id(handoff_to)
    text_field("handoff_note", handoff_note)
    if terminal is not None:
        if handoff:
            raise UsageError("--terminal and --handoff-to/--handoff-note are mutually exclusive")
        closeout.check_terminal(terminal)
    elif pr_state is not None or evidence_url is not None or workspace is not None:
        raise UsageError("--pr-state, --evidence-url and --workspace need --terminal")
    if handoff:
        fields.update(release_mode="handoff")
        if handoff_to is not None:
            fields["handoff_to"] = handoff_to
        if handoff_note is not None:
            fields["handoff_note"] = handoff_note

    lane_closed: tuple[Any, ...] | None = None

    async def decide(current: Versioned | None) -> Keep | Put:
        nonlocal lane_closed
        if current is None:
            raise UsageError(f"no claim exists for {_label(repo, target)}")
        held = load(Claim, current.data, path)
        if held.agent_id and held.agent_id != agent_id:  # a usage error, as in agent-coord
            raise UsageError(f"claim belongs to {held.agent_id}; {agent_id} cannot release it")
        already_released = held.status == "released"
        stamped = dict(fields)
        if terminal is not None:
            if not held.batch_id:
                raise UsageError("--terminal requires a claim with batch_id")
            if lane_closed is None:
                lane_closed = await closeout.close_lane(
                    ctx,
                    batch_id=held.batch_id,
                    lane=None,
                    agent_id=agent_id,
                    repo=repo,
                    target=target,
                    terminal=terminal,
                    branch=held.branch,
                    pr_state=pr_state,
                    evidence_url=evidence_url,
                    workspace=workspace,
                    meta_fields=fields,
                )
            if already_released and held.terminal is not None:
                return Keep((False, _released_payload("already_closed", path, current.data, lane_closed)))
            event = lane_closed[1]
            stamped.update({k: event[k] for k in ("terminal", "pr_state", "evidence_url", "workspace", "closed_by") if k in event})
        elif already_released:
            return Keep((False, {"action": "already_released", "path": path, "claim": current.data}))

        now = format_ts(ctx.clock.now())
        record = dict(current.data)
        record.update(stamped)
        record.update(status="released", updated_at=now, expires_at=now, released_by=agent_id, released_at=now)
        if already_released:  # a terminal stamp on an earlier plain release
            record.update(released_at=current.data.get("released_at", now))
        record = stamp_attribution(record, ctx.identity)
        load(Claim, record, path)
        return Put(record, (True, record))

    written, outcome = await cas_update(ctx.store, path, decide)
    if not written:
        return outcome
    record = outcome
    if terminal is None:
        event_fields = lifecycle_fields(record, RELEASED_FIELDS)
        if handoff_note is not None:
            event_fields["message"] = handoff_note
        await emit(ctx, record.get("batch_id"), "claim.released", event_fields)
        return {"action": "released", "path": path, "claim": record}
    return _released_payload("released", path, record, lane_closed)


def _released_payload(action: str, path: str, record: dict, lane_closed: tuple | None) -> dict[str, Any]:
    payload: dict[str, Any] = {"action": action, "path": path, "claim": record}
    if lane_closed is not None:
        payload["lane_closed"] = {"path": lane_closed[2], "event": lane_closed[1]}
    return payload
