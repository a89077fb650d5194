"""Capacity reservation contracts (schema/state/v1/capacity-reservation/).

Four protocol-plane inputs: capacity profiles, inboxes bound to a profile,
persisted lane occupancy, and short-lived per-lane reservation holds. Used
capacity is the unique union of occupied/blocked lane refs and active held
lane refs, so a reservation that became a launched lane counts once.

`Ledger` is a pure, in-memory model of the reservation rules the replay
fixtures pin down; it is not a runtime store (the CLI/Worker do not persist
these records yet). Where the spec leaves an outcome unstated the Ledger
follows the published replay fixtures; each such rule says so below.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, ClassVar, Literal

import msgspec
from msgspec import UNSET, UnsetType

from agentcoordd.model.foundation.common import (
    CanonicalId,
    Closed,
    Timestamp,
    Violation,
    Workspace,
    duplicate_keys,
    rule,
    timestamp,
)
from agentcoordd.model.timefmt import format_ts

RESERVATION_REFUSED = "RESERVATION_REFUSED"  # CLI exit code 4 (not CLAIM_REFUSED's 3)
RESERVATION_REFUSED_EXIT = 4
RESERVATION_CONFLICT = "RESERVATION_CONFLICT"
ACCEPTED = "accepted"
IDEMPOTENT = "idempotent"
DEFAULT_TTL_SECONDS = 900
MIN_TTL_SECONDS = 60
MAX_TTL_SECONDS = 3600
OCCUPYING_STATES = ("occupied", "blocked")

LaneRef = Annotated[
    str,
    msgspec.Meta(
        min_length=3,
        max_length=256,
        pattern=r"^[A-Za-z0-9_.:-]+:[A-Za-z0-9_.-]+$",
        extra_json_schema={
            "description": "Stable <batch-id>:<lane-name> reference, split at the last colon."
        },
    ),
]
BatchId = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=254,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        extra_json_schema={
            "description": "Leaves room for the colon and a non-empty lane name within "
            "lane_ref's 256 characters."
        },
    ),
]
Owner = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
TtlSeconds = Annotated[
    int,
    msgspec.Meta(ge=MIN_TTL_SECONDS, le=MAX_TTL_SECONDS, extra_json_schema={"default": 900}),
]


def _exactly_when(field: str, state_field: str, states: list[str]) -> dict[str, Any]:
    cond = {"const": states[0]} if len(states) == 1 else {"enum": states}
    return {
        "if": {"properties": {state_field: cond}},
        "then": {"required": [field]},
        "else": {"not": {"required": [field]}},
    }


def _check_exactly_when(obj: Any, field: str, state: str, states: tuple[str, ...]) -> None:
    present = getattr(obj, field) is not UNSET
    current = getattr(obj, state)
    if current in states and not present:
        raise rule(field, f"required when {state} is {current}")
    if current not in states and present:
        raise rule(field, f"not permitted when {state} is {current}")


class CapacityProfile(Closed, kw_only=True):
    """Authoritative numeric concurrency capacity for one profile, keyed by
    (workspace, capacity_profile_id)."""

    schema_version: Literal[1]
    workspace: Workspace
    capacity_profile_id: CanonicalId
    status: Literal["enabled", "disabled"]
    max_concurrency: Annotated[int, msgspec.Meta(ge=1, le=1000)]
    updated_at: Timestamp


class Inbox(Closed, kw_only=True):
    """An enabled or disabled planning inbox bound to one capacity profile, keyed by
    (workspace, inbox_id)."""

    schema_version: Literal[1]
    workspace: Workspace
    inbox_id: CanonicalId
    capacity_profile_id: CanonicalId
    status: Literal["enabled", "disabled"]
    updated_at: Timestamp


class LaneOccupancy(Closed, kw_only=True):
    """Persisted occupancy of a batch lane, keyed by (workspace, lane_ref).

    occupied and blocked count against capacity (a blocked lane counts even
    without a live heartbeat). blocked_reason exactly when blocked; terminal_at
    exactly when terminal or cancelled.
    """

    __schema_extra__: ClassVar[dict[str, Any]] = {
        "allOf": [
            _exactly_when("blocked_reason", "state", ["blocked"]),
            _exactly_when("terminal_at", "state", ["terminal", "cancelled"]),
        ]
    }

    schema_version: Literal[1]
    workspace: Workspace
    lane_ref: LaneRef
    capacity_profile_id: CanonicalId
    inbox_id: CanonicalId
    state: Literal["occupied", "blocked", "terminal", "cancelled"]
    blocked_reason: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | UnsetType = UNSET
    updated_at: Timestamp
    terminal_at: Timestamp | UnsetType = UNSET

    def __post_init__(self) -> None:
        _check_exactly_when(self, "blocked_reason", "state", ("blocked",))
        _check_exactly_when(self, "terminal_at", "state", ("terminal", "cancelled"))


class LaneHold(Closed, kw_only=True):
    """One lane's hold; moves monotonically active -> consumed | released | expired,
    carrying the matching *_at timestamp exactly in that state."""

    __schema_extra__: ClassVar[dict[str, Any]] = {
        "allOf": [
            _exactly_when("consumed_at", "state", ["consumed"]),
            _exactly_when("released_at", "state", ["released"]),
            _exactly_when("expired_at", "state", ["expired"]),
        ]
    }

    lane_ref: LaneRef
    state: Literal["active", "consumed", "released", "expired"]
    consumed_at: Timestamp | UnsetType = UNSET
    released_at: Timestamp | UnsetType = UNSET
    expired_at: Timestamp | UnsetType = UNSET

    def __post_init__(self) -> None:
        for state in ("consumed", "released", "expired"):
            _check_exactly_when(self, f"{state}_at", "state", (state,))


class CapacityReservation(Closed, kw_only=True):
    """A short-lived all-or-nothing hold on batch lane refs, keyed by
    (workspace, reservation_id).

    Exactly one of batch_id / planning_attempt_id scopes the attempt. Procedural
    (not in the schema): expires_at == created_at + ttl_seconds exactly, lane
    refs unique within lane_holds, and with batch_id every lane_ref belongs to
    that batch.
    """

    __schema_extra__: ClassVar[dict[str, Any]] = {
        "oneOf": [
            {"required": ["batch_id"], "not": {"required": ["planning_attempt_id"]}},
            {"required": ["planning_attempt_id"], "not": {"required": ["batch_id"]}},
        ],
        "properties": {"lane_holds": {"uniqueItems": True}},
        "x-logical-key": ["workspace", "reservation_id"],
        "x-lane-hold-unique-key": ["lane_ref"],
        "x-expires-at-invariant": "expires_at == created_at + ttl_seconds (server time)",
    }

    schema_version: Literal[1]
    workspace: Workspace
    reservation_id: CanonicalId
    capacity_profile_id: CanonicalId
    inbox_id: CanonicalId
    batch_id: BatchId | UnsetType = UNSET
    planning_attempt_id: Owner | UnsetType = UNSET
    owner_machine: Owner
    owner_id: Owner
    instance_id: Owner
    created_at: Timestamp
    expires_at: Timestamp
    ttl_seconds: TtlSeconds
    lane_holds: Annotated[list[LaneHold], msgspec.Meta(min_length=1, max_length=1000)]

    def __post_init__(self) -> None:
        if (self.batch_id is UNSET) == (self.planning_attempt_id is UNSET):
            raise rule("batch_id", "exactly one of batch_id and planning_attempt_id is required")
        holds = [msgspec.structs.astuple(h) for h in self.lane_holds]
        if len(set(holds)) != len(holds):
            raise rule("lane_holds", "items must be unique")


class CapacityReservationSet(Closed, kw_only=True):
    """The active reservations a planner sees at once (a procedural-check input).

    A lane ref may be actively held by at most one reservation; reservation ids
    are unique per workspace.
    """

    active_reservations: list[CapacityReservation]


def lane_batch(lane_ref: str) -> str:
    return lane_ref.rsplit(":", 1)[0]


def expected_expiry(created_at: str, ttl_seconds: int) -> str:
    return format_ts(timestamp(created_at) + dt.timedelta(seconds=ttl_seconds))


def procedural_reservation(r: CapacityReservation, path: str = "$") -> list[Violation]:
    found = duplicate_keys(
        r.lane_holds, lambda h: (h.lane_ref,), f"{path}.lane_holds", ("lane_ref",)
    )
    if timestamp(r.expires_at) != timestamp(r.created_at) + dt.timedelta(seconds=r.ttl_seconds):
        found.append(
            Violation(
                f"{path}.expires_at",
                f"expires_at must be created_at + ttl_seconds "
                f"({expected_expiry(r.created_at, r.ttl_seconds)}), got {r.expires_at}",
            )
        )
    if r.batch_id is not UNSET:
        for i, hold in enumerate(r.lane_holds):
            if lane_batch(hold.lane_ref) != r.batch_id:
                found.append(
                    Violation(
                        f"{path}.lane_holds[{i}].lane_ref",
                        f"lane_ref {hold.lane_ref} is not in batch {r.batch_id}",
                    )
                )
    return found


def procedural_set(s: CapacityReservationSet) -> list[Violation]:
    found: list[Violation] = []
    for i, r in enumerate(s.active_reservations):
        found += procedural_reservation(r, f"$.active_reservations[{i}]")
    found += duplicate_keys(
        s.active_reservations,
        lambda r: (r.workspace, r.reservation_id),
        "$.active_reservations",
        ("workspace", "reservation_id"),
    )
    holder: dict[tuple[str, str], int] = {}
    for i, r in enumerate(s.active_reservations):
        for j, hold in enumerate(r.lane_holds):
            if hold.state != "active":
                continue
            key = (r.workspace, hold.lane_ref)
            if key in holder and holder[key] != i:
                found.append(
                    Violation(
                        f"$.active_reservations[{i}].lane_holds[{j}].lane_ref",
                        f"lane_ref {hold.lane_ref} is already actively held by "
                        f"$.active_reservations[{holder[key]}]",
                    )
                )
            holder.setdefault(key, i)
    return found


# ---- the reservation rules as a pure model (replay) -------------------------


class Refused(Exception):
    """A refused or conflicting reservation operation: `outcome` names which."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


class Ledger:
    """Profiles, inboxes, occupancy and reservations of one workspace, on server time.

    With no profile registered the Ledger runs capacity-only (max_concurrency
    given directly), as the exact-fit and TTL-boundary replays do.
    """

    def __init__(
        self,
        *,
        workspace: str = "default",
        max_concurrency: int | None = None,
        profiles: list[CapacityProfile] = (),  # type: ignore[assignment]
        inboxes: list[Inbox] = (),  # type: ignore[assignment]
        occupancies: list[LaneOccupancy] = (),  # type: ignore[assignment]
        occupied_lane_refs: list[str] = (),  # type: ignore[assignment]
        reservations: list[CapacityReservation] = (),  # type: ignore[assignment]
    ) -> None:
        self.workspace = workspace
        self.max_concurrency = max_concurrency
        self.profiles = {p.capacity_profile_id: p for p in profiles}
        self.inboxes = {i.inbox_id: i for i in inboxes}
        self.occupied = {o.lane_ref for o in occupancies if o.state in OCCUPYING_STATES}
        self.occupied |= set(occupied_lane_refs)
        self.reservations = {r.reservation_id: r for r in reservations}

    # -- capacity --

    def capacity(self, profile_id: str | None = None) -> int:
        if profile_id is not None and profile_id in self.profiles:
            return self.profiles[profile_id].max_concurrency
        if self.max_concurrency is None:
            raise Refused(RESERVATION_REFUSED, f"capacity profile {profile_id} is missing")
        return self.max_concurrency

    def held(self, now: dt.datetime) -> set[str]:
        """Lane refs held by an active, unexpired hold (expiry is exclusive at expires_at)."""
        return {
            h.lane_ref
            for r in self.reservations.values()
            if now < timestamp(r.expires_at)
            for h in r.lane_holds
            if h.state == "active"
        }

    def used(self, now: dt.datetime) -> set[str]:
        return self.occupied | self.held(now)

    def remaining(self, now: dt.datetime, profile_id: str | None = None) -> int:
        return max(0, self.capacity(profile_id) - len(self.used(now)))

    # -- operations --

    def reserve(self, request: dict[str, Any], now: dt.datetime) -> str:
        """accepted | idempotent; raises Refused(RESERVATION_REFUSED | RESERVATION_CONFLICT).

        Validation comes first (a malformed request is refused, not a conflict);
        then an existing reservation id is an idempotent retry only when the
        whole payload (owner tuple, scope, inbox/profile, lane refs, ttl with
        the 900 s default) is equal — fixture-pinned, the spec only says
        "idempotent retry" and "payload conflict".
        """
        ttl = request.get("ttl_seconds", DEFAULT_TTL_SECONDS)
        lane_refs = list(request.get("lane_refs") or [])
        self._check_request(request, ttl, lane_refs)
        existing = self.reservations.get(request["reservation_id"])
        if existing is not None:
            if self._same_payload(existing, request, ttl, lane_refs):
                return IDEMPOTENT
            raise Refused(RESERVATION_CONFLICT, "reservation id exists with a different payload")
        used = self.used(now)
        taken = self.held(now) & set(lane_refs)
        if taken:
            raise Refused(RESERVATION_REFUSED, f"lane already reserved: {sorted(taken)[0]}")
        if len(used | set(lane_refs)) > self.capacity(request.get("capacity_profile_id")):
            raise Refused(RESERVATION_REFUSED, "not enough capacity (all-or-nothing)")
        created = format_ts(now)
        fields: dict[str, Any] = {
            "schema_version": 1,
            "workspace": request.get("workspace", self.workspace),
            "reservation_id": request["reservation_id"],
            "capacity_profile_id": request.get("capacity_profile_id", "capacity"),
            "inbox_id": request.get("inbox_id", "inbox"),
            "owner_machine": request.get("owner_machine", "replay"),
            "owner_id": request.get("owner_id", "replay"),
            "instance_id": request.get("instance_id", "replay"),
            "created_at": created,
            "expires_at": expected_expiry(created, ttl),
            "ttl_seconds": ttl,
            "lane_holds": [{"lane_ref": ref, "state": "active"} for ref in lane_refs],
        }
        for scope in ("batch_id", "planning_attempt_id"):
            if scope in request:
                fields[scope] = request[scope]
        self.reservations[fields["reservation_id"]] = msgspec.convert(fields, CapacityReservation)
        return ACCEPTED

    def _check_request(self, request: dict[str, Any], ttl: Any, lane_refs: list[str]) -> None:
        def refuse(reason: str) -> Refused:
            return Refused(RESERVATION_REFUSED, reason)

        if request.get("workspace", self.workspace) != self.workspace:
            raise refuse("cross-workspace request")
        if not isinstance(ttl, int) or not MIN_TTL_SECONDS <= ttl <= MAX_TTL_SECONDS:
            raise refuse(f"ttl_seconds must be {MIN_TTL_SECONDS}..{MAX_TTL_SECONDS}")
        if ("batch_id" in request) == ("planning_attempt_id" in request):
            raise refuse("exactly one of batch_id and planning_attempt_id is required")
        if not lane_refs or len(set(lane_refs)) != len(lane_refs):
            raise refuse("lane_refs must be a non-empty list of unique refs")
        batch = request.get("batch_id")
        if batch is not None and any(lane_batch(ref) != batch for ref in lane_refs):
            raise refuse(f"lane ref outside batch {batch}")
        if self.profiles or self.inboxes:  # full mode: every input must be present and match
            profile = self.profiles.get(request.get("capacity_profile_id", ""))
            if profile is None or profile.status != "enabled":
                raise refuse("capacity profile missing or disabled")
            inbox = self.inboxes.get(request.get("inbox_id", ""))
            if inbox is None or inbox.status != "enabled":
                raise refuse("inbox missing or disabled")
            if inbox.capacity_profile_id != profile.capacity_profile_id:
                raise refuse("inbox is bound to a different capacity profile")

    @staticmethod
    def _same_payload(
        existing: CapacityReservation, request: dict[str, Any], ttl: int, lane_refs: list[str]
    ) -> bool:
        def scope(name: str) -> Any:
            value = getattr(existing, name)
            return None if value is UNSET else value

        return (
            all(
                request.get(f) == getattr(existing, f)
                for f in (
                    "capacity_profile_id",
                    "inbox_id",
                    "owner_machine",
                    "owner_id",
                    "instance_id",
                )
            )
            and request.get("batch_id") == scope("batch_id")
            and request.get("planning_attempt_id") == scope("planning_attempt_id")
            and ttl == existing.ttl_seconds
            and sorted(lane_refs) == sorted(h.lane_ref for h in existing.lane_holds)
        )

    def _transition(
        self,
        reservation_id: str,
        owner: dict[str, str] | None,
        now: dt.datetime,
        state: Literal["consumed", "released"],
        lane_refs: list[str] | None,
    ) -> CapacityReservation:
        r = self.reservations.get(reservation_id)
        if r is None:
            raise Refused(RESERVATION_REFUSED, f"no reservation {reservation_id}")
        if owner is not None and any(
            owner.get(f) != getattr(r, f) for f in ("owner_machine", "owner_id", "instance_id")
        ):
            raise Refused(RESERVATION_REFUSED, "owner tuple does not match the reservation")
        self.expire(now)
        r = self.reservations[reservation_id]
        holds = []
        for hold in r.lane_holds:
            if hold.state == "active" and (lane_refs is None or hold.lane_ref in lane_refs):
                hold = LaneHold(lane_ref=hold.lane_ref, state=state, **{f"{state}_at": format_ts(now)})
            holds.append(hold)
        if state == "consumed" and not any(
            h.state == "active" for h in r.lane_holds if lane_refs is None or h.lane_ref in lane_refs
        ):
            raise Refused(RESERVATION_REFUSED, "no active hold to consume (terminal holds never revive)")
        updated = msgspec.structs.replace(r, lane_holds=holds)
        self.reservations[reservation_id] = updated
        return updated

    def consume(self, reservation_id: str, now: dt.datetime, *, owner: dict[str, str] | None = None,
                lane_refs: list[str] | None = None) -> CapacityReservation:
        return self._transition(reservation_id, owner, now, "consumed", lane_refs)

    def release(self, reservation_id: str, now: dt.datetime, *, owner: dict[str, str] | None = None,
                lane_refs: list[str] | None = None) -> CapacityReservation:
        return self._transition(reservation_id, owner, now, "released", lane_refs)

    def expire(self, now: dt.datetime) -> None:
        """Active holds at or past expires_at become expired at exactly expires_at."""
        for rid, r in list(self.reservations.items()):
            if now < timestamp(r.expires_at):
                continue
            holds = [
                LaneHold(lane_ref=h.lane_ref, state="expired", expired_at=r.expires_at)
                if h.state == "active"
                else h
                for h in r.lane_holds
            ]
            self.reservations[rid] = msgspec.structs.replace(r, lane_holds=holds)
