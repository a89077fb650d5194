"""Capacity admission: profiles, inboxes, occupancy, and reservations (docs/capacity.md).

    capacity profile ID --max-concurrency N [--disabled]
    capacity inbox ID --profile P [--disabled]
    capacity occupancy LANE_REF --profile P --inbox I --state occupied|blocked|terminal|cancelled
    capacity show --profile P [--json]
    reserve --id R --profile P --inbox I (--batch-id B | --planning-attempt A)
            --owner-id O --instance-id N --lane REF [--lane REF …] [--ttl SECONDS] [--json]
    reservation consume|release ID --owner-id O --instance-id N [--lane REF …]
    reservation show ID [--json]

A refused reservation exits 4 with one line `RESERVATION_REFUSED: …` (or
`RESERVATION_CONFLICT: …` for a reused id with another payload). The daemon
decides (agentcoordd/coord/capacity.py); this module sends and prints.
"""

from __future__ import annotations

from typing import Any

from agentcoordctl import spec
from agentcoordctl.options import BACKEND, JSON, run
from agentcoordctl.spec import REQUIRED, Arg, Opt, Parsed, UsageProblem
from agentcoordd import protocol as p

WORKSPACE = Opt("--workspace", "workspace", default="default", metavar="W",
                help="Tenant/workspace (default: default).")
PROFILE = Opt("--profile", "profile_id", default=REQUIRED, metavar="ID", help="Capacity profile id.")
INBOX = Opt("--inbox", "inbox_id", default=REQUIRED, metavar="ID", help="Inbox id.")
DISABLED = Opt("--disabled", "disabled", "flag", help="Record it disabled (admission refuses it).")
OWNER = Opt("--owner-id", "owner_id", default=REQUIRED, metavar="OWNER",
            help="The planner that owns the hold (with the machine and --instance-id).")
INSTANCE = Opt("--instance-id", "instance_id", default=REQUIRED, metavar="ID",
               help="The planner run (a retry from another instance is a conflict).")
LANES = Opt("--lane", "lane_refs", "many", metavar="BATCH:LANE",
            help="A lane ref (repeatable).")


def some_lane(parsed: Parsed) -> None:
    if not parsed.given.get("--lane"):
        raise UsageProblem("missing required --lane")


def _holds(record: dict[str, Any]) -> str:
    return ", ".join(f"{h.get('lane_ref')} {h.get('state')}" for h in record.get("lane_holds") or [])


def render_reservation(payload: dict[str, Any]) -> str:
    record = payload.get("reservation") or {}
    head = f"{payload.get('outcome') or 'reservation'} {record.get('reservation_id')}"
    tail = ""
    if payload.get("remaining_slots") is not None:
        tail = f"; {payload['remaining_slots']} of {payload.get('max_concurrency')} slots left"
    return (f"{head}: {_holds(record)} (profile {record.get('capacity_profile_id')}, "
            f"expires {record.get('expires_at')}){tail}")


def render_capacity(payload: dict[str, Any]) -> str:
    profile = payload.get("profile") or {}
    used = payload.get("used_lane_refs") or []
    return (f"profile {profile.get('capacity_profile_id')} ({profile.get('status')}): "
            f"{payload.get('used')} of {payload.get('max_concurrency')} used, "
            f"{payload.get('remaining_slots')} left" + (f" - {', '.join(used)}" if used else ""))


def render_record(payload: dict[str, Any]) -> str:
    key = payload.get("capacity_profile_id") if "max_concurrency" in payload else None
    if key is not None:
        return f"profile {key}: {payload.get('status')}, max {payload.get('max_concurrency')}"
    if "inbox_id" in payload and "lane_ref" not in payload:
        return (f"inbox {payload.get('inbox_id')}: {payload.get('status')}, "
                f"profile {payload.get('capacity_profile_id')}")
    return f"lane {payload.get('lane_ref')}: {payload.get('state')}"


def profile(*, profile_id: str, max_concurrency: int, disabled: bool, workspace: str,
            json: bool, selection: p.Selection) -> None:
    run(p.CapacityProfileSet(profile_id=profile_id, max_concurrency=max_concurrency,
                             enabled=not disabled, workspace=workspace, selection=selection),
        as_json=json, text=render_record)


def inbox(*, inbox_id: str, profile_id: str, disabled: bool, workspace: str, json: bool,
          selection: p.Selection) -> None:
    run(p.CapacityInboxSet(inbox_id=inbox_id, profile_id=profile_id, enabled=not disabled,
                           workspace=workspace, selection=selection),
        as_json=json, text=render_record)


def occupancy(*, lane_ref: str, profile_id: str, inbox_id: str, state: str, reason: str | None,
              workspace: str, json: bool, selection: p.Selection) -> None:
    run(p.CapacityOccupancySet(lane_ref=lane_ref, profile_id=profile_id, inbox_id=inbox_id,
                               state=state, reason=reason, workspace=workspace,
                               selection=selection),
        as_json=json, text=render_record)


def show(*, profile_id: str, workspace: str, json: bool, selection: p.Selection) -> None:
    run(p.CapacityShow(profile_id=profile_id, workspace=workspace, selection=selection),
        as_json=json, text=render_capacity)


def reserve(*, reservation_id: str, profile_id: str, inbox_id: str, batch_id: str | None,
            planning_attempt_id: str | None, owner_id: str, instance_id: str,
            lane_refs: list[str] | None, ttl: int | None, workspace: str, json: bool,
            selection: p.Selection) -> None:
    run(p.Reserve(reservation_id=reservation_id, profile_id=profile_id, inbox_id=inbox_id,
                  batch_id=batch_id, planning_attempt_id=planning_attempt_id, owner_id=owner_id,
                  instance_id=instance_id, lane_refs=list(lane_refs or []), ttl_seconds=ttl,
                  workspace=workspace, selection=selection),
        as_json=json, text=render_reservation)


def _settle(state: str) -> Any:
    def settle(*, reservation_id: str, owner_id: str, instance_id: str,
               lane_refs: list[str] | None, workspace: str, json: bool,
               selection: p.Selection) -> None:
        run(p.ReservationSettle(reservation_id=reservation_id, state=state, owner_id=owner_id,
                                instance_id=instance_id, lane_refs=lane_refs or None,
                                workspace=workspace, selection=selection),
            as_json=json, text=render_reservation)
    return settle


def show_reservation(*, reservation_id: str, workspace: str, json: bool,
                     selection: p.Selection) -> None:
    run(p.ReservationShow(reservation_id=reservation_id, workspace=workspace,
                          selection=selection),
        as_json=json, text=render_reservation)


RESERVATION_ID = Arg("reservation_id", "ID", "The reservation id.")
COMMANDS = (
    spec.Command(("capacity", "profile"), "Set a capacity profile: how many lanes may run at once.",
                 (Arg("profile_id", "ID", "Capacity profile id (lowercase, digits, . _ -)."),
                  Opt("--max-concurrency", "max_concurrency", "int", default=REQUIRED, minimum=1,
                      maximum=1000, metavar="N", help="Lane slots of the profile (1-1000)."),
                  DISABLED, WORKSPACE, JSON, BACKEND), profile),
    spec.Command(("capacity", "inbox"), "Set a planning inbox bound to a capacity profile.",
                 (Arg("inbox_id", "ID", "Inbox id."), PROFILE, DISABLED, WORKSPACE, JSON, BACKEND),
                 inbox),
    spec.Command(("capacity", "occupancy"), "Record a lane's occupancy: occupied and blocked "
                 "lanes count against the profile, terminal and cancelled ones do not.",
                 (Arg("lane_ref", "BATCH:LANE", "The lane ref."), PROFILE, INBOX,
                  Opt("--state", "state", default=REQUIRED, metavar="STATE",
                      help="occupied | blocked | terminal | cancelled."),
                  Opt("--reason", "reason", metavar="TEXT", help="Why the lane is blocked."),
                  WORKSPACE, JSON, BACKEND), occupancy),
    spec.Command(("capacity", "show"), "A profile's used lane refs and remaining slots.",
                 (PROFILE, WORKSPACE, JSON, BACKEND), show),
    spec.Command(("reserve",), "Hold lane slots for a planner, all or nothing; refused: exit 4.",
                 (Opt("--id", "reservation_id", default=REQUIRED, metavar="ID",
                      help="Reservation id (a retry with the same payload is idempotent)."),
                  PROFILE, INBOX,
                  Opt("--batch-id", "batch_id", metavar="ID",
                      help="Scope: the batch every --lane belongs to."),
                  Opt("--planning-attempt", "planning_attempt_id", metavar="ID",
                      help="Scope: a planning attempt (instead of --batch-id)."),
                  OWNER, INSTANCE, LANES,
                  Opt("--ttl", "ttl", "int", metavar="SECONDS",
                      help="Seconds the hold lasts (60-3600, default 900)."),
                  WORKSPACE, JSON, BACKEND), reserve, checks=(some_lane,)),
    spec.Command(("reservation", "consume"), "The held lanes launched: the holds become "
                 "consumed and the lanes occupied.",
                 (RESERVATION_ID, OWNER, INSTANCE, LANES, WORKSPACE, JSON, BACKEND),
                 _settle("consumed")),
    spec.Command(("reservation", "release"), "Give held slots back without launching.",
                 (RESERVATION_ID, OWNER, INSTANCE, LANES, WORKSPACE, JSON, BACKEND),
                 _settle("released")),
    spec.Command(("reservation", "show"), "A reservation as it stands now (expired holds "
                 "read as expired).", (RESERVATION_ID, WORKSPACE, JSON, BACKEND), show_reservation),
)
