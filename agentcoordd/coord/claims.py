"""claim and release: leases on a repo target, refereed by heartbeat liveness."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
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
# The metadata options, as lifecycle events copy them from the claim (agent-coord's list).
METADATA_FIELDS = tuple(Metadata.__struct_fields__)
ACQUIRED_FIELDS = ("agent_id", "repo", "target", "branch", *METADATA_FIELDS)
RELEASED_FIELDS = ("agent_id", "repo", "target", "branch", "status", *METADATA_FIELDS,
                   "release_mode", "handoff_to", "handoff_note")
HANDOFF_FIELDS = ("release_mode", "handoff_to", "handoff_note")
# What a same-holder renewal of the same lane keeps of the stored claim; anything else
# (a new lane, a released or foreign claim) starts from a fresh record.
RENEWAL_KEEPS = (
    "batch_id", "branch", "thread_handle", "chat_handle", "host", "machine_id", "session_id",
    "session_source", "pr_url", "dashboard_url", "operator", "phase", "generation", "instance_id",
    *HANDOFF_FIELDS, "terminal", "pr_state", "evidence_url", "workspace", "closed_by",
    "synthetic", "synthetic_kind",
)
# A renewal that changes or first sets one of these is a new acquisition (a restarted
# process), so it emits claim.acquired.
REACQUIRE_FIELDS = ("generation", "instance_id")


# claim(surveyed_holder=...) default: whoever holds the target, the takeover rule decides.
ANY_HOLDER = object()


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
    lane_name: str | None = None,
    surveyed_holder: str | None | object = ANY_HOLDER,
    still_open: Callable[[], Awaitable[bool]] | None = None,
) -> dict[str, Any]:
    """Acquire or renew a lease; refuse while another holder is live or stale.

    claim --next: `lane_name` names the batch lane on the claim.acquired event, and
    `surveyed_holder` is the holder its survey saw (None: no active claim): any other
    holder found now claimed the target since, and is refused without the takeover
    rule — a fresh claim whose holder's heartbeat (from an earlier lane) is dead must
    not be taken over by the next agent in line. `still_open` is asked after the claim
    record is read: a lane's lane_closed is written before its claim is released, so a
    released claim read here with the lane still open means the lane is open."""
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

    lane = {k: v for k, v in (("batch_id", batch_id), ("branch", branch)) if v is not None}

    async def decide(current: Versioned | None) -> Put:
        now = ctx.clock.now()
        # Only an active claim holds anything: a record that is not an object, or
        # one without status active ({} say), is claimed over as agent-coord does.
        # An active one must be a valid claim (else exit 2: never guess a holder away).
        stored = current.data if current is not None and isinstance(current.data, dict) else None
        if still_open is not None and not await still_open():
            raise ClaimRefused(f"CLAIM_REFUSED: lane of {_label(repo, target)} is closed",
                               holder="", liveness="closed")
        if stored is not None and stored.get("status") == "active":
            held = load(Claim, stored, path)
            if held.agent_id != agent_id:
                if surveyed_holder is not ANY_HOLDER and held.agent_id != surveyed_holder:
                    raise ClaimRefused(
                        f"CLAIM_REFUSED: active claim for {_label(repo, target)} held by "
                        f"{held.agent_id}; claimed since the lane was surveyed",
                        holder=held.agent_id, liveness="live")
                await check_takeover(ctx, held, repo, target, now)
        renewal = _renews(stored, agent_id, lane)
        kept = {k: stored[k] for k in RENEWAL_KEEPS if stored and stored.get(k) is not None} if renewal else {}
        stamped = format_ts(now)
        record = stamp_attribution({
            **kept,
            "schema_version": SCHEMA_VERSION, "repo": repo, "target": target, "agent_id": agent_id,
            **lane,
            "status": "active",
            "claimed_at": stored.get("claimed_at", stamped) if renewal and stored else stamped,
            "updated_at": stamped, "expires_at": expiry(now, ttl),
            **fields,
        }, ctx.identity)
        load(Claim, record, path)
        if renewal:
            action = "renewed"
        else:
            action = "taken_over" if stored and stored.get("status") == "active" and \
                stored.get("agent_id") != agent_id else "acquired"
        acquired = not renewal or any(
            k in fields and (stored or {}).get(k, _ABSENT) != fields[k] for k in REACQUIRE_FIELDS)
        return Put(record, (action, acquired, record))

    action, acquired, record = await cas_update(ctx.store, path, decide)
    if acquired:
        fields_of = lifecycle_fields(record, ACQUIRED_FIELDS)
        if lane_name is not None:
            fields_of["lane"] = lane_name
        await emit(ctx, record.get("batch_id"), "claim.acquired", fields_of)
    return {"action": action, "path": path, "claim": record}


_ABSENT = object()


def _renews(stored: dict[str, Any] | None, agent_id: str, lane: dict[str, str]) -> bool:
    """The same holder's active claim on the same lane: a given batch or branch that
    differs from the stored one is a new lane (one the claim lacked is not)."""
    return (stored is not None and stored.get("status") == "active"
            and stored.get("agent_id") == agent_id
            and all(k not in stored or stored[k] == v for k, v in lane.items()))


async def check_takeover(ctx: Ctx, held: Claim, repo: str, target: str, now: dt.datetime) -> None:
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
    if expires is None or now < expires:  # an unreadable expiry refuses (docs/compat.md#unreadable-claim-expiry)
        raise ClaimRefused(
            f"CLAIM_REFUSED: active claim for {label} held by {held.agent_id}; "
            f"heartbeat {reason}; fallback claim expires at {held.expires_at}",
            holder=held.agent_id,
            liveness=reason,
        )


async def release(
    ctx: Ctx,
    *,
    agent_id: str,
    repo: str,
    target: str,
    branch: str | None = None,
    meta: Metadata = Metadata(),
    handoff_to: str | None = None,
    handoff_note: str | None = None,
    terminal: str | None = None,
    pr_state: str | None = None,
    evidence_url: str | None = None,
    workspace: str | None = None,
    lane: str | None = None,
) -> dict[str, Any]:
    """Release the caller's claim: plain, structured handoff, or terminal closeout.

    As agent-coord: the record keeps what it had, restamped with the metadata given
    (and --branch); a handoff of an earlier release is dropped unless given again; a
    plain release of a released claim releases it again (and says so in an event).
    A terminal release writes the lane_closed event first (closeout.close_lane), then
    the claim carries the authoritative closeout; a retry that changes nothing is
    "already_closed". `lane` names the batch lane it closes (`run --lane`), for a target
    that more than one lane lists.
    """
    ids.agent_id(agent_id)
    path = ids.claim_path(repo, target)
    text_field("branch", branch)
    fields = metadata_fields(meta)
    if branch is not None:
        fields["branch"] = branch
    handoff = handoff_to is not None or handoff_note is not None
    if handoff_to is not None:
        ids.agent_id(handoff_to)
    text_field("handoff_note", handoff_note)
    closing = {"terminal": terminal, "pr_state": pr_state, "evidence_url": evidence_url,
               "workspace": workspace}
    if terminal is not None:
        closeout.check_terminal(terminal)
        if handoff:
            raise UsageError("--terminal cannot be combined with --handoff-to or --handoff-note")
        closeout.check_fields({**fields, **closing, "repo": repo})  # before the claim is read
        text_field("lane", lane)
        if lane == "":
            raise UsageError("--lane must not be empty")
    elif lane is not None:
        raise UsageError("--lane requires --terminal")
    elif pr_state is not None or evidence_url is not None or workspace is not None:
        given = next(f"--{k.replace('_', '-')}" for k in ("pr_state", "evidence_url", "workspace")
                     if closing[k] is not None)
        raise UsageError(f"{given} requires --terminal")
    if handoff:
        fields.update(release_mode="handoff")
        if handoff_to is not None:
            fields["handoff_to"] = handoff_to
        if handoff_note is not None:
            fields["handoff_note"] = handoff_note

    closed: tuple[str, dict[str, Any], str, bool] | None = None

    async def decide(current: Versioned | None) -> Keep | Put:
        nonlocal closed
        if current is None:
            raise UsageError(f"no claim exists for {_label(repo, target)}")
        held = load(Claim, current.data, path)
        if held.agent_id and held.agent_id != agent_id:  # a usage error, as in agent-coord
            raise UsageError(f"claim belongs to {held.agent_id}; {agent_id} cannot release it")
        now = format_ts(ctx.clock.now())
        record = {k: v for k, v in current.data.items() if k not in HANDOFF_FIELDS}
        record.update(agent_id=held.agent_id or agent_id, status="released", released_by=agent_id,
                      released_at=now, updated_at=now, expires_at=now)
        record.update(fields)
        if terminal is not None:
            for key, value in closing.items():  # what this call omits is not inherited
                if value is None:
                    record.pop(key, None)
                else:
                    record[key] = value
            closeout.check_fields(record)
            if not record.get("batch_id"):
                raise UsageError("terminal release requires a claim with batch_id")
            if closed is None:  # once: a lost CAS race re-decides, the event stands
                fields_of = {k: record[k] for k in closeout.CLOSEOUT_FIELDS if record.get(k) is not None}
                closed = await closeout.close_lane(ctx, fields_of if lane is None else {**fields_of, "lane": lane})
            event = closed[1]
            for key in closeout.CLAIM_STAMP_FIELDS:
                if event.get(key) is None:
                    record.pop(key, None)
                else:
                    record[key] = event[key]
            if held.status == "released" and _closeout_view(current.data) == _closeout_view(record):
                return Keep((False, None))  # nothing to reconcile on the claim
        record = stamp_attribution(record, ctx.identity)
        load(Claim, record, path)
        return Put(record, (True, record))

    written, record = await cas_update(ctx.store, path, decide)
    if terminal is None:
        event_fields = lifecycle_fields(record, RELEASED_FIELDS)
        if "handoff_note" in record:
            event_fields["message"] = record["handoff_note"]
        await emit(ctx, record.get("batch_id"), "claim.released", event_fields)
        return {"action": "released", "path": path, "claim": record}
    assert closed is not None
    action, event, event_path, batch_changed = closed
    changed = written or action == "closed" or batch_changed
    if record is None:
        record = (await ctx.store.get(path)).data  # type: ignore[union-attr]
    return {"action": "released" if changed else "already_closed", "path": path, "claim": record,
            "lane_closed": {"path": event_path, "event": event}}


def _closeout_view(claim: dict[str, Any]) -> tuple[Any, ...]:
    """The closeout a claim records, machine included (a legacy claim without closed_by is
    repaired from the event)."""
    return (*closeout.semantics(claim), repr(claim.get("closed_by")))
