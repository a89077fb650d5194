"""Terminal lane closeout: the version-2 lane_closed event and lane stamping.

The lane_closed id is a deterministic reservation per (batch, lane), written
create-only: the first closeout is authoritative, an identical retry succeeds,
a conflicting one is refused. After the event, the registered lane is stamped
and the batch completes when its last lane closes; a retry converges both.

Every closeout of a batch rewrites the one manifest. With hundreds of lanes
closing at once, one CAS per lane mostly loses; `ctx.stamps` (the daemon's
`StampQueue`) makes concurrent closeouts of a batch share one read-modify-write.
"""

from __future__ import annotations

import re
from typing import Any

import anyio

from agentcoordd.coord.cas import Keep, Put, cas_update
from agentcoordd.coord.common import MANIFEST_CAS_ATTEMPTS, text_field
from agentcoordd.coord.context import Ctx
from agentcoordd.model import ids
from agentcoordd.model.errors import UsageError
from agentcoordd.model.identity import stamp_attribution
from agentcoordd.model.records import LANE_CLOSED_SCHEMA_VERSION, Batch, LaneClosed, load
from agentcoordd.model.status import LANE_TERMINALS
from agentcoordd.model.backoff import MANIFEST_CAS
from agentcoordd.model.timefmt import format_ts
from agentcoordd.model.validation import contract_error
from agentcoordd.store.base import Conflict, Versioned

DEFAULT_WORKSPACE = "default"
_URL = re.compile(r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\s]+(?:[/?#]|$)")
# What makes two closeouts "the same": anything else may differ on a retry.
_IDENTITY_FIELDS = ("terminal", "repo", "target", "lane", "workspace")
# Lane fields stamped from the authoritative lane_closed event.
_LANE_STAMP_FIELDS = ("terminal", "closed_by", "workspace", "pr_state", "evidence_url")


def check_terminal(terminal: str | None) -> str:
    if terminal is None:
        raise UsageError("missing required --terminal")
    if terminal not in LANE_TERMINALS:
        raise UsageError(f"invalid --terminal {terminal!r} (allowed: {', '.join(LANE_TERMINALS)})")
    return terminal


def check_url(flag: str, value: str | None) -> str | None:
    if value is not None and (_URL.match(value) is None or len(value) > 2048):
        raise UsageError(f"invalid {flag}: must be an http(s) URL")
    return value


def check_contract(event: dict[str, Any]) -> None:
    """The event about to be written must satisfy the published lane_closed (v2)
    contract: a violation is the caller's input (exit 1, `validate`'s message)."""

    error = contract_error("lane_closed", event, "lane_closed event")
    if error is not None:
        raise error


async def read_batch(ctx: Ctx, batch_id: str) -> tuple[dict[str, Any], str] | None:
    """The stored manifest object and its version, or None when unregistered."""
    path = ids.batch_path(batch_id)
    current = await ctx.store.get(path)
    if current is None:
        return None
    load(Batch, current.data, path)
    return current.data, current.version


def _lanes(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    lanes = manifest.get("lanes")
    return [lane for lane in lanes if isinstance(lane, dict)] if isinstance(lanes, list) else []


def resolve_lane(manifest: dict[str, Any], *, target: str | None, owner: str | None) -> str | None:
    """The registered lane a target (else an owner) identifies uniquely, or None."""
    lanes = _lanes(manifest)
    if target:
        by_target = [lane for lane in lanes if target in (lane.get("targets") or [])]
        if len(by_target) == 1:
            return by_target[0].get("name")
        if by_target:
            return None
    if owner:
        by_owner = [lane for lane in lanes if lane.get("owner") == owner]
        if len(by_owner) == 1:
            return by_owner[0].get("name")
    return None


async def close_lane(
    ctx: Ctx,
    *,
    batch_id: str,
    lane: str | None,
    agent_id: str,
    repo: str,
    target: str,
    terminal: str,
    branch: str | None,
    pr_state: str | None,
    evidence_url: str | None,
    workspace: str | None,
    meta_fields: dict[str, Any],
    message: str | None = None,
) -> tuple[str, dict[str, Any], str]:
    """Write (or find) the lane's lane_closed record; returns (action, event, path)."""
    check_terminal(terminal)
    check_url("--evidence-url", evidence_url)
    check_url("--pr-url", meta_fields.get("pr_url"))
    text_field("pr_state", pr_state)
    workspace = text_field("workspace", workspace) or DEFAULT_WORKSPACE
    stored = await read_batch(ctx, batch_id)
    if lane is None:
        lane = resolve_lane(stored[0], target=target, owner=agent_id) if stored else None
        if lane is None:
            raise UsageError(
                f"cannot tell which lane of batch {batch_id} {repo}#{target} closes; pass --lane"
            )
    ids.lane_name(lane)
    machine = ctx.identity.machine_id or meta_fields.get("host")
    if not machine:  # closed as agent-coord closes it; batch-audit will not count it as factual
        machine = "UNKNOWN"
        ctx.warn(f"lane {lane} closed with closed_by.machine UNKNOWN: set AGENT_COORD_MACHINE_ID "
                 "(or pass --host) so batch-audit counts the closeout as factual")
    event_id = ids.lane_closed_event_id(lane)
    path = ids.event_path(batch_id, event_id)
    event: dict[str, Any] = {
        "schema_version": LANE_CLOSED_SCHEMA_VERSION,
        "event_id": event_id,
        "batch_id": batch_id,
        "type": "lane_closed",
        "lane": lane,
        "agent_id": agent_id,
        "repo": repo,
        "target": target,
        **({"branch": branch} if branch else {}),
        "terminal": terminal,
        **({"pr_state": pr_state} if pr_state else {}),
        **({"evidence_url": evidence_url} if evidence_url else {}),
        "workspace": workspace,
        "closed_by": {"agent_id": agent_id, "machine": machine},
        **meta_fields,
        **({"message": message} if message else {}),
        "at": format_ts(ctx.clock.now()),
    }
    event = stamp_attribution(event, ctx.identity)
    check_contract(event)
    action = "closed"
    try:
        await ctx.store.create(path, event)
    except Conflict:
        existing = await ctx.store.get(path)
        if existing is None:  # deleted between the two calls (gc): try once more
            await ctx.store.create(path, event)
        else:
            first = load(LaneClosed, existing.data, path)
            same = all(
                existing.data.get(f) == event.get(f) for f in _IDENTITY_FIELDS
            ) and first.closed_by.agent_id == agent_id
            if not same:
                raise UsageError(
                    f"conflicting terminal closeout for lane {lane}; first closeout is authoritative"
                ) from None
            event, action = existing.data, "already_closed"
    if stored is not None:
        await stamp_lane(ctx, batch_id, lane, event)
    else:
        ctx.warn(f"batch {batch_id} is not registered; no lane to stamp for {lane}")
    return action, event, path


async def stamp_lane(ctx: Ctx, batch_id: str, lane: str, event: dict[str, Any]) -> None:
    """Mark the registered lane closed; the last closed lane completes the batch."""
    if ctx.stamps is not None:
        await ctx.stamps.stamp(ctx, batch_id, lane, event)
    else:
        await stamp_lanes(ctx, batch_id, {lane: event})


async def stamp_lanes(ctx: Ctx, batch_id: str, closed: dict[str, dict[str, Any]]) -> None:
    """Stamp several closed lanes (name -> lane_closed event) in one manifest CAS."""
    path = ids.batch_path(batch_id)

    async def decide(current: Versioned | None) -> Keep | Put:
        if current is None:
            return Keep(None)
        load(Batch, current.data, path)
        updated = _stamped(current.data, closed, format_ts(ctx.clock.now()))
        return Keep(None) if updated is None else Put(updated, None)  # None: already converged

    await cas_update(ctx.store, path, decide, attempts=MANIFEST_CAS_ATTEMPTS, backoff=MANIFEST_CAS)


def _stamped(manifest: dict[str, Any], closed: dict[str, dict[str, Any]], now: str) -> dict | None:
    lanes = manifest.get("lanes")
    if not isinstance(lanes, list):
        return None
    new_lanes: list[Any] = []
    changed = False
    for entry in lanes:
        event = closed.get(entry.get("name")) if isinstance(entry, dict) else None
        if event is not None and entry.get("terminal") is None:
            entry = dict(entry, status=event["terminal"], closed_at=event["at"])
            entry.update({f: event[f] for f in _LANE_STAMP_FIELDS if f in event})
            changed = True
        new_lanes.append(entry)
    out = dict(manifest, lanes=new_lanes)
    if out.get("status") != "completed" and new_lanes and all(
        isinstance(e, dict) and e.get("terminal") for e in new_lanes
    ):
        out.update(status="completed", completed_at=now)
        changed = True
    if not changed:
        return None
    out["updated_at"] = now
    return out


class StampQueue:
    """Group commit for lane stamps: concurrent closeouts of one batch share one CAS.

    Each caller queues its stamp and takes the batch's lock; whoever gets it
    writes every stamp queued so far, so the callers behind it usually find
    theirs done. The outcome (ok, or the error) is each caller's own answer.
    """

    def __init__(self) -> None:
        self._queues: dict[tuple[int, str], _BatchStamps] = {}

    async def stamp(self, ctx: Ctx, batch_id: str, lane: str, event: dict[str, Any]) -> None:
        key = (id(ctx.store), batch_id)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _BatchStamps(anyio.Lock())
        mine = _Stamp(lane, event)
        queue.pending.append(mine)
        queue.users += 1
        try:
            async with queue.lock:
                if not mine.done:
                    taken, queue.pending = queue.pending, []
                    error: BaseException | None = None
                    try:
                        await stamp_lanes(ctx, batch_id, {s.lane: s.event for s in taken})
                    except Exception as exc:  # noqa: BLE001 - every caller in the group gets it
                        error = exc
                    except BaseException:  # cancelled: the next holder of the lock writes them
                        queue.pending[:0] = taken
                        raise
                    for item in taken:
                        item.done, item.error = True, error
        finally:
            queue.users -= 1
            if queue.users == 0:
                self._queues.pop(key, None)
        if mine.error is not None:
            raise mine.error


class _Stamp:
    __slots__ = ("lane", "event", "done", "error")

    def __init__(self, lane: str, event: dict[str, Any]) -> None:
        self.lane, self.event = lane, event
        self.done = False
        self.error: BaseException | None = None


class _BatchStamps:
    __slots__ = ("lock", "pending", "users")

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.pending: list[_Stamp] = []
        self.users = 0


async def record_lane_closed(
    ctx: Ctx,
    *,
    batch_id: str,
    lane: str | None,
    agent_id: str | None,
    repo: str | None,
    target: str | None,
    branch: str | None,
    terminal: str | None,
    pr_state: str | None,
    evidence_url: str | None,
    workspace: str | None,
    meta_fields: dict[str, Any],
    message: str | None,
) -> dict[str, Any]:
    """The explicit producer path: record-event --type lane_closed --terminal …"""
    check_terminal(terminal)
    for flag, value in (("--agent-id", agent_id), ("--repo", repo), ("--target", target)):
        if value is None:
            raise UsageError(f"--type lane_closed requires {flag}")
    assert agent_id is not None and repo is not None and target is not None and terminal is not None
    action, event, path = await close_lane(
        ctx,
        batch_id=batch_id,
        lane=lane,
        agent_id=agent_id,
        repo=repo,
        target=target,
        terminal=terminal,
        branch=branch,
        pr_state=pr_state,
        evidence_url=evidence_url,
        workspace=workspace,
        meta_fields=meta_fields,
        message=message,
    )
    return {"action": "recorded" if action == "closed" else action, "path": path, "event": event}
