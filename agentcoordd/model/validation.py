"""Check a record against a published contract before it is written.

`validate_record(family, data)` decodes `data` with the family's Struct (the
same rules as its JSON Schema under contracts/ or schema/state/v1/) and then
runs the procedural checks a schema cannot express. Each violation names a
JSON path into the record. msgspec stops at the first Struct error, so a
record that fails decoding reports that one violation; procedural checks run
only on a record that decoded.

`agentcoordctl validate --family NAME (FILE|-) [--json]` prints
`validation_payload(...)`: {"family", "valid", "violations": [{"path",
"message"}]}; exit 0 when valid, 1 when not. `validate --list` prints
`families()` (with `describe()` for one-line summaries).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from agentcoordd.model import ids, records
from agentcoordd.model.dependencies import (
    cycle_message,
    dependency_edges,
    find_cycle,
    invalid_dependency_message,
    invalid_dependency_refs,
    lane_name_of,
    unknown_lane_message,
    unknown_own_lanes,
)
from agentcoordd.model.errors import UsageError
from agentcoordd.model.foundation import (
    batch_blocker,
    batch_completion,
    capacity,
    host_limit,
    merge_authority,
    route,
    usage,
)
from agentcoordd.model.foundation.common import Violation
from agentcoordd.model import typed_events
from agentcoordd.model.typed_events import TYPED_EVENTS  # one table and rule, shared with record-event

__all__ = [
    "Violation",
    "contract_error",
    "describe",
    "families",
    "one_line",
    "validate_record",
    "validation_payload",
]

Procedural = Callable[[Any, dict[str, Any]], list[Violation]]



@dataclass(frozen=True)
class Family:
    struct: Any
    summary: str
    procedural: Procedural | None = None


# ---- procedural checks for the record families ------------------------------


def _no_nulls(cls: type[msgspec.Struct]) -> Procedural:
    """Optional fields are omitted when unset; a written null is not the contract."""

    def check(_: Any, data: dict[str, Any]) -> list[Violation]:
        optional = {f.encode_name for f in msgspec.structs.fields(cls) if not f.required}
        return [
            Violation(f"$.{k}", "must be omitted rather than null")
            for k, v in data.items()
            if v is None and k in optional
        ]

    return check


def _event(record: records.Event, data: dict[str, Any]) -> list[Violation]:
    found = _no_nulls(records.Event)(record, data)
    if record.schema_version != records.SCHEMA_VERSION:
        found.append(Violation("$.schema_version", "ordinary events are schema version 1"))
    if record.type == "lane_closed":
        found.append(Violation("$.type", "lane_closed events follow the lane_closed (v2) family"))
    if record.lane is not None:
        found += _lane_name(record.lane, "$.lane", ids.event_lane)
    if record.reply_to:  # an answer names its request by id: it must be one
        found += _lane_name(record.reply_to, "$.reply_to", ids.event_id)
    for kind, name in typed_events.problems(record.type, data):
        if kind == "foreign":
            why = f"{name} is not a field of type {record.type}"
        elif kind == "missing":
            why = f"type {record.type} requires {name}"
        else:
            allowed = TYPED_EVENTS[record.type][name] or ()
            why = (f"invalid {name} {data.get(name)!r} for type {record.type} "
                   f"(allowed: {', '.join(sorted(allowed))})")
        found.append(Violation(f"$.{name}", why))
    return found


def _lane_name(name: str, path: str, rule: Callable[[object], str] = ids.lane_name) -> list[Violation]:
    try:
        rule(name)
    except UsageError as exc:
        return [Violation(path, exc.message)]
    return []


def _batch(record: records.Batch, data: dict[str, Any]) -> list[Violation]:
    found = _no_nulls(records.Batch)(record, data)
    if not record.lanes:
        found.append(Violation("$.lanes", "a batch registers at least one lane"))
    seen: dict[str, int] = {}
    for i, lane in enumerate(record.lanes):
        path = f"$.lanes[{i}]"
        try:
            parsed = msgspec.convert(lane, records.Lane)
        except msgspec.ValidationError as exc:
            found.append(_violation(str(exc), base=path))
            continue
        found += _lane_name(parsed.name, f"{path}.name")
        if parsed.name in seen:
            found.append(
                Violation(f"{path}.name", f"duplicate lane name {parsed.name!r} (first at $.lanes[{seen[parsed.name]}])")
            )
        seen.setdefault(parsed.name, i)
    raw_lanes = data.get("lanes") if isinstance(data.get("lanes"), list) else []
    for i, lane in enumerate(raw_lanes):  # register-batch's rule (model/dependencies.py)
        for ref in invalid_dependency_refs(lane):
            shown = ref if isinstance(ref, str) else msgspec.json.encode(ref).decode()
            found.append(Violation(f"$.lanes[{i}].depends_on", invalid_dependency_message(
                lane_name_of(lane) or str(i + 1), shown, record.batch_id)))
    for name, ref in unknown_own_lanes(record.batch_id, raw_lanes):
        found.append(Violation("$.lanes", unknown_lane_message(name, ref)))
    cycle = find_cycle(dependency_edges(record.batch_id, data.get("lanes")))
    if cycle is not None:
        found.append(Violation("$.lanes", cycle_message(cycle)))
    return found


def _lane_closed(record: records.LaneClosed, data: dict[str, Any]) -> list[Violation]:
    found = _no_nulls(records.LaneClosed)(record, data)
    if not record.event_id.startswith("lane_closed-"):
        found.append(Violation("$.event_id", "a lane_closed event id begins with lane_closed-"))
    if record.lane is not None:
        found += _lane_name(record.lane, "$.lane")
    return found


def _status_wrapper(check: Callable[[Any], list[Violation]]) -> Procedural:
    return lambda record, _data: check(record)


FAMILIES: dict[str, Family] = {
    "claim": Family(records.Claim, "claim v1 (contracts/claim-schema-v1.json)", _no_nulls(records.Claim)),
    "heartbeat": Family(
        records.Heartbeat, "heartbeat v1 (contracts/heartbeat-schema-v1.json)", _no_nulls(records.Heartbeat)
    ),
    "batch": Family(records.Batch, "batch manifest v1 (contracts/batch-schema-v1.json)", _batch),
    "event": Family(records.Event, "ordinary event v1 (contracts/event-schema-v1.json)", _event),
    "lane_closed": Family(
        records.LaneClosed, "lane_closed event v2 (contracts/state-schema-v2.json)", _lane_closed
    ),
    "archive": Family(
        records.ArchiveEnvelope, "archive envelope v1 (contracts/archive-record-schema-v1.json)"
    ),
    "host_limit": Family(host_limit.HostLimit, "host-limit record v1 (schema/state/v1/host-limit.schema.json)"),
    "host_limit_status": Family(
        host_limit.HostLimitStatus,
        "status fragment with host_limits[] (unique logical key)",
        _status_wrapper(host_limit.procedural_status),
    ),
    "capacity_profile": Family(capacity.CapacityProfile, "capacity profile v1"),
    "inbox": Family(capacity.Inbox, "planning inbox v1"),
    "lane_occupancy": Family(capacity.LaneOccupancy, "lane occupancy v1"),
    "capacity_reservation": Family(
        capacity.CapacityReservation,
        "capacity reservation v1 (expiry = created_at + ttl_seconds, unique lane refs)",
        _status_wrapper(capacity.procedural_reservation),
    ),
    "capacity_reservation_set": Family(
        capacity.CapacityReservationSet,
        "active_reservations[] (a lane ref actively held once)",
        _status_wrapper(capacity.procedural_set),
    ),
    "usage": Family(usage.UsageRecord, "usage record v1 (schema/state/v1/usage/)"),
    "usage_status": Family(
        usage.UsageStatus, "status fragment with usage[] (unique logical key)",
        _status_wrapper(usage.procedural_status),
    ),
    "route": Family(route.LaneRouteProjection, "lane route v1 on a claim/heartbeat/lane record"),
    "merge_authority": Family(
        merge_authority.BatchManifestProjection, "batch merge authority v1 on a batch manifest"
    ),
    "batch_completion": Family(batch_completion.BatchCompletion, "batch completion report v1"),
    "batch_blocker": Family(batch_blocker.BatchBlocker, "batch blocker v1"),
}

_AT = re.compile(r"^(?P<message>.*) - at `(?P<path>\$[^`]*)`$", re.DOTALL)
_RULE = re.compile(r"^@(?P<field>[A-Za-z_][A-Za-z0-9_]*): (?P<message>.*)$", re.DOTALL)
_FIELD = re.compile(r"^(?P<message>Object (?:missing required|contains unknown) field `(?P<field>[^`]+)`)$")


def _violation(text: str, base: str = "$") -> Violation:
    """msgspec's "message - at `$.a[0].b`", plus our "@field: message" rule errors."""
    path = "$"
    match = _AT.match(text)
    if match:
        text, path = match["message"], match["path"]
    rule = _RULE.match(text) or _FIELD.match(text)
    if rule:
        text, path = rule["message"], f"{path}.{rule['field']}"
    return Violation(base + path[1:], text)


def families() -> tuple[str, ...]:
    return tuple(FAMILIES)


def describe() -> dict[str, str]:
    return {name: family.summary for name, family in FAMILIES.items()}


def struct_violations(family: str, data: Any) -> tuple[Any, list[Violation]]:
    """Decode with the Struct only: (record or None, violations)."""
    spec = _family(family)
    if not isinstance(data, dict):
        return None, [Violation("$", "expected a JSON object")]
    try:
        return msgspec.convert(data, spec.struct), []
    except msgspec.ValidationError as exc:
        return None, [_violation(str(exc))]


def procedural_violations(family: str, record: Any, data: dict[str, Any]) -> list[Violation]:
    spec = _family(family)
    return spec.procedural(record, data) if spec.procedural else []


def validate_record(family: str, data: Any) -> list[Violation]:
    """Every violation of `family`'s contract found in `data`; empty means valid."""
    record, found = struct_violations(family, data)
    if found:
        return found
    return procedural_violations(family, record, data)


def validation_payload(family: str, data: Any) -> dict[str, Any]:
    found = validate_record(family, data)
    return {
        "family": family,
        "valid": not found,
        "violations": [{"path": v.path, "message": v.message} for v in found],
    }


MAX_MESSAGE = 240


def one_line(violation: Violation) -> str:
    """`$.path: message` on one bounded line (how `validate` prints a violation)."""
    message = " ".join(violation.message.split())
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    path = violation.path if len(violation.path) <= 120 else violation.path[:117] + "..."
    return f"{path}: {message}"


def contract_error(family: str, data: Any, what: str) -> UsageError | None:
    """A write's contract check (record-event, register-batch): the first violation
    as a one-line usage error (exit 1) in `validate`'s words, or None when valid."""
    found = validate_record(family, data)
    if not found:
        return None
    more = f" (+{len(found) - 1} more; see `agentcoordctl validate --family {family}`)" if len(found) > 1 else ""
    return UsageError(f"{what} violates the {family} contract: {one_line(found[0])}{more}")


def _family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise UsageError(
            f"unknown record family: {name} (known: {', '.join(FAMILIES)})"
        ) from None
