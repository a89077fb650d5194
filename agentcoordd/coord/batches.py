"""register-batch, and the lane/dependency helpers every batch reader shares.

Registration validates the whole manifest before anything is written (batch
id, non-empty lanes, unique lane names without `:`, owner and targets present
and well-formed, dependency refs parseable, no dependency cycle — within the
manifest, and through the registered batches it references), then stamps `schema_version`,
`registered_at` and `updated_at` and keeps every other top-level and lane
field as the coordinator wrote it.

Re-registration is a compare-and-swap replace of the stored manifest. It keeps
what the new manifest cannot know about:

* `synthetic` / `synthetic_kind` when neither the new manifest nor the command
  sets them (completed synthetic batches keep the short GC window);
* the records other requests keep on the batch (`usage`, `blocker`,
  `blocker_resolution`, `completion`) unless the manifest states them;
* `registered_at` (the first registration time) unless the manifest states one;
* the closeout stamps of lanes that were already closed (`terminal`,
  `closed_at`, `closed_by`, `workspace`, `pr_state`, `evidence_url`, and the
  lane `status` they set) when the same lane name is registered again without
  a terminal of its own, and the batch's `status: "completed"` /
  `completed_at` while every lane is still terminal. Declared terminal state
  is authoritative, and a re-registration (say, to add a lane) must not
  silently reopen lanes whose `lane_closed` events exist.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from agentcoordd.coord.cas import Put, cas_update
from agentcoordd.coord.common import MANIFEST_CAS_ATTEMPTS, text_field
from agentcoordd.coord.context import Ctx
from agentcoordd.model import ids
from agentcoordd.model.dependencies import (  # noqa: F401 - lane helpers every batch reader shares
    Node,
    cycle_message,
    dependency_edges,
    find_cycle,
    invalid_dependency_message,
    invalid_dependency_refs,
    lane_dependencies,
    lane_name_of,
    split_dependency,
    unknown_lane_message,
    unknown_own_lanes,
)
from agentcoordd.model.backoff import MANIFEST_CAS
from agentcoordd.model.errors import UsageError
from agentcoordd.model.records import SCHEMA_VERSION
from agentcoordd.model.status import LANE_TERMINALS
from agentcoordd.model.timefmt import format_ts, is_rfc3339
from agentcoordd.model.validation import Violation, contract_error, one_line, validate_record
from agentcoordd.store.base import StoreError, Versioned

# The HTTP backend's cap on one active record; a bigger manifest could never
# be stored there, so it is refused everywhere (exit 1) before any write.
MAX_MANIFEST_BYTES = 256 * 1024

# How many registered batches a cycle check follows through cross-batch refs.
MAX_CYCLE_BATCHES = 256

# Records written onto the batch by other requests (usage reports, the blocker,
# the completion report); a re-registration keeps them.
BATCH_RECORDS = ("usage", "blocker", "blocker_resolution", "completion")

# Lane fields a terminal closeout stamps; kept across a re-registration.
_CLOSEOUT_FIELDS = ("terminal", "closed_at", "closed_by", "workspace", "pr_state", "evidence_url")


# ---- shared lane helpers (status, audit and closeout read lanes the same way) --


def lane_owner_of(lane: object) -> str | None:
    """The lane owner (`owner`, legacy `agent_id`) when it is a non-empty string."""
    if not isinstance(lane, dict):
        return None
    owner = lane.get("owner") if "owner" in lane else lane.get("agent_id")
    return owner if isinstance(owner, str) and owner else None


def lane_targets_of(lane: object) -> list[str]:
    """The lane's targets as strings (`targets`, legacy scalar `target`).

    Numbers written by older tools are compared as their decimal spelling;
    empty strings are dropped (they are never an attribution key).
    """
    if not isinstance(lane, dict):
        return []
    raw = lane.get("targets") if lane.get("targets") is not None else lane.get("target")
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    for item in items:
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, (str, int)):
            text = str(item)
            if text:
                out.append(text)
    return out


async def lane_entry_for_target(ctx: Ctx, batch_id: str, target: str) -> dict[str, Any] | None:
    """The manifest entry of the one lane of the registered batch that lists `target` (None
    when no lane, or more than one, does, or the manifest cannot be read)."""
    try:
        current = await ctx.store.get(ids.batch_path(batch_id))
    except (StoreError, UsageError):
        return None
    lanes = current.data.get("lanes") if current is not None and isinstance(current.data, dict) else None
    found = [lane for lane in (lanes if isinstance(lanes, list) else [])
             if isinstance(lane, dict) and target in lane_targets_of(lane)]
    return found[0] if len(found) == 1 else None


async def lane_for_target(ctx: Ctx, batch_id: str, target: str) -> str | None:
    """The name of the one lane of the registered batch that lists `target` (None: see
    lane_entry_for_target)."""
    entry = await lane_entry_for_target(ctx, batch_id, target)
    return lane_name_of(entry) if entry is not None else None


async def _cross_batch_cycle(ctx: Ctx, batch: str, lanes: object) -> list[Node] | None:
    """Follow refs into registered batches (not this one's stored version) and look again."""
    edges = dependency_edges(batch, lanes)
    seen = {batch}
    pending = [b for deps in edges.values() for b, _lane in deps if b not in seen]
    while pending and len(seen) < MAX_CYCLE_BATCHES:
        other = pending.pop()
        if other in seen:
            continue
        seen.add(other)
        try:
            current = await ctx.store.get(ids.batch_path(other))
        except StoreError as exc:
            ctx.warn(f"dependency cycle check could not read batch {other}: {exc.message}")
            continue
        if current is None or not isinstance(current.data, dict):
            continue
        more = dependency_edges(other, current.data.get("lanes"))
        edges.update(more)
        pending.extend(b for deps in more.values() for b, _lane in deps if b not in seen)
    return find_cycle(edges)


# ---- register-batch ------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(text.split())


def parse_manifest(manifest: bytes, batch_id: str | None = None) -> dict[str, Any]:
    """Decode and validate a manifest; every failure is one UsageError line. `batch_id`
    (register-batch --batch-id) names the batch when the manifest does not, and must
    agree with it when it does."""
    if len(manifest) > MAX_MANIFEST_BYTES:
        raise UsageError(
            f"batch manifest is too large: {len(manifest)} bytes (limit {MAX_MANIFEST_BYTES} bytes)"
        )
    try:
        data = msgspec.json.decode(manifest)
    except msgspec.DecodeError as exc:
        raise UsageError(f"batch manifest JSON invalid: {_one_line(str(exc))}") from None
    except RecursionError:
        raise UsageError("batch manifest JSON invalid: nesting too deep") from None
    if isinstance(data, dict) and batch_id is not None:
        named = data.get("batch_id")
        if named is None or named == "":
            data["batch_id"] = batch_id
        elif named != batch_id:
            raise UsageError("--batch-id does not match batch manifest batch_id")
    validate_manifest(data)
    return data


def validate_manifest(data: object) -> None:
    if not isinstance(data, dict):
        raise UsageError("batch manifest must be a JSON object")
    batch = data.get("batch_id")
    if batch is None or batch == "":
        raise UsageError("batch manifest missing batch_id")
    if not isinstance(batch, str):
        raise UsageError("batch manifest batch_id must be a string")
    ids.batch_id(batch)
    repo = data.get("repo")
    if repo is not None:
        if not isinstance(repo, str) or any(p in (".", "..") for p in repo.split("/")):
            raise UsageError(f"invalid batch repo: {ids.shown(str(repo))}")
        try:
            ids.repo(repo)
        except UsageError:
            raise UsageError(f"invalid batch repo: {ids.shown(repo)}") from None
    prompt = data.get("launch_prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise UsageError("batch manifest launch_prompt must be a string")
    for flag in ("synthetic",):
        if flag in data and data[flag] is not None and not isinstance(data[flag], bool):
            raise UsageError("batch manifest synthetic must be true or false")
    kind = data.get("synthetic_kind")
    if kind is not None and (not isinstance(kind, str) or not kind.strip()):
        raise UsageError("batch manifest synthetic_kind must be a non-empty string")
    lanes = data.get("lanes")
    if not isinstance(lanes, list):  # missing or null too, in agent-coord's words
        raise UsageError("batch manifest lanes must be an array")
    if not lanes:
        raise UsageError("batch manifest lanes must not be empty")
    names: dict[str, int] = {}
    for position, lane in enumerate(lanes, start=1):
        name = _validate_lane(lane, position, batch)
        if name in names:
            raise UsageError(f"batch lane {name} is duplicated (lanes {names[name]} and {position})")
        names[name] = position
    for name, ref in unknown_own_lanes(batch, lanes)[:1]:
        raise UsageError(unknown_lane_message(name, ids.shown(ref)))
    cycle = find_cycle(dependency_edges(batch, lanes))
    if cycle is not None:
        raise UsageError(cycle_message(cycle))


def _validate_lane(lane: object, position: int, batch_id: str | None = None) -> str:
    if not isinstance(lane, dict):
        raise UsageError(f"batch lane {position} must be a JSON object")
    raw_name = lane.get("name") if "name" in lane else lane.get("id")
    if raw_name is None or raw_name == "":
        raise UsageError(f"batch lane {position} missing name")
    if not isinstance(raw_name, str):
        raise UsageError(f"batch lane {position} name must be a string")
    if ":" in raw_name:
        raise UsageError(f"batch lane {ids.shown(raw_name)} cannot contain ':'")
    try:
        name = ids.lane_name(raw_name)
    except UsageError:
        raise UsageError(f"batch lane {position} has an invalid name: {ids.shown(raw_name)}") from None
    owner = lane.get("owner") if "owner" in lane else lane.get("agent_id")
    if owner is None or owner == "":
        raise UsageError(f"batch lane {name} missing owner")
    if not isinstance(owner, str):
        raise UsageError(f"batch lane {name} owner must be a string")
    try:
        ids.agent_id(owner)
    except UsageError:
        raise UsageError(f"invalid lane owner: {ids.shown(owner)} (batch lane {name})") from None
    raw_targets = lane.get("targets") if lane.get("targets") is not None else lane.get("target")
    if "targets" in lane and lane["targets"] is not None and not isinstance(lane["targets"], list):
        raise UsageError(f"batch lane {name} targets must be an array")
    items = raw_targets if isinstance(raw_targets, list) else [raw_targets]
    items = [item for item in items if item is not None and item != ""]  # as agent-coord drops them
    if not items:
        raise UsageError(f"batch lane {name} missing targets")
    for item in items:
        shown = ids.shown(str(item).lower() if isinstance(item, bool) else str(item))
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise UsageError(f"invalid lane target: {shown} (batch lane {name})")
        try:
            ids.target(str(item))
        except UsageError:
            raise UsageError(f"invalid lane target: {shown} (batch lane {name})") from None
    for ref in invalid_dependency_refs(lane):
        shown = ids.shown(ref if isinstance(ref, str) else str(ref))
        raise UsageError(invalid_dependency_message(name, shown, batch_id))
    return name


def check_contract(data: dict[str, Any]) -> None:
    """What validate_manifest does not already say, from the published contracts:
    the batch v1 family (typed top-level fields omitted rather than null, lane
    field types), merge authority on the manifest, and a lane's route. Unknown
    fields stay accepted. A violation is exit 1 in `validate`'s words.

    A lane written with the legacy `id` (read as its name by register-batch)
    is checked as if it were spelled `name`.
    """
    lanes = [
        dict(lane, name=lane["id"]) if isinstance(lane, dict) and "name" not in lane and "id" in lane
        else lane
        for lane in data["lanes"]
    ]
    for family, record in (("batch", dict(data, lanes=lanes)), ("merge_authority", data)):
        error = contract_error(family, record, "batch manifest")
        if error is not None:
            raise error
    for position, lane in enumerate(lanes):
        if isinstance(lane, dict) and "route" in lane:
            found = validate_record("route", {"route": lane["route"]})
            if found:
                first = Violation(f"$.lanes[{position}]" + found[0].path[1:], found[0].message)
                raise UsageError(f"batch manifest violates the route contract: {one_line(first)}")


def _canonical_merge_authority(data: dict[str, Any]) -> None:
    """The pr-batch launch vocabulary maps to the short enum before persistence
    (`auto_merge_when_gates_pass` -> `auto`); anything else is left to the contract check."""
    from agentcoordd.model.foundation.merge_authority import LAUNCH_VOCABULARY

    value = data.get("merge_authority")
    if isinstance(value, str) and value in LAUNCH_VOCABULARY:
        data["merge_authority"] = LAUNCH_VOCABULARY[value]


def _carry_over(new: dict[str, Any], old: dict[str, Any]) -> None:
    """Keep what a re-registration cannot know (see the module docstring)."""
    for key in ("synthetic", "synthetic_kind", *BATCH_RECORDS):
        if key not in new and key in old:
            new[key] = old[key]
    if "registered_at" not in new and is_rfc3339(old.get("registered_at")):
        new["registered_at"] = old["registered_at"]
    old_lanes = {lane_name_of(lane): lane for lane in old.get("lanes") or [] if lane_name_of(lane)}
    for lane in new["lanes"]:
        before = old_lanes.get(lane_name_of(lane))
        if not isinstance(before, dict) or before.get("terminal") not in LANE_TERMINALS:
            continue
        if lane.get("terminal") is not None:
            continue  # the coordinator states the lane's terminal itself
        for key in _CLOSEOUT_FIELDS:
            if key in before and key not in lane:
                lane[key] = before[key]
        if "status" not in lane or lane["status"] != before.get("status"):
            lane["status"] = before.get("status", before["terminal"])
    if all(isinstance(lane, dict) and lane.get("terminal") in LANE_TERMINALS for lane in new["lanes"]):
        if "status" not in new and old.get("status") == "completed":
            new["status"] = "completed"
        if "completed_at" not in new and "completed_at" in old:
            new["completed_at"] = old["completed_at"]


async def register_batch(
    ctx: Ctx,
    *,
    manifest: bytes,
    batch_id: str | None = None,
    launch_prompt: str | None = None,
    synthetic: bool = False,
    synthetic_kind: str | None = None,
) -> dict[str, Any]:
    """Validate and write `batches/<batch-id>.json`; returns {batch_id, path, batch}.
    An option beats the manifest, which beats the stored batch (synthetic markers);
    an empty launch prompt is stored as given (agent-coord)."""
    text_field("synthetic_kind", synthetic_kind)
    if launch_prompt is not None and "\x00" in launch_prompt:
        raise UsageError("--launch-prompt contains NUL")
    data = parse_manifest(manifest, batch_id)
    batch = data["batch_id"]
    path = ids.batch_path(batch)
    if launch_prompt is not None:
        data["launch_prompt"] = launch_prompt
    if synthetic:
        data["synthetic"] = True
    if synthetic_kind is not None:
        data["synthetic_kind"] = synthetic_kind
    if not is_rfc3339(data.get("registered_at")):
        data.pop("registered_at", None)
    _canonical_merge_authority(data)
    check_contract(data)
    cycle = await _cross_batch_cycle(ctx, batch, data["lanes"])
    if cycle is not None:
        raise UsageError(cycle_message(cycle))

    async def decide(current: Versioned | None) -> Put:
        record = _deep_copy(data)
        if current is not None and isinstance(current.data, dict):
            _carry_over(record, current.data)
        stamp = format_ts(ctx.clock.now())
        record["schema_version"] = SCHEMA_VERSION
        record.setdefault("registered_at", stamp)
        record["updated_at"] = stamp
        _check_size(record)
        return Put(record, record)

    record = await cas_update(ctx.store, path, decide)
    return {"batch_id": batch, "path": path, "batch": record}


async def update_registered(ctx: Ctx, batch_id: str,
                            change: Callable[[dict[str, Any]], Any]) -> Any:
    """Apply `change(manifest) -> result` to a registered batch in one manifest CAS
    (a batch record written by another request: usage, blocker, completion); it
    stamps `updated_at`. No registered batch is exit 1."""
    path = ids.batch_path(batch_id)

    def decide(current: Versioned | None) -> Put:
        if current is None or not isinstance(current.data, dict):
            raise UsageError(f"batch {batch_id} not found (register it first)")
        manifest = dict(current.data)
        result = change(manifest)
        manifest["updated_at"] = format_ts(ctx.clock.now())
        _check_size(manifest)
        return Put(manifest, result)

    return await cas_update(ctx.store, path, decide, attempts=MANIFEST_CAS_ATTEMPTS,
                            backoff=MANIFEST_CAS)


def _deep_copy(value: Any) -> Any:
    return msgspec.json.decode(msgspec.json.encode(value))


def _check_size(record: dict[str, Any]) -> None:
    size = len(msgspec.json.encode(record))
    if size > MAX_MANIFEST_BYTES:
        raise UsageError(
            f"batch record would be {size} bytes with the launch prompt and stamps "
            f"(limit {MAX_MANIFEST_BYTES} bytes)"
        )
