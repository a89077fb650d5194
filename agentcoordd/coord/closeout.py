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
from agentcoordd.coord.audit import closer_authorized
from agentcoordd.coord.batches import lane_name_of, lane_owner_of
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
# closed_by.machine when the closer named none: batch-audit does not count such a closeout.
UNKNOWN_MACHINE = "UNKNOWN"
# agent-coord's repo shape for a closeout (dots allowed; the contract check follows).
_CLOSEOUT_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_URL = re.compile(r"[Hh][Tt][Tt][Pp][Ss]?://[^/?#\s]+(?:[/?#]\S*)?")
# What makes two closeouts the same (a retry) rather than a conflict: the closer's
# machine may change between retries, the closer and the facts may not.
_SEMANTICS = ("terminal", "workspace", "closer", "pr_url", "pr_state", "evidence_url")
# Lane fields stamped from the authoritative lane_closed event.
_LANE_STAMP_FIELDS = ("closed_by", "workspace")
_LANE_FACT_FIELDS = ("pr_url", "pr_state", "evidence_url")
# The claim fields a terminal release takes from the authoritative event.
CLAIM_STAMP_FIELDS = ("terminal", "workspace", "closed_by", "pr_url", "pr_state", "evidence_url")
# The fields of a closeout (the lane_closed event's own, from the caller or the claim).
CLOSEOUT_FIELDS = ("batch_id", "lane", "agent_id", "repo", "target", "branch", "host", "pr_url",
                   "terminal", "pr_state", "evidence_url", "workspace", "synthetic", "synthetic_kind")


def check_terminal(terminal: str | None) -> str:
    if terminal is None:
        raise UsageError("missing required --terminal")
    if terminal not in LANE_TERMINALS:
        raise UsageError(f"--terminal must be one of: {', '.join(LANE_TERMINALS)}")
    return terminal


def check_fields(values: dict[str, Any]) -> None:
    """agent-coord's rules for what a terminal closeout states — checked on the options
    before anything is read, and on the claim's values a release adds."""
    repo = values.get("repo")
    if repo is not None and not (isinstance(repo, str) and _CLOSEOUT_REPO.fullmatch(repo)):
        raise UsageError(f"invalid terminal closeout repo: {repo}")
    for name in ("workspace", "host", "branch", "pr_state"):
        if values.get(name) == "":
            raise UsageError(f"--{name.replace('_', '-')} must not be empty for terminal closeout")
        text_field(name, values.get(name))
    for name in ("pr_url", "evidence_url"):
        value = values.get(name)
        if value is not None and not (isinstance(value, str) and len(value) <= 2048
                                      and _URL.fullmatch(value)):
            raise UsageError(f"--{name.replace('_', '-')} must be an HTTP(S) URL with a host")


def check_contract(event: dict[str, Any]) -> None:
    """The event about to be written must satisfy the published lane_closed (v2)
    contract: a violation is the caller's input (exit 1, `validate`'s message)."""

    error = contract_error("lane_closed", event, "lane_closed event")
    if error is not None:
        raise error


def semantics(record: dict[str, Any]) -> tuple[Any, ...]:
    """A closeout's facts (an event, a lane or a claim): equal ones are the same closeout."""
    closer = record.get("closed_by")
    view = {**record, "workspace": record.get("workspace") or DEFAULT_WORKSPACE,
            "closer": closer.get("agent_id") if isinstance(closer, dict) else record.get("agent_id")}
    return tuple(view.get(k) for k in _SEMANTICS)


def conflict(lane: str) -> UsageError:
    return UsageError(f"conflicting terminal closeout for lane {lane}; first closeout is authoritative")


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


def _targets(lane: dict[str, Any]) -> list[str]:
    raw = lane.get("targets") if lane.get("targets") is not None else lane.get("target")
    return [str(t) for t in (raw if isinstance(raw, list) else [raw]) if t is not None]


async def closing_lane(ctx: Ctx, manifest: dict[str, Any], closeout: dict[str, Any]) -> dict[str, Any]:
    """The registered lane this closeout closes, by agent-coord's rules: the named lane,
    else the one lane listing the target; it must list the target, and the closer must
    own it — or hold the target's claim in this batch with a clean trail that made it
    the lane's holder (a takeover)."""
    batch_id, target, agent = closeout["batch_id"], str(closeout["target"]), closeout["agent_id"]
    if manifest.get("repo") and manifest["repo"] != closeout["repo"]:
        raise UsageError(f"terminal closeout repo does not match batch {batch_id}")
    named = closeout.get("lane")
    matches = [lane for lane in _lanes(manifest)
               if (lane_name_of(lane) == named if named else target in _targets(lane))]
    if len(matches) != 1:
        raise UsageError(f"terminal closeout does not match exactly one lane in batch {batch_id}")
    lane = matches[0]
    name = lane_name_of(lane) or ""
    if target not in _targets(lane):
        raise UsageError(f"terminal closeout target does not match lane {name}")
    if lane_owner_of(lane) == agent:
        return lane
    if await _holds_claim(ctx, closeout) and await closer_authorized(ctx, batch_id, manifest, name, agent):
        return lane
    raise UsageError(f"terminal closeout agent does not match lane {name}")


async def _holds_claim(ctx: Ctx, closeout: dict[str, Any]) -> bool:
    """Identity, not status: a replay closes the holder's already released claim."""
    try:
        current = await ctx.store.get(ids.claim_path(closeout["repo"], str(closeout["target"])))
    except UsageError:
        return False
    claim = current.data if current is not None else None
    return isinstance(claim, dict) and all(
        claim.get(k) == closeout[k] for k in ("repo", "target", "batch_id", "agent_id"))


async def close_lane(ctx: Ctx, closeout: dict[str, Any]) -> tuple[str, dict[str, Any], str, bool]:
    """Write (or find) the lane's lane_closed record and stamp the lane:
    (action "closed" | "already_closed", the authoritative event, its path, batch changed).

    `closeout` holds CLOSEOUT_FIELDS (checked by the caller with check_fields)."""
    batch_id = closeout["batch_id"]
    stored = await read_batch(ctx, batch_id)
    if stored is None:
        raise UsageError(f"batch {batch_id} not found for terminal closeout")
    lane_entry = await closing_lane(ctx, stored[0], closeout)
    lane = lane_name_of(lane_entry) or ""
    event_id = ids.lane_closed_event_id(lane)
    path = ids.event_path(batch_id, event_id)
    machine = ctx.identity.machine_id or closeout.get("host") or UNKNOWN_MACHINE
    event: dict[str, Any] = {
        "schema_version": LANE_CLOSED_SCHEMA_VERSION,
        "event_id": event_id,
        **{k: v for k in CLOSEOUT_FIELDS if (v := closeout.get(k)) is not None},
        "type": "lane_closed",
        "lane": lane,
        "target": str(closeout["target"]),
        "workspace": closeout.get("workspace") or DEFAULT_WORKSPACE,
        "closed_by": {"agent_id": closeout["agent_id"], "machine": machine},
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
            load(LaneClosed, existing.data, path)
            if semantics(existing.data) != semantics(event):
                raise conflict(lane) from None
            event, action = existing.data, "already_closed"
            if _machine_of(event) == UNKNOWN_MACHINE and machine != UNKNOWN_MACHINE:
                event = await _repair_machine(ctx, batch_id, lane, path, machine)
    if action == "closed":
        ctx.written.append((path, event))
    if action == "closed" and machine == UNKNOWN_MACHINE:  # batch-audit will not count it as factual
        ctx.warn(f"lane {lane} closed with closed_by.machine UNKNOWN: batch-audit will report it "
                 "incomplete; finish it by running this command again with AGENT_COORD_MACHINE_ID "
                 "set (or --host)")
    if lane_entry.get("terminal") is not None:  # stamped before: a replay, or a conflict
        if semantics(lane_entry) != semantics(event):
            raise conflict(lane)
        return action, event, path, False
    await stamp_lane(ctx, batch_id, lane, event)
    return action, event, path, True


def _machine_of(record: dict[str, Any]) -> Any:
    closer = record.get("closed_by")
    return closer.get("machine") if isinstance(closer, dict) else None


async def _repair_machine(ctx: Ctx, batch_id: str, lane: str, path: str,
                          machine: str) -> dict[str, Any]:
    """A lane closed without a machine id, closed again with one: the same closeout, so its
    event and the lane's stamp take the machine (nothing else changes) and batch-audit
    counts it. The one way out of UNKNOWN; a known machine is never replaced."""
    def fill(record: dict[str, Any]) -> dict[str, Any] | None:
        if _machine_of(record) != UNKNOWN_MACHINE:
            return None
        return dict(record, closed_by={**record["closed_by"], "machine": machine})

    async def decide_event(current: Versioned | None) -> Keep | Put:
        if current is None:
            raise UsageError(f"lane {lane}: its lane_closed event vanished during the repair; retry")
        repaired = fill(current.data)
        return Keep(current.data) if repaired is None else Put(repaired, repaired)

    async def decide_manifest(current: Versioned | None) -> Keep | Put:
        if current is None:
            return Keep(None)
        lanes = current.data.get("lanes")
        new_lanes = [(fill(e) or e) if isinstance(e, dict) and lane_name_of(e) == lane else e
                     for e in lanes] if isinstance(lanes, list) else lanes
        if new_lanes == lanes:
            return Keep(None)
        return Put(dict(current.data, lanes=new_lanes, updated_at=format_ts(ctx.clock.now())), None)

    event = await cas_update(ctx.store, path, decide_event)
    await cas_update(ctx.store, ids.batch_path(batch_id), decide_manifest,
                     attempts=MANIFEST_CAS_ATTEMPTS, backoff=MANIFEST_CAS)
    ctx.warn(f"lane {lane}: closed_by.machine UNKNOWN repaired to {machine}")
    return event


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
            entry = dict(entry, status=event["terminal"], terminal=event["terminal"])
            entry.setdefault("closed_at", now)
            for f in _LANE_STAMP_FIELDS:  # a value the lane already has stays
                if entry.get(f) is None and f in event:
                    entry[f] = event[f]
            entry.update({f: event[f] for f in _LANE_FACT_FIELDS if event.get(f) is not None})
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


async def record_lane_closed(ctx: Ctx, closeout: dict[str, Any]) -> dict[str, Any]:
    """The explicit producer path: record-event --type lane_closed --terminal … (the claim
    is not touched)."""
    check_terminal(closeout.get("terminal"))
    for name in ("agent_id", "repo", "target"):
        if not closeout.get(name):
            raise UsageError(f"missing required --{name.replace('_', '-')}")
    check_fields(closeout)
    action, event, path, batch_changed = await close_lane(ctx, closeout)
    if action == "closed":
        return {"action": "recorded", "path": path, "event": event}
    return {"action": "reconciled" if batch_changed else "already_closed", "path": path, "event": event}
