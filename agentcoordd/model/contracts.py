"""The published JSON Schemas, generated from the msgspec Structs.

`contracts/` holds the record families agentcoord writes (claim, heartbeat,
batch, ordinary event v1, lane_closed v2, archive envelope v1);
`schema/state/v1/` holds the seven schema-only foundation contracts. Both are
`msgspec.json.schema_components` output for the Structs plus the constraints
they carry (Meta bounds/patterns, closed objects, the conditional rules each
Struct declares in `__schema_extra__` and enforces in `__post_init__`), with
$id/title/x-contract-version/x-record-family metadata added here. Nothing is
maintained by hand twice: tests/contracts/test_contracts_current.py fails when
a committed file differs from what this module generates.

    python -m agentcoordd.model.contracts --write contracts/ --write schema/state/v1/
    python -m agentcoordd.model.contracts --check .
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from agentcoordd.model import records, typed_events
from agentcoordd.model.foundation import (
    batch_blocker,
    batch_completion,
    capacity,
    host_limit,
    merge_authority,
    route,
    usage,
)

DRAFT = "https://json-schema.org/draft/2020-12/schema"
ID_BASE = "urn:agentcoord:"
CONTRACTS = "contracts"
FOUNDATION = "schema/state/v1"
_STRUCT_MODULES = (
    records,
    batch_blocker,
    batch_completion,
    capacity,
    host_limit,
    merge_authority,
    route,
    usage,
)
_STORAGE_ENCODING = (
    "UTF-8 bytes; leave ASCII alphanumeric, underscore and hyphen literal; percent-encode "
    "every other byte with uppercase hexadecimal, so no segment can form a . or .. component. "
    "Not wired to the CLI or daemon yet."
)


@dataclass(frozen=True)
class Contract:
    tree: str  # CONTRACTS or FOUNDATION
    path: str  # relative to the tree
    family: str
    version: int
    title: str
    description: str
    root: Any  # a Struct type or a union of Structs
    extra_defs: tuple[type, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    record_family: bool = False  # open record: None-valued optionals are omitted, not null


def _storage(template: str) -> dict[str, str]:
    return {"template": template, "segment_encoding": _STORAGE_ENCODING}


REGISTRY: tuple[Contract, ...] = (
    Contract(
        CONTRACTS, "claim-schema-v1.json", "claim", 1, "agentcoord claim record v1",
        "claims/<owner>/<repo>/<target>.json. Unknown fields are allowed and preserved by "
        "rewriters; optional fields are omitted when unset, never written as null.",
        records.Claim, record_family=True,
    ),
    Contract(
        CONTRACTS, "heartbeat-schema-v1.json", "heartbeat", 1, "agentcoord heartbeat record v1",
        "heartbeats/<agent-id>.json. status uses the heartbeat status vocabulary (normalized "
        "at write time; an unrecognized value is kept verbatim with a status_raw copy).",
        records.Heartbeat, record_family=True,
    ),
    Contract(
        CONTRACTS, "batch-schema-v1.json", "batch", 1, "agentcoord batch manifest v1",
        "batches/<batch-id>.json. Lanes stay loosely typed so one malformed lane never hides "
        "the rest of the manifest; register-batch checks lane names, owners and targets.",
        records.Batch, record_family=True,
    ),
    Contract(
        CONTRACTS, "event-schema-v1.json", "event", 1, "agentcoord ordinary event v1",
        "events/<batch-id>/<event-id>.json, append-only. Free-form types are allowed; the four "
        "typed operational signals (help_requested, escalation_requested, error, "
        "human_intervention) and the two answers (help_answered, escalation_answered: "
        "reply_to = the request's event_id, message, optional decision) carry only their own "
        "typed fields, checked by validate (x-typed-events).",
        records.Event, record_family=True,
        # The typed types and their fields (answers too: reply_to is the request's
        # event_id), from the one table record-event, answer and validate use.
        meta={"x-typed-events": typed_events.contract_table()},
    ),
    Contract(
        CONTRACTS, "state-schema-v2.json", "lane_closed", 2,
        "agentcoord lane_closed event contract v2",
        "The terminal closeout event. Baseline claims, heartbeats, batches and ordinary events "
        "remain schema version 1. Consumers treat the declared terminal state as authoritative "
        "and deduplicate closeout by its batch/lane reservation path.",
        records.LaneClosed, record_family=True,
    ),
    Contract(
        CONTRACTS, "archive-record-schema-v1.json", "archive", 1,
        "agentcoord archive record contract v1",
        "Archive envelopes written by gc under archive/: a single archived record "
        "(source_path + data) or a terminal-target event compaction (source_paths + records). "
        "Envelopes are closed objects, as in the existing tool's contract.",
        records.ArchiveEnvelope,
    ),
    Contract(
        FOUNDATION, "host-limit.schema.json", "host_limit", 1, "agentcoord host limit record v1",
        "A machine and quota-host scoped usage-limit observation. Schema-only foundation: "
        "nothing reports, persists or projects it yet. Replay rule not stated by the spec: a "
        "lane that is not blocked by a limit projects null (no limit-derived status).",
        host_limit.HostLimit, (host_limit.HostLimitStatus,),
        {
            "x-logical-key": list(host_limit.LOGICAL_KEY),
            "x-storage-key": _storage("host_limits/{workspace}/{machine}/{quota_host}/{scope}.json"),
            "x-unique-key-enforcement": "producer (procedural check)",
        },
    ),
    Contract(
        FOUNDATION, "capacity-reservation/capacity-profile.schema.json", "capacity_profile", 1,
        "agentcoord capacity profile v1",
        "Authoritative numeric concurrency capacity for one protocol-plane profile.",
        capacity.CapacityProfile, (),
        {
            "x-logical-key": ["workspace", "capacity_profile_id"],
            "x-storage-key": _storage("capacity_profiles/{workspace}/{capacity_profile_id}.json"),
        },
    ),
    Contract(
        FOUNDATION, "capacity-reservation/inbox.schema.json", "inbox", 1, "agentcoord inbox v1",
        "An enabled or disabled planning inbox bound to one capacity profile.",
        capacity.Inbox, (),
        {
            "x-logical-key": ["workspace", "inbox_id"],
            "x-storage-key": _storage("inboxes/{workspace}/{inbox_id}.json"),
        },
    ),
    Contract(
        FOUNDATION, "capacity-reservation/lane-occupancy.schema.json", "lane_occupancy", 1,
        "agentcoord lane occupancy v1",
        "Persisted capacity occupancy for a stable batch lane, including blocked lanes without "
        "a live heartbeat.",
        capacity.LaneOccupancy, (),
        {
            "x-logical-key": ["workspace", "lane_ref"],
            "x-storage-key": _storage("lane_occupancies/{workspace}/{lane_ref}.json"),
            "x-counts-as-occupied": list(capacity.OCCUPYING_STATES),
        },
    ),
    Contract(
        FOUNDATION, "capacity-reservation/capacity-reservation.schema.json",
        "capacity_reservation", 1, "agentcoord capacity reservation v1",
        "Short-lived, all-or-nothing capacity holds for stable batch lane refs. Used capacity "
        "is the unique union of occupied/blocked lane refs and active held lane refs. Rules "
        "the spec does not state and that follow the existing tool's replay fixtures: a hold "
        "stops counting at exactly expires_at (expiry is inclusive); a retry with the same "
        "reservation_id is idempotent only if owner tuple, scope, inbox, profile, lane refs "
        "and ttl_seconds (default 900) all match, otherwise RESERVATION_CONFLICT; malformed "
        "requests (ttl out of range, both scopes, foreign-batch lane refs, missing or "
        "mismatched inbox/profile) are RESERVATION_REFUSED (CLI exit 4), checked before the "
        "conflict check; an expired hold records expired_at = expires_at.",
        capacity.CapacityReservation, (capacity.CapacityReservationSet,),
        {
            "x-storage-key": _storage("capacity_reservations/{workspace}/{reservation_id}.json"),
            "x-cli-refusal": {"name": "RESERVATION_REFUSED", "exit_code": 4},
        },
    ),
    Contract(
        FOUNDATION, "usage/usage-record.schema.json", "usage", 1, "agentcoord usage record v1",
        "Per-model token and estimated-cost telemetry. Unknown metrics are null or the em dash "
        "and are never omitted or fabricated as zero; consumers exclude them from sums and keep "
        "an all-unknown aggregate unknown (null). Later reports for a logical key supersede "
        "earlier ones by reported_at.",
        usage.UsageRecord, (usage.UsageStatus,),
        {
            "x-logical-key": list(usage.LOGICAL_KEY),
            "x-storage-key": _storage(
                "usage/{workspace}/{repo}/{batch_id}/{lane_name}/{agent_id}/{target}/{model}.json"
            ),
            "x-unique-key-enforcement": "producer (procedural check)",
        },
    ),
    Contract(
        FOUNDATION, "route/route.schema.json", "route", 1, "agentcoord lane route v1",
        "A lane's bound model + reasoning effort, additive on a claim, heartbeat or lane "
        "manifest record; it inherits that record's identity and has no key of its own.",
        route.LaneRouteProjection,
    ),
    Contract(
        FOUNDATION, "merge-authority/merge-authority.schema.json", "merge_authority", 1,
        "agentcoord batch merge authority v1",
        "The canonical persisted merge authority of a batch (none | ask | auto); the launch "
        "vocabulary maps auto_merge_when_gates_pass to auto before persistence.",
        merge_authority.BatchManifestProjection, (), {"x-launch-vocabulary": merge_authority.LAUNCH_VOCABULARY},
    ),
    Contract(
        FOUNDATION, "batch-completion/batch-completion.schema.json", "batch_completion", 1,
        "agentcoord batch completion report v1",
        "A completed batch's audit, completion report and final report. Rendering rule not "
        "stated by the spec: an outcome without refs renders an empty refs cell.",
        batch_completion.BatchCompletion, (),
        {
            "x-logical-key": list(batch_completion.LOGICAL_KEY),
            "x-storage-key": _storage("batch_completions/{workspace}/{batch_id}.json"),
        },
    ),
    Contract(
        FOUNDATION, "batch-blocker/batch-blocker.schema.json", "batch_blocker", 1,
        "agentcoord batch blocker v1",
        "A structured blocker on a batch. A batch with no blocker keeps the blockedOn-derived "
        "fallback.",
        batch_blocker.BatchBlocker, (),
        {
            "x-logical-key": list(batch_blocker.LOGICAL_KEY),
            "x-storage-key": _storage("batch_blockers/{workspace}/{batch_id}.json"),
        },
    ),
)


def _struct_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for module in _STRUCT_MODULES:
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, msgspec.Struct):
                found[value.__name__] = value
    return found


def _merge(target: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if key == "properties":
            for prop, more in value.items():
                target["properties"][prop].update(more)
        else:
            target[key] = copy.deepcopy(value)


def _omit_nulls(schema: dict[str, Any], cls: type) -> None:
    """A None-valued optional field is dropped by records.dump: absent, never null."""
    infos = {f.encode_name: f for f in msgspec.structs.fields(cls)}
    for name, prop in schema.get("properties", {}).items():
        info = infos.get(name)
        if info is None or info.required or info.default is not None:
            continue
        prop.pop("default", None)
        options = prop.get("anyOf")
        if options is not None:
            rest = [o for o in options if o != {"type": "null"}]
            if len(rest) == 1:
                del prop["anyOf"]
                prop.update(rest[0])
            else:
                prop["anyOf"] = rest


def schema_for(contract: Contract) -> dict[str, Any]:
    roots, defs = msgspec.json.schema_components(
        [contract.root, *contract.extra_defs], ref_template="#/$defs/{name}"
    )
    root = roots[0]
    classes = _struct_classes()
    for name, component in defs.items():
        cls = classes[name]
        if contract.record_family:
            _omit_nulls(component, cls)
            component["additionalProperties"] = True
        extra = getattr(cls, "__schema_extra__", None)
        if extra:
            _merge(component, extra)
    doc: dict[str, Any] = {
        "$schema": DRAFT,
        "$id": f"{ID_BASE}{contract.tree}/{contract.path}",
        "title": contract.title,
        "description": contract.description,
        "x-contract-version": contract.version,
        "x-record-family": contract.family,
        **contract.meta,
    }
    doc.update(root)
    doc["$defs"] = dict(sorted(defs.items()))
    return doc


def render(contract: Contract) -> str:
    return json.dumps(schema_for(contract), indent=2, ensure_ascii=False) + "\n"


def outputs() -> dict[str, str]:
    """Repository-relative path -> file text, for every published schema."""
    return {f"{c.tree}/{c.path}": render(c) for c in REGISTRY}


def by_family() -> dict[str, Contract]:
    return {c.family: c for c in REGISTRY}


def _tree_of(directory: str) -> tuple[Path, str]:
    path = Path(directory).resolve()
    for tree in (FOUNDATION, CONTRACTS):
        parts = tuple(tree.split("/"))
        if path.parts[-len(parts):] == parts:
            return path, tree
    raise SystemExit(f"--write DIR must end in {CONTRACTS}/ or {FOUNDATION}/: {directory}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentcoordd.model.contracts")
    parser.add_argument("--write", action="append", default=[], metavar="DIR",
                        help=f"write the {CONTRACTS}/ or {FOUNDATION}/ tree into DIR")
    parser.add_argument("--check", metavar="ROOT",
                        help="exit 1 if any committed schema under ROOT is out of date")
    args = parser.parse_args(argv)
    if not args.write and not args.check:
        parser.error("pass --write DIR or --check ROOT")
    texts = outputs()
    for directory in args.write:
        base, tree = _tree_of(directory)
        for rel, text in texts.items():
            if rel.startswith(tree + "/"):
                target = base / rel[len(tree) + 1:]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
                print(f"wrote {target}")
    if args.check:
        stale = [
            rel for rel, text in texts.items()
            if not (Path(args.check) / rel).is_file()
            or (Path(args.check) / rel).read_text(encoding="utf-8") != text
        ]
        for rel in stale:
            print(f"out of date: {rel}", file=sys.stderr)
        if stale:
            print("regenerate: python -m agentcoordd.model.contracts "
                  f"--write {CONTRACTS}/ --write {FOUNDATION}/", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
