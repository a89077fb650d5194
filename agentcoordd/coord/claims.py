"""claim and release: leases on a repo target, refereed by heartbeat liveness."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentcoordd.coord import closeout, lease, trust
from agentcoordd.coord.cas import Keep, Put, cas_update
from agentcoordd.coord.common import metadata_fields, text_field
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.events import emit, lifecycle_fields
from agentcoordd.model import ids
from agentcoordd.model.errors import ClaimRefused, OperationalError, UsageError
from agentcoordd.model.identity import stamp_attribution
from agentcoordd.model.records import SCHEMA_VERSION, Claim, Metadata, load
from agentcoordd.model.timefmt import expiry, format_ts
from agentcoordd.store.base import Versioned

DEFAULT_CLAIM_TTL = 4 * 3600
# The metadata options, as lifecycle events copy them from the claim (agent-coord's list).
METADATA_FIELDS = tuple(Metadata.__struct_fields__)
ACQUIRED_FIELDS = ("agent_id", "repo", "target", "branch", *METADATA_FIELDS, "fencing_token")
RELEASED_FIELDS = ("agent_id", "repo", "target", "branch", "status", *METADATA_FIELDS,
                   "release_mode", "handoff_to", "handoff_note")
HANDOFF_FIELDS = ("release_mode", "handoff_to", "handoff_note")
# What a same-holder renewal of the same lane keeps of the stored claim; anything else
# (a new lane, a released or foreign claim) starts from a fresh record.
RENEWAL_KEEPS = (
    "batch_id", "branch", "thread_handle", "chat_handle", "host", "machine_id", "session_id",
    "session_source", "pr_url", "dashboard_url", "operator", "phase", "generation", "instance_id",
    *HANDOFF_FIELDS, "terminal", "pr_state", "evidence_url", "workspace", "closed_by",
    "synthetic", "synthetic_kind", "previous_holder", "takeover_reason", "takeover_note",
    "fencing_token", "route",
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
    forced: str | None = None,
    ensure_acquired: bool = False,
) -> dict[str, Any]:
    """Acquire or renew a lease; refuse while another holder is live or stale
    (the lease rules: coord/lease.py).

    claim --next: `lane_name` names the batch lane on the claim.acquired event, and
    `surveyed_holder` is the holder its survey saw (None: no active claim): any other
    holder found now claimed the target since, and is refused without the takeover
    rule. `still_open` is asked after the claim record is read: a lane's lane_closed is
    written before its claim is released, so a released claim read here with the lane
    still open means the lane is open. `forced` (takeover --force): the operator's
    reason; any holder is displaced without a liveness decision."""
    ids.agent_id(agent_id)
    path = ids.claim_path(repo, target)
    if batch_id is not None:
        ids.batch_id(batch_id)
    text_field("branch", branch)
    ttl = lease.bounded_ttl(ttl, DEFAULT_CLAIM_TTL, ctx.lease)
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
        takeover: dict[str, str] = {}
        if stored is not None and stored.get("status") == "active":
            held = load(Claim, stored, path)
            if held.agent_id != agent_id:
                if forced is not None:
                    reason = lease.FORCED
                else:
                    if surveyed_holder is not ANY_HOLDER and held.agent_id != surveyed_holder:
                        raise ClaimRefused(
                            f"CLAIM_REFUSED: active claim for {_label(repo, target)} held by "
                            f"{held.agent_id}; claimed since the lane was surveyed",
                            holder=held.agent_id, liveness="live")
                    verdict = await lease.check_takeover(ctx, held, repo, target, now)
                    await lease.check_clock(ctx, f"takeover of {_label(repo, target)} from "
                                                 f"{held.agent_id}")
                    reason = verdict.takeover or lease.HEARTBEAT_DEAD
                takeover = {"previous_holder": held.agent_id, "takeover_reason": reason}
                if forced is not None:  # the operator continues the holder's lane and branch
                    takeover.update({k: stored[k] for k in ("batch_id", "branch")
                                     if k not in lane and isinstance(stored.get(k), str)},
                                    takeover_note=forced)
        renewal = _renews(stored, agent_id, lane)
        kept = {k: stored[k] for k in RENEWAL_KEEPS if stored and stored.get(k) is not None} if renewal else {}
        if "fencing_token" not in kept:  # a new grant (or one made before tokens: it gets one now)
            kept["fencing_token"] = lease.grant_token(ctx, stored, now)
        stamped = format_ts(now)
        record = stamp_attribution({
            **kept,
            "schema_version": SCHEMA_VERSION, "repo": repo, "target": target, "agent_id": agent_id,
            **lane,
            "status": "active",
            "claimed_at": stored.get("claimed_at", stamped) if renewal and stored else stamped,
            "updated_at": stamped, "expires_at": expiry(now, ttl),
            **fields, **takeover,
        }, ctx.identity)
        load(Claim, record, path)
        if renewal:
            action = "renewed"
        else:
            action = "taken_over" if takeover else "acquired"
        acquired = not renewal or any(
            k in fields and (stored or {}).get(k, _ABSENT) != fields[k] for k in REACQUIRE_FIELDS)
        return Put(record, (action, acquired, record))

    action, acquired, record = await cas_update(ctx.store, path, decide)
    # A grant's claim.acquired has an id of its own (lease.grant_event_id): with
    # `ensure_acquired` (claim --next) a renewal writes it again create-only, so a grant
    # whose first call died before its event was written (a daemon killed mid-call, the
    # agent's retry) still leaves its trail, once.
    if acquired or (ensure_acquired and action == "renewed"):
        fields_of = lifecycle_fields(record, ACQUIRED_FIELDS)
        if lane_name is not None:
            fields_of["lane"] = lane_name
        if action == "taken_over":
            fields_of.update(previous_holder=record["previous_holder"],
                             takeover_reason=record["takeover_reason"],
                             message=f"taken over from {record['previous_holder']}: "
                                     f"{lease.REASON_TEXT[record['takeover_reason']]}")
        # a re-acquisition (same holder, a new generation or instance) is an event of its
        # own time, with a fresh id; a grant's is the grant's
        reacquired = acquired and action == "renewed"
        event_id = None if reacquired else lease.grant_event_id(record)
        if acquired or event_id is not None:
            await emit(ctx, record.get("batch_id"), "claim.acquired", fields_of, event_id=event_id)
    return {"action": action, "path": path, "claim": record}


_ABSENT = object()


async def force_takeover(ctx: Ctx, *, agent_id: str, repo: str, target: str, reason: str | None,
                         force: bool, batch_id: str | None = None, branch: str | None = None,
                         ttl: int | None = None, meta: Metadata = Metadata()) -> dict[str, Any]:
    """`takeover --force --reason TEXT`: the operator's override. `agent_id` takes the
    target from whoever holds it, live or not, with no liveness decision; the claim
    records the previous holder and the reason, and a typed human_intervention event
    (kind takeover) joins the claim.acquired event in the batch's trail."""
    if not force:
        raise UsageError("takeover takes the target from a holder that may be alive: pass "
                         "--force, and --reason TEXT (both are recorded)")
    note = text_field("reason", reason, required=True)
    assert note is not None
    if not note.strip():
        raise UsageError("--reason must say why (it is recorded)")
    result = await claim(ctx, agent_id=agent_id, repo=repo, target=target, batch_id=batch_id,
                         branch=branch, ttl=ttl, meta=meta, forced=note)
    record = result["claim"]
    if result["action"] == "taken_over":
        await emit(ctx, record.get("batch_id"), "human_intervention", {
            **lifecycle_fields(record, ("agent_id", "repo", "target", "branch")),
            "kind": "takeover", "previous_holder": record["previous_holder"],
            "takeover_reason": lease.FORCED, "message": note})
        if not record.get("batch_id"):
            ctx.warn(f"{_label(repo, target)} has no batch: the takeover is recorded in the claim "
                     "only (previous_holder, takeover_note), not as an event")
    return result


def _renews(stored: dict[str, Any] | None, agent_id: str, lane: dict[str, str]) -> bool:
    """The same holder's active claim on the same lane: a given batch or branch that
    differs from the stored one is a new lane (one the claim lacked is not)."""
    return (stored is not None and stored.get("status") == "active"
            and stored.get("agent_id") == agent_id
            and all(k not in stored or stored[k] == v for k, v in lane.items()))


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
    fencing_token: int | None = None,
    force: bool = False,
    actor: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Release the caller's claim: plain, structured handoff, or terminal closeout.

    A claim taken on another machine or in another session (coord.trust.foreign) is
    released only with `force`, which records `actor` (who did it) as `forced_by` in the
    claim and its claim.released event.

    As agent-coord: the record keeps what it had, restamped with the metadata given
    (and --branch); a handoff of an earlier release is dropped unless given again; a
    plain release of a released claim releases it again (and says so in an event).
    A terminal release writes the lane_closed event first (closeout.close_lane), then
    the claim carries the authoritative closeout; a retry that changes nothing is
    "already_closed". `lane` names the batch lane it closes (`run --lane`), for a target
    that more than one lane lists. `fencing_token` (--fencing-token): the grant it names
    must be the claim's, else exit 3 and nothing is written (a retry of a release it
    made itself still passes: the record keeps the token).
    """
    ids.agent_id(agent_id)
    path = ids.claim_path(repo, target)
    text_field("branch", branch)
    fields = metadata_fields(meta)
    if branch is not None:
        fields["branch"] = branch
    handoff = handoff_to is not None or handoff_note is not None
    if handoff_to:  # an empty destination is a handoff to nobody in particular, as in agent-coord
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
        if force:
            raise UsageError("--force cannot close a lane (--terminal): release the claim with "
                             "--force, then close the lane as its new holder")
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
            if fencing_token is not None:
                raise lease.fenced(lease.fence_verdict(None, repo, target, fencing_token))
            raise UsageError(f"no claim exists for {_label(repo, target)}")
        if fencing_token is not None and (not isinstance(current.data, dict)
                                          or current.data.get("fencing_token") != fencing_token):
            verdict = lease.fence_verdict(current.data, repo, target, fencing_token)
            if verdict["state"] == "unknown":
                raise OperationalError(verdict["detail"])
            raise lease.fenced(verdict)
        held = load(Claim, current.data, path)
        if held.agent_id and held.agent_id != agent_id:  # a usage error, as in agent-coord
            raise UsageError(f"claim belongs to {held.agent_id}; {agent_id} cannot release it")
        # Only an active claim is someone's work; a released one is replayed by anyone.
        forced = (_forced(current.data, ctx, agent_id, _label(repo, target), force, actor)
                  if held.status == "active" else None)
        now = format_ts(ctx.clock.now())
        record = {k: v for k, v in current.data.items() if k not in HANDOFF_FIELDS}
        record.update(agent_id=held.agent_id or agent_id, status="released", released_by=agent_id,
                      released_at=now, updated_at=now, expires_at=now)
        record.pop("forced_by", None)
        record.update(fields, **({"forced_by": forced} if forced else {}))
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
        if "forced_by" in record:
            event_fields["forced_by"] = record["forced_by"]
        await emit(ctx, record.get("batch_id"), "claim.released", event_fields)
        return {"action": "released", "path": path, "claim": record}
    assert closed is not None
    action, event, event_path, batch_changed = closed
    changed = written or action == "closed" or batch_changed
    if record is None:
        record = (await ctx.store.get(path)).data  # type: ignore[union-attr]
    return {"action": "released" if changed else "already_closed", "path": path, "claim": record,
            "lane_closed": {"path": event_path, "event": event}}


def _forced(stored: dict[str, Any], ctx: Ctx, agent_id: str, label: str, force: bool,
            actor: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a release of another machine's or session's claim records (None: the
    caller's own); a usage error without `force` (coord.trust)."""
    why = trust.foreign(stored, ctx.identity)
    if why is None:
        return None
    if not force:
        raise UsageError(f"claim of {agent_id} on {label} is another agent's: {why}; release it "
                         "with --force (recorded in its event as forced_by)")
    ctx.warn(f"released {agent_id}'s claim on {label} by force ({why}); recorded as forced_by")
    return trust.forced_by(actor or {}, why)


def _closeout_view(claim: dict[str, Any]) -> tuple[Any, ...]:
    """The closeout a claim records, machine included (a legacy claim without closed_by is
    repaired from the event)."""
    return (*closeout.semantics(claim), repr(claim.get("closed_by")))
