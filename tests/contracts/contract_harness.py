"""Shared by the contract tests: fixture -> family, JSON Schema checks, replays."""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import msgspec

from agentcoordd.model import validation as validate
from agentcoordd.model import contracts, records
from agentcoordd.model.foundation import (
    batch_blocker,
    batch_completion,
    capacity,
    host_limit,
    merge_authority,
    route,
    usage,
)
from agentcoordd.model.timefmt import parse_ts

REPO = Path(__file__).resolve().parents[2]
VERDICTS = ("valid", "invalid", "procedural", "replay")

# family -> (family of the schema file that defines it, $defs entry or None for the root)
_SCHEMA_OF = {
    "host_limit_status": ("host_limit", "HostLimitStatus"),
    "capacity_reservation_set": ("capacity_reservation", "CapacityReservationSet"),
    "usage_status": ("usage", "UsageStatus"),
}
_DIR_FAMILY = {
    "fixtures": "host_limit",
    "usage": "usage",
    "route": "route",
    "merge-authority": "merge_authority",
    "batch-completion": "batch_completion",
    "batch-blocker": "batch_blocker",
}
_CAPACITY_PREFIXES = (
    ("capacity-profile", "capacity_profile"),
    ("inbox", "inbox"),
    ("lane-occupancy", "lane_occupancy"),
    ("reservations-", "capacity_reservation_set"),
    ("capacity-reservation", "capacity_reservation"),
    ("reservation-", "capacity_reservation"),
)


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def verdict_of(path: Path) -> str:
    """The folder verdict; contracts/fixtures/vN/ (no verdict folder) holds valid records."""
    return next((p for p in reversed(path.parts) if p in VERDICTS), "valid")


def contract_dir(path: Path) -> str:
    """The contract directory under schema/state/v1/ a fixture belongs to."""
    parts = path.parts
    i = max(j for j, p in enumerate(parts) if p == "v1")
    return parts[i + 1]


def target_of(path: Path, data: Any) -> tuple[str, Any]:
    """(family, the object to validate) for a valid/invalid/procedural fixture."""
    if "contracts" in path.parts and "schema" not in path.parts:
        if isinstance(data, dict) and data.get("type") == "lane_closed" or path.parent.name == "v2":
            return "lane_closed", data
        if isinstance(data, dict) and "record_family" in data:
            return "archive", data
        return path.name.split("--")[0], data
    where = contract_dir(path)
    if where == "capacity-reservation":
        family = next(f for prefix, f in _CAPACITY_PREFIXES if path.name.startswith(prefix))
        return family, data
    family = _DIR_FAMILY[where]
    if family == "host_limit" and "host_limits" in data:
        return "host_limit_status", data
    if family == "usage" and "status" in data:
        return "usage_status", data["status"]
    return family, data


@cache
def _validator(family: str) -> jsonschema.Draft202012Validator:
    file_family, def_name = _SCHEMA_OF.get(family, (family, None))
    contract = contracts.by_family()[file_family]
    doc = json.loads((REPO / contract.tree / contract.path).read_text(encoding="utf-8"))
    if def_name is not None:
        for key in ("$ref", "anyOf", "discriminator"):
            doc.pop(key, None)
        doc["$ref"] = f"#/$defs/{def_name}"
    cls = jsonschema.Draft202012Validator
    cls.check_schema(doc)
    return cls(doc, format_checker=cls.FORMAT_CHECKER)


def schema_errors(family: str, data: Any) -> list[str]:
    return [
        f"{e.json_path}: {e.message}" for e in _validator(family).iter_errors(data)
    ]


# ---- replays ----------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Deep equality with float tolerance (cost sums)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def _ts(value: str):
    parsed = parse_ts(value)
    assert parsed is not None, value
    return parsed


def _must(family: str, data: Any) -> Any:
    found = validate.validate_record(family, data)
    assert not found, f"{family}: {found}"
    return msgspec.convert(data, validate.FAMILIES[family].struct)


def _expect(problems: list[str], label: str, got: Any, want: Any) -> None:
    if not same(got, want):
        problems.append(f"{label}: got {got!r}, want {want!r}")


def replay(path: Path, data: dict[str, Any]) -> list[str]:
    """Run one replay fixture through our model; the mismatches (empty = passes)."""
    problems: list[str] = []
    where = contract_dir(path)
    if where == "fixtures":  # host-limit
        status = data["status"]
        for family, key in (("claim", "claims"), ("heartbeat", "heartbeats"),
                            ("batch", "batches"), ("event", "events")):
            for item in status.get(key, []):
                _must(family, item)
        projection = _must("host_limit_status", {"host_limits": status.get("host_limits", [])})
        as_of = _ts(data["as_of"])
        effective = [r for r in projection.host_limits if host_limit.is_effective(r, as_of)]
        want = data["expected"]
        _expect(problems, "effective_record_count", len(effective), want["effective_record_count"])
        got = host_limit.lane_statuses(data["lanes"], list(projection.host_limits), as_of)
        _expect(problems, "lane_statuses", got, want["lane_statuses"])
    elif where == "capacity-reservation":
        problems += _capacity_replay(data)
    elif where == "usage":
        records_ = _must("usage_status", data["status"]).usage
        _expect(problems, "aggregate", usage.aggregate(usage.supersede(list(records_))), data["expected"])
    elif where == "route":
        chips = {lane["lane"]: route.chip(_must("route", lane)) for lane in data["lanes"]}
        _expect(problems, "chips", chips, data["expected"]["chips"])
    elif where == "merge-authority":
        drawer = {
            b["batch_id"]: merge_authority.drawer_value(_must("merge_authority", b))
            for b in data["batches"]
        }
        _expect(problems, "drawer", drawer, data["expected"]["drawer"])
    elif where == "batch-completion":
        got = batch_completion.drawer(_must("batch_completion", data["record"]))
        _expect(problems, "drawer", got, data["expected"])
    elif where == "batch-blocker":
        for i, item in enumerate(data["records"]):
            got = batch_blocker.panel(_must("batch_blocker", item["record"]))
            _expect(problems, f"panel[{i}]", got, item["expected_panel"])
    else:
        problems.append(f"no replay runner for {where}")
    return problems


def _request_for(lane_refs: list[str], reservation_id: str) -> dict[str, Any]:
    return {
        "reservation_id": reservation_id,
        "batch_id": capacity.lane_batch(lane_refs[0]),
        "lane_refs": list(lane_refs),
    }


def _outcome(call) -> str:
    try:
        return call()
    except capacity.Refused as refused:
        return refused.outcome


def _capacity_replay(data: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    want = data.get("expected")
    if "scenarios" in data:  # all-or-nothing fit from a fresh state per scenario
        now = _ts("2026-01-01T00:00:00Z")
        for scenario in data["scenarios"]:
            ledger = capacity.Ledger(
                max_concurrency=data["max_concurrency"],
                occupied_lane_refs=data.get("occupied_lane_refs", []),
            )
            name = scenario["name"]
            outcome = _outcome(
                lambda: ledger.reserve(_request_for(scenario["requested_lane_refs"], "replay"), now)
            )
            _expect(problems, f"{name}.outcome", outcome, want[name]["outcome"])
            _expect(problems, f"{name}.used", sorted(ledger.used(now)),
                    sorted(want[name]["used_lane_refs_after"]))
    elif "orderings" in data:  # release racing a new reserve
        existing = _must("capacity_reservation", data["existing_reservation"])
        owner = {f: getattr(existing, f) for f in ("owner_machine", "owner_id", "instance_id")}
        at = _ts(data["release_at"])
        for ordering in data["orderings"]:
            ledger = capacity.Ledger(max_concurrency=data["max_concurrency"], reservations=[existing])
            outcomes = []
            for op in ordering["operations"]:
                if op == "reserve":
                    request = _request_for([data["requested_lane_ref"]], "replay-new")
                    outcomes.append(_outcome(lambda: ledger.reserve(request, at)))
                else:
                    ledger.release(existing.reservation_id, at, owner=owner)
                    outcomes.append("released")
            name = ordering["name"]
            _expect(problems, f"{name}.outcomes", outcomes, want[name]["outcomes"])
            state = ledger.reservations[existing.reservation_id].lane_holds[0].state
            _expect(problems, f"{name}.existing_lane_state", state, want[name]["existing_lane_state"])
    elif "expected_after_release" in data:  # owner tuple, partial consume/release, expiry
        base = _must("capacity_reservation", data["reservation"])
        for occ in data.get("lane_occupancies", []):
            _must("lane_occupancy", occ)
        owner = {f: getattr(base, f) for f in ("owner_machine", "owner_id", "instance_id")}

        def fresh() -> capacity.Ledger:
            return capacity.Ledger(reservations=[base])

        ledger = fresh()
        wrong = _outcome(lambda: ledger.release(base.reservation_id, _ts(data["release_at"]),
                                                owner=data["wrong_owner"]) and "released")
        _expect(problems, "wrong owner", wrong, capacity.RESERVATION_REFUSED)
        _expect(problems, "after wrong owner", ledger.reservations[base.reservation_id], base)
        for op, key, want_key in (("release", "release_at", "expected_after_release"),
                                  ("consume", "consume_at", "expected_after_consume")):
            ledger = fresh()
            getattr(ledger, op)(base.reservation_id, _ts(data[key]), owner=owner)
            got = msgspec.to_builtins(ledger.reservations[base.reservation_id])
            _expect(problems, want_key, got, data[want_key])
        ledger = fresh()
        ledger.expire(_ts(data["before_expiry"]))
        _expect(problems, "before_expiry", ledger.reservations[base.reservation_id], base)
        ledger.expire(_ts(data["at_expiry"]))
        got = msgspec.to_builtins(ledger.reservations[base.reservation_id])
        _expect(problems, "expected_after_expiry", got, data["expected_after_expiry"])
    elif "reservation" in data:  # TTL boundary
        r = _must("capacity_reservation", data["reservation"])
        ledger = capacity.Ledger(max_concurrency=data["max_concurrency"], reservations=[r])
        for name, at in data["as_of"].items():
            now = _ts(at)
            _expect(problems, f"{name}.used", sorted(ledger.used(now)), sorted(want[name]["used_lane_refs"]))
            _expect(problems, f"{name}.remaining", ledger.remaining(now), want[name]["remaining_slots"])
    elif "requests" in data:  # planners contending for the final slot
        ledger = capacity.Ledger(
            profiles=[_must("capacity_profile", data["capacity_profile"])],
            inboxes=[_must("inbox", i) for i in data["inboxes"]],
            occupancies=[_must("lane_occupancy", o) for o in data["lane_occupancies"]],
            reservations=[_must("capacity_reservation", r) for r in data["active_reservations"]],
        )
        now = _ts(data["as_of"])
        outcomes = {r["attempt"]: _outcome(lambda r=r: ledger.reserve(r, now)) for r in data["requests"]}
        _expect(problems, "outcomes", outcomes, want["outcomes"])
        _expect(problems, "used", sorted(ledger.used(now)), sorted(want["effective_used_lane_refs"]))
        profile = data["capacity_profile"]["capacity_profile_id"]
        _expect(problems, "remaining", ledger.remaining(now, profile), want["remaining_slots"])
    else:
        problems.append("unrecognised capacity replay shape")
    return problems


def procedural_expectations(family: str, data: dict[str, Any], wrapper: dict[str, Any]) -> list[str]:
    """A procedural fixture may also pin what a consumer does after resolving it."""
    problems: list[str] = []
    if family == "usage_status" and "expected_after_supersede" in wrapper:
        records_ = msgspec.convert(data, usage.UsageStatus).usage
        _expect(problems, "after supersede", usage.aggregate(usage.supersede(list(records_))),
                wrapper["expected_after_supersede"])
    return problems


__all__ = ["records"]
