"""Capacity reservations at run time (schema/state/v1/capacity-reservation/, docs/capacity.md).

The rules are the model's (model/foundation/capacity.py `Ledger`: validation,
idempotent retry, payload conflict, the unique union of occupied/blocked and
held lane refs, all-or-nothing, expiry at exactly expires_at); this module
loads the four inputs from the store, runs those rules and persists the result.

One record per (workspace, capacity profile) serialises admission:
`capacity_holds/<ws>/<profile>.json` lists the profile's active reservations.
Every reserve, consume and release is a compare-and-swap of that record
(coord/cas.py, as claims are), so two planners racing for the last slot cannot
both win on any backend: the loser re-reads, sees the slot taken, and is
refused (exit 4). `capacity_reservations/<ws>/<id>.json` is written after the
holds record commits; a crash in between leaves a hold that still counts (fail
closed) until it expires, and a retry with the same id writes the record.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, TypeVar

import msgspec

from agentcoordd.coord.cas import Keep, Put, cas_update
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.host_limits import effective_for, limit_words
from agentcoordd.coord.waits import find_lane, read_manifest
from agentcoordd.model import ids
from agentcoordd.model.errors import ReservationRefused, UsageError
from agentcoordd.model.foundation import capacity as model
from agentcoordd.model.foundation.capacity import (
    CapacityProfile,
    CapacityReservation,
    Inbox,
    LaneOccupancy,
    Ledger,
    Refused,
)
from agentcoordd.model.foundation.common import timestamp
from agentcoordd.model.foundation.host_limit import canonical_quota_host
from agentcoordd.model.timefmt import format_ts
from agentcoordd.store.base import Conflict, Store, Versioned

S = TypeVar("S")
HOLDS_SCHEMA = 1


def profile_path(workspace: str, profile_id: str) -> str:
    return ids.admission_path("capacity_profiles", workspace, profile_id)


def inbox_path(workspace: str, inbox_id: str) -> str:
    return ids.admission_path("inboxes", workspace, inbox_id)


def occupancy_path(workspace: str, lane_ref: str) -> str:
    return ids.admission_path("lane_occupancies", workspace, lane_ref)


def reservation_path(workspace: str, reservation_id: str) -> str:
    return ids.admission_path("capacity_reservations", workspace, reservation_id)


def holds_path(workspace: str, profile_id: str) -> str:
    return ids.admission_path("capacity_holds", workspace, profile_id)


def _convert(data: Any, kind: type[S], path: str) -> S:
    try:
        return msgspec.convert(data, kind)
    except (msgspec.ValidationError, ValueError) as exc:
        # A malformed input fails admission closed, naming the record.
        raise ReservationRefused(f"malformed record {path}: {exc}") from None


async def _load(store: Store, path: str, kind: type[S]) -> S | None:
    found = await store.get(path)
    return None if found is None else _convert(found.data, kind, path)


async def _list(store: Store, prefix: str) -> list[Any]:
    entries, cursor = [], None
    while True:
        page = await store.list(prefix, cursor=cursor)
        entries.extend(page.entries)
        cursor = page.next_cursor
        if not cursor:
            return entries


def _record(struct: Any) -> dict[str, Any]:
    return msgspec.to_builtins(struct)


def _checked(value: str, what: str) -> str:
    try:
        return msgspec.convert(value, model.CanonicalId)
    except msgspec.ValidationError:
        raise UsageError(f"invalid {what}: {value!r} (lowercase letters, digits, . _ -)") from None


# ---- the inputs: profiles, inboxes, occupancy ----------------------------------


async def _put(ctx: Ctx, path: str, record: dict[str, Any], kind: type[Any]) -> dict[str, Any]:
    """Write a whole input record (it is what the operator says it is now)."""
    try:
        msgspec.convert(record, kind)
    except (msgspec.ValidationError, ValueError) as exc:
        raise UsageError(f"invalid {kind.__name__}: {exc}") from None
    return await cas_update(ctx.store, path, lambda _current: Put(record, record))


async def set_profile(ctx: Ctx, *, workspace: str, profile_id: str, max_concurrency: int,
                      enabled: bool) -> dict[str, Any]:
    record = {"schema_version": 1, "workspace": workspace,
              "capacity_profile_id": _checked(profile_id, "capacity profile id"),
              "status": "enabled" if enabled else "disabled", "max_concurrency": max_concurrency,
              "updated_at": format_ts(ctx.clock.now())}
    return await _put(ctx, profile_path(workspace, profile_id), record, CapacityProfile)


async def set_inbox(ctx: Ctx, *, workspace: str, inbox_id: str, profile_id: str,
                    enabled: bool) -> dict[str, Any]:
    record = {"schema_version": 1, "workspace": workspace,
              "inbox_id": _checked(inbox_id, "inbox id"),
              "capacity_profile_id": _checked(profile_id, "capacity profile id"),
              "status": "enabled" if enabled else "disabled",
              "updated_at": format_ts(ctx.clock.now())}
    return await _put(ctx, inbox_path(workspace, inbox_id), record, Inbox)


async def set_occupancy(ctx: Ctx, *, workspace: str, lane_ref: str, profile_id: str,
                        inbox_id: str, state: str, reason: str | None = None) -> dict[str, Any]:
    now = format_ts(ctx.clock.now())
    record: dict[str, Any] = {"schema_version": 1, "workspace": workspace, "lane_ref": lane_ref,
                              "capacity_profile_id": profile_id, "inbox_id": inbox_id,
                              "state": state, "updated_at": now}
    if state == "blocked":
        record["blocked_reason"] = reason or "blocked"
    elif reason is not None:
        raise UsageError("--reason is only for --state blocked")
    if state in ("terminal", "cancelled"):
        record["terminal_at"] = now
    return await _put(ctx, occupancy_path(workspace, lane_ref), record, LaneOccupancy)


async def _occupancies(store: Store, workspace: str, profile_id: str) -> list[LaneOccupancy]:
    """The persisted occupancy of the profile's lanes (blocked lanes count without a heartbeat)."""
    found = []
    for entry in await _list(store, ids.admission_prefix("lane_occupancies", workspace)):
        occupancy = _convert(entry.data, LaneOccupancy, entry.path)
        if occupancy.workspace != workspace:
            raise ReservationRefused(f"cross-workspace record {entry.path}")
        if occupancy.capacity_profile_id == profile_id:
            found.append(occupancy)
    return found


# ---- the holds record: the profile's active reservations ----------------------


def _active(current: Versioned | None, now: dt.datetime) -> list[CapacityReservation]:
    """The reservations of a holds record that still hold a lane at `now`."""
    if current is None:
        return []
    rows = current.data.get("reservations") if isinstance(current.data, dict) else None
    if not isinstance(rows, list):
        raise ReservationRefused("malformed capacity holds record")
    held = [_convert(row, CapacityReservation, "capacity holds") for row in rows]
    return [r for r in held if now < timestamp(r.expires_at)
            and any(h.state == "active" for h in r.lane_holds)]


def _holds_record(workspace: str, profile_id: str,
                  reservations: list[CapacityReservation]) -> dict[str, Any]:
    return {"schema_version": HOLDS_SCHEMA, "workspace": workspace,
            "capacity_profile_id": profile_id,
            "reservations": [_record(r) for r in reservations]}


def _refused(exc: Refused) -> ReservationRefused:
    return ReservationRefused(exc.reason, exc.outcome)


class Inputs(msgspec.Struct, kw_only=True):
    profile: CapacityProfile | None
    inbox: Inbox | None
    occupancies: list[LaneOccupancy]


async def _inputs(store: Store, workspace: str, profile_id: str, inbox_id: str) -> Inputs:
    profile = await _load(store, profile_path(workspace, profile_id), CapacityProfile)
    inbox = await _load(store, inbox_path(workspace, inbox_id), Inbox)
    for record in (profile, inbox):
        if record is not None and record.workspace != workspace:
            raise ReservationRefused(f"cross-workspace input {type(record).__name__}")
    return Inputs(profile=profile, inbox=inbox,
                  occupancies=await _occupancies(store, workspace, profile_id))


def _ledger(workspace: str, inputs: Inputs, reservations: list[CapacityReservation]) -> Ledger:
    return Ledger(workspace=workspace,
                  profiles=[inputs.profile] if inputs.profile is not None else [],
                  inboxes=[inputs.inbox] if inputs.inbox is not None else [],
                  occupancies=inputs.occupancies, reservations=reservations)


def usage(ledger: Ledger, now: dt.datetime, profile_id: str) -> dict[str, Any]:
    used = sorted(ledger.used(now))
    capacity = ledger.profiles[profile_id].max_concurrency if profile_id in ledger.profiles else None
    return {"used_lane_refs": used, "used": len(used), "max_concurrency": capacity,
            "remaining_slots": None if capacity is None else max(0, capacity - len(used))}


# ---- reserve -------------------------------------------------------------------


async def reserve(ctx: Ctx, *, workspace: str, request: dict[str, Any]) -> dict[str, Any]:
    """Create (or idempotently repeat) an all-or-nothing hold; refused: exit 4.

    `request` carries reservation_id, capacity_profile_id, inbox_id, batch_id or
    planning_attempt_id, owner_id, instance_id, lane_refs and optionally
    ttl_seconds; the owner machine is the caller's resolved machine id."""
    machine = ctx.identity.machine_id
    if machine is None:
        raise UsageError("reserve needs the caller's machine id: set AGENT_COORD_MACHINE_ID")
    request = {**{k: v for k, v in request.items() if v is not None},
               "owner_machine": machine, "workspace": workspace}
    rid = _checked(request["reservation_id"], "reservation id")
    profile_id = _checked(request["capacity_profile_id"], "capacity profile id")
    _checked(request["inbox_id"], "inbox id")
    for ref in request.get("lane_refs") or []:
        try:
            msgspec.convert(ref, model.LaneRef)
        except msgspec.ValidationError:
            raise ReservationRefused(f"malformed lane ref {ref!r} (want <batch-id>:<lane>)") from None
    inputs = await _inputs(ctx.store, workspace, profile_id, request["inbox_id"])
    existing = await _load(ctx.store, reservation_path(workspace, rid), CapacityReservation)
    now = ctx.clock.now()
    await _host_limit_gate(ctx, workspace, machine, request.get("lane_refs") or [], now)

    def decide(current: Versioned | None) -> Any:
        active = _active(current, now)
        known = active + [existing] if existing is not None and all(
            r.reservation_id != rid for r in active) else active
        ledger = _ledger(workspace, inputs, known)
        try:
            outcome = ledger.reserve(request, now)
        except Refused as exc:
            raise _refused(exc) from None
        made = ledger.reservations[rid]
        result = (outcome, made, usage(ledger, now, profile_id))
        if outcome == model.IDEMPOTENT:
            return Keep(result)
        return Put(_holds_record(workspace, profile_id, [*active, made]), result)

    outcome, made, used = await cas_update(ctx.store, holds_path(workspace, profile_id), decide)
    if existing is None:
        try:
            await ctx.store.create(reservation_path(workspace, rid), _record(made))
        except Conflict:
            pass  # a retry of this same reservation wrote it first
    return {"outcome": outcome, "reservation": effective(made, now), **used}


async def _host_limit_gate(ctx: Ctx, workspace: str, machine: str, lane_refs: list[str],
                           now: dt.datetime) -> None:
    """Host limits stay a separate eligibility gate: a lane whose registered manifest entry
    names a quota_host that an effective limit of the planner's machine covers is
    refused (exit 4, naming the limit). A batch this caller cannot read (not registered,
    outside its scopes) names no quota host: nothing to gate."""
    limits = await effective_for(ctx.store, workspace, machine, now)
    if not limits:
        return
    manifests: dict[str, Any] = {}
    for ref in lane_refs:
        batch, lane_name = ref.rsplit(":", 1)
        if batch not in manifests:
            manifests[batch] = await read_manifest(ctx, batch)
        manifest = manifests[batch]
        lane = find_lane(manifest, lane_name) if isinstance(manifest, dict) else None
        quota = lane.get("quota_host") if lane is not None else None
        limit = limits.get(canonical_quota_host(quota)) if isinstance(quota, str) else None
        if limit is not None:
            raise ReservationRefused(f"lane {ref} is on {limit_words(limit)}")


# ---- consume, release ----------------------------------------------------------


def _moved(reservation: CapacityReservation, state: str, owner: dict[str, str],
           lane_refs: list[str] | None, now: dt.datetime) -> CapacityReservation:
    """The reservation after `state` (consumed | released) of its active holds: the
    model's transition, on a ledger of this one reservation."""
    ledger = Ledger(reservations=[reservation])
    move = ledger.consume if state == "consumed" else ledger.release
    try:
        return move(reservation.reservation_id, now, owner=owner, lane_refs=lane_refs)
    except Refused as exc:
        raise _refused(exc) from None


async def settle(ctx: Ctx, *, workspace: str, reservation_id: str, state: str,
                 owner_id: str, instance_id: str, lane_refs: list[str] | None) -> dict[str, Any]:
    """consume (the lanes launched: their occupancy becomes `occupied`) or release
    holds of a reservation; only its owner (machine, owner id, instance) may. Holds
    move forward only: a consumed, released or expired hold never becomes active."""
    machine = ctx.identity.machine_id
    if machine is None:
        raise UsageError(f"{state[:-1] if state.endswith('ed') else state} needs the caller's "
                         "machine id: set AGENT_COORD_MACHINE_ID")
    rid = _checked(reservation_id, "reservation id")
    path = reservation_path(workspace, rid)
    reservation = await _load(ctx.store, path, CapacityReservation)
    if reservation is None:
        raise ReservationRefused(f"no reservation {rid} in workspace {workspace}")
    owner = {"owner_machine": machine, "owner_id": owner_id, "instance_id": instance_id}
    now = ctx.clock.now()
    planned = _moved(reservation, state, owner, lane_refs, now)
    if state == "consumed":
        # Occupancy first: the launched lane is counted before its hold stops counting.
        before = {h.lane_ref: h.state for h in reservation.lane_holds}
        for hold in planned.lane_holds:
            if hold.state == "consumed" and before.get(hold.lane_ref) == "active":
                await set_occupancy(ctx, workspace=workspace, lane_ref=hold.lane_ref,
                                    profile_id=reservation.capacity_profile_id,
                                    inbox_id=reservation.inbox_id, state="occupied")
    profile_id = reservation.capacity_profile_id

    def settle_holds(current: Versioned | None) -> Any:
        active = _active(current, now)
        kept = [_moved(r, state, owner, lane_refs, now) if r.reservation_id == rid else r
                for r in active]
        kept = [r for r in kept if any(h.state == "active" for h in r.lane_holds)]
        if all(r.reservation_id != rid for r in active):
            return Keep(None)  # expired or settled already: nothing held to give back
        return Put(_holds_record(workspace, profile_id, kept), None)

    await cas_update(ctx.store, holds_path(workspace, profile_id), settle_holds)

    def settle_record(current: Versioned | None) -> Any:
        if current is None:
            raise ReservationRefused(f"reservation {rid} vanished")
        moved = _moved(_convert(current.data, CapacityReservation, path), state, owner,
                       lane_refs, now)
        return Put(_record(moved), moved)

    settled = await cas_update(ctx.store, path, settle_record)
    return {"outcome": state, "reservation": effective(settled, now)}


# ---- reads -----------------------------------------------------------------------


def effective(reservation: CapacityReservation, now: dt.datetime) -> dict[str, Any]:
    """The record as a reader sees it at `now`: active holds past expires_at read as
    expired at exactly expires_at (readers decide from the record, no writer needed)."""
    ledger = Ledger(reservations=[reservation])
    ledger.expire(now)
    return _record(ledger.reservations[reservation.reservation_id])


async def show_reservation(ctx: Ctx, *, workspace: str, reservation_id: str) -> dict[str, Any]:
    rid = _checked(reservation_id, "reservation id")
    found = await _load(ctx.store, reservation_path(workspace, rid), CapacityReservation)
    if found is None:
        raise UsageError(f"no reservation {rid} in workspace {workspace}")
    return {"reservation": effective(found, ctx.clock.now())}


async def show_capacity(ctx: Ctx, *, workspace: str, profile_id: str) -> dict[str, Any]:
    """A profile's used lane refs (occupied/blocked ∪ actively held), remaining slots,
    and its active reservations."""
    profile_id = _checked(profile_id, "capacity profile id")
    profile = await _load(ctx.store, profile_path(workspace, profile_id), CapacityProfile)
    if profile is None:
        raise UsageError(f"no capacity profile {profile_id} in workspace {workspace}")
    now = ctx.clock.now()
    active = _active(await ctx.store.get(holds_path(workspace, profile_id)), now)
    inputs = Inputs(profile=profile, inbox=None,
                    occupancies=await _occupancies(ctx.store, workspace, profile_id))
    ledger = _ledger(workspace, inputs, active)
    return {"workspace": workspace, "profile": _record(profile),
            **usage(ledger, now, profile_id),
            "active_reservations": [r.reservation_id for r in active]}

