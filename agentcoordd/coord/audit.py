"""batch-audit: the telemetry-completeness gate a closeout workflow fails closed on.

Returns the `batch-audit --json` payload — `batch_id`, `lanes` (each with
exactly `name, owner, targets, event_count, missing, complete, malformed`)
and `verdict`, plus `reason` when the verdict is `unknown` — and one extra
key, **`exit_code`** (0 complete, 1 incomplete, 2 unknown), which the daemon
pops and uses as the exit code; it is never rendered.

Reads `batches/<id>.json` and the listing of `events/<id>/`, nothing else.

UNKNOWN (never a false `complete`, never `incomplete` for an id it cannot
check): an invalid/unsafe id, an unregistered batch, a batch record that is
unreadable, not an object, names another batch_id or a malformed repo, a
batch with no lanes, an event listing the backend could not give, a listing
it marked partial (filtered by the token's scope), an event that is not a
JSON object.

An event record that cannot be read at all (not JSON, outside the record
bounds) is left out and named (`unreadable`, a warning): it can only add
evidence, so a lane complete without it is complete and one incomplete
without it stays incomplete — one bad record never turns every audit of the
batch UNKNOWN, and never passes one either.

Attribution (telemetry contract): an event naming a lane belongs to that lane
only; otherwise a target that maps to exactly one lane; otherwise an owner
(agent_id) that is unique among the lanes, when the event's target is absent
or one of that lane's targets. Empty targets are never keys. When the batch
declares a repo, events from any other (or no) repo are ignored entirely.

Completeness per lane, over its *lifecycle* events (claim.acquired,
claim.released, phase.changed, lane_closed) ordered by (at, event_id):

* every lifecycle event must be valid: schema version 1 (2 for lane_closed),
  factual (nonblank, not UNKNOWN) event_id / batch_id / agent_id / at
  strings, batch_id equal to the audited id, factual lane / repo / target
  when present, `at` a real RFC 3339 time, the (at, event_id) order unique,
  and its type contract (acquired: status absent or active; released: absent
  or released; phase.changed: a real transition, previous_phase → phase or
  old_phase → new_phase);
* authorization: each claim.acquired adds its agent to the lane's
  authorized agents (a takeover extends the lineage); claim.released,
  phase.changed and lane_closed must come from an authorized agent;
* terminal: if any lane_closed is attributed to the lane, the terminal
  signal is those records alone — all must pass the version-2 contract
  (reservation id of this lane, terminal, workspace, closed_by, URLs …),
  close the lane's own target, come from an authorized closer and agree
  with each other; an invalid one never falls back to a claim.released.
  Otherwise the terminal signal is a claim.released by the current holder
  after the latest claim.acquired (a release followed by a new acquisition
  is an open lane again, not a complete one).

`missing` lists `claim.acquired`, `terminal` and `lifecycle` (some observed
lifecycle event is invalid or unauthorized); a lane is complete when nothing
is missing. A malformed lane entry (not an object, no usable name, a name
with `:` or a duplicated name) is reported incomplete with `malformed: true`.
What made an event invalid is reported as a warning (stderr), never guessed
around.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agentcoordd.coord.batches import lane_name_of, lane_owner_of, lane_targets_of
from agentcoordd.coord.context import Ctx
from agentcoordd.model import ids
from agentcoordd.model.errors import EXIT_OK, EXIT_OPERATIONAL, OperationalError, UsageError
from agentcoordd.model.records import ARCHIVED_RECORD, COMPACTED_EVENTS
from agentcoordd.model.status import LANE_TERMINALS
from agentcoordd.model.timefmt import is_rfc3339, parse_ts
from agentcoordd.store.base import StoreError, list_all
from agentcoordd.store.cache import scan

ACQUIRED = "claim.acquired"
RELEASED = "claim.released"
PHASE = "phase.changed"
LANE_CLOSED = "lane_closed"
LIFECYCLE = (ACQUIRED, RELEASED, PHASE, LANE_CLOSED)

EXIT_INCOMPLETE = 1  # the spec's batch-audit table: closeout should fail closed
_EXIT = {"complete": EXIT_OK, "incomplete": EXIT_INCOMPLETE, "unknown": EXIT_OPERATIONAL}
_REPO = re.compile(r"^[^/]+/[^/]+$")
_URL = re.compile(r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\s]+(?:[/?#]|$)")
_CLOSE_SEMANTICS = ("terminal", "workspace", "closed_by", "pr_url", "pr_state", "evidence_url", "repo", "target")


def _factual(value: object) -> bool:
    """A nonblank string that is not the UNKNOWN placeholder."""
    return isinstance(value, str) and bool(value.strip()) and value.strip().upper() != "UNKNOWN"


def _key(value: object) -> str | None:
    """An attribution key: a non-empty string (or a number, as older tools wrote)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (str, int)):
        text = str(value)
        return text or None
    return None


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return ids.shown(text)


@dataclass
class _Lane:
    raw: Any
    name: str | None
    owner: str | None
    targets: list[str]
    malformed: bool
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def report(self, missing: list[str]) -> dict[str, Any]:
        return {
            "name": self.name or "UNKNOWN",  # agent-coord's placeholder, never null
            "owner": self.owner or "UNKNOWN",
            "targets": self.targets,
            "event_count": len(self.events),
            "missing": missing,
            "complete": not missing,
            "malformed": self.malformed,
        }


def _unknown(batch_id: object, reason: str) -> dict[str, Any]:
    return {
        "batch_id": batch_id,
        "lanes": [],
        "reason": reason,
        "verdict": "unknown",
        "exit_code": _EXIT["unknown"],
    }


async def batch_audit(ctx: Ctx, *, batch_id: str, include_archived: bool = False) -> dict[str, Any]:
    """agent-coord's audit of a registered batch. A batch gc archived is not "not
    registered": it is named as archived (with its archive path), and audited from
    the archive — the archived manifest, the hot events and the compacted ones under
    archive/events/<batch>/ — with `include_archived` (`--include-archived`)."""
    try:
        path = ids.batch_path(batch_id)
    except UsageError as exc:  # agent-coord's words throughout
        return _unknown(batch_id, f"coordination state unreadable: {exc.words}")
    archived: str | None = None
    try:
        current = await ctx.store.get(path)
    except StoreError as exc:
        return _unknown(batch_id, f"coordination state unreadable: {exc.message}")
    if current is None:
        try:  # an archive we cannot read (a scoped token, say) leaves agent-coord's answer
            archived = ids.state_path(f"{ARCHIVE_PREFIX}{path}")
            current = await ctx.store.get(archived)
        except (StoreError, UsageError):
            current = None
    if current is None:
        return _unknown(batch_id, f"batch {batch_id} is not registered")
    batch = current.data
    if archived is not None:
        if not include_archived:
            return {**_unknown(batch_id, f"batch {batch_id} is archived at {archived} (gc): pass "
                               "--include-archived to audit it from the archive"),
                    "archive_path": archived}
        if not (isinstance(batch, dict) and isinstance(batch.get("data"), dict)):
            return _unknown(batch_id, f"archived batch record {archived} holds no batch")
        batch = batch["data"]
    if not isinstance(batch, dict):
        return _unknown(batch_id, f"batch {batch_id} state is not an object")
    if batch.get("batch_id") is not None and batch.get("batch_id") != batch_id:
        return _unknown(batch_id, f"batch record {path} names another batch_id")
    repo = batch.get("repo")
    if repo is not None and not _factual(repo):
        return _unknown(batch_id, f"batch {batch_id} declares a malformed repo")
    raw_lanes = batch.get("lanes")
    if raw_lanes is not None and not isinstance(raw_lanes, list):
        return _unknown(batch_id, f"batch {batch_id} lanes is not an array")
    if not raw_lanes:
        return _unknown(batch_id, f"batch {batch_id} registers no lanes")

    try:
        lanes, unreadable = await _trail(ctx, batch_id, batch, include_archived=include_archived)
    except _Unknown as unknown:
        return _unknown(batch_id, unknown.reason)
    reports = []
    for lane in lanes:
        missing = ["claim.acquired", "terminal"] if lane.malformed else _evaluate(ctx, batch_id, lane)
        reports.append(lane.report(missing))
    # An event that cannot be read can only add evidence: a lane complete without it is
    # complete, one incomplete without it stays incomplete (the audit never passes on it).
    verdict = "complete" if all(r["complete"] for r in reports) else "incomplete"
    result = {"batch_id": batch_id, "lanes": reports, "verdict": verdict, "exit_code": _EXIT[verdict]}
    if unreadable:
        result["unreadable"] = [{"path": path, "reason": why} for path, why in unreadable]
        ctx.warn(f"unreadable events left out of the audit: {', '.join(path for path, _ in unreadable)}")
    if archived is not None:
        result["archive_path"] = archived
    return result


ARCHIVE_PREFIX = f"{ids.ARCHIVE}/"


def _archived_events(entries: list[Any], hot: set[str]) -> list[tuple[str, Any]]:
    """The events inside gc's archive records (compacted_events: `records`; an
    archived_record: `data`), each named `<archive path>#<n>`; a source still hot
    is not counted twice."""
    out: list[tuple[str, Any]] = []
    for entry in entries:
        envelope = entry.data
        if not isinstance(envelope, dict):
            raise _Unknown(f"archive record {entry.path} is not a JSON object")
        if envelope.get("record_family") == COMPACTED_EVENTS:
            sources = envelope.get("source_paths") if isinstance(envelope.get("source_paths"), list) else []
            if sources and all(source in hot for source in sources):
                continue  # compaction not finished: the sources are still hot
            records = envelope.get("records")
            if not isinstance(records, list):
                raise _Unknown(f"archive record {entry.path} has no records array")
            out += [(f"{entry.path}#{n}", record) for n, record in enumerate(records)]
        elif envelope.get("record_family") == ARCHIVED_RECORD:
            if envelope.get("source_path") not in hot:
                out.append((entry.path, envelope.get("data")))
        else:
            raise _Unknown(f"archive record {entry.path} has unknown family")
    return out


class _Unknown(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _whole_record(_path: str, data: Any) -> Any:
    return data


async def _event_records(ctx: Ctx, prefix: str) -> tuple[list[tuple[str, Any]], bool,
                                                          list[tuple[str, str]]]:
    """The batch's event records, whether a scoped token filtered them, and the records
    that cannot be read (path, why). Through the parsed-record cache (a non-owner
    closeout reads the whole trail: 26 % of a daemon at full sim size when listed
    uncached); a filtered scan is listed again, whose answer the callers report."""
    found = await scan(ctx.store, prefix, _whole_record, "audit.trail")
    if not found.partial:
        return sorted(found.rows, key=lambda row: row[0]), False, list(found.unreadable)
    page = await list_all(ctx.store, prefix)
    return [(entry.path, entry.data) for entry in page.entries], page.partial, []


async def _trail(ctx: Ctx, batch_id: str, batch: dict[str, Any], *,
                 include_archived: bool = False) -> tuple[list[_Lane], list[tuple[str, str]]]:
    """The batch's lanes, each with the events attributed to it (the repo gate applied),
    and the event records that cannot be read (left out); _Unknown when the trail
    cannot be listed or was filtered. `include_archived` adds the events gc compacted
    into archive/events/<batch>/."""
    prefix = ids.events_prefix(batch_id)
    try:
        entries, partial, unreadable = await _event_records(ctx, prefix)
        if include_archived:
            archive = await list_all(ctx.store, ARCHIVE_PREFIX + prefix)
            partial = partial or archive.partial
            entries += _archived_events(archive.entries, {path for path, _ in entries})
    except StoreError as exc:
        raise _Unknown(f"coordination state unreadable: {exc.message}") from None
    if partial:
        raise _Unknown(f"event trail for {batch_id} is filtered by a scoped token")
    repo = batch.get("repo")
    events: list[tuple[str, dict[str, Any]]] = []
    for entry_path, data in entries:
        if not isinstance(data, dict):
            raise _Unknown(f"event {entry_path} is not a JSON object")
        if repo is not None and data.get("repo") != repo:
            continue  # another repository's work under a reused batch id
        events.append((entry_path, data))
    raw = batch.get("lanes")
    lanes = _lanes(raw if isinstance(raw, list) else [])
    attribute = _attributor(lanes)
    for event_path, event in events:
        lane = attribute(event)
        if lane is not None:
            lane.events.append((event_path, event))
    return lanes, unreadable


async def closer_authorized(ctx: Ctx, batch_id: str, batch: dict[str, Any], lane_name: str,
                            agent_id: str) -> bool:
    """May `agent_id`, who does not own the lane, close it? Only as part of a clean
    lifecycle trail that authorizes it (it acquired the lane, e.g. by takeover) —
    agent-coord's rule. A trail that cannot be read whole is an OperationalError."""
    try:
        lanes, unreadable = await _trail(ctx, batch_id, batch)
    except _Unknown as unknown:
        raise OperationalError(unknown.reason) from None
    if unreadable:  # authority is never granted on a trail read in part
        raise OperationalError(f"event trail of {batch_id} has unreadable records: "
                               + ", ".join(path for path, _ in unreadable))
    lane = next((item for item in lanes if item.name == lane_name and not item.malformed), None)
    if lane is None:
        return False
    lineage = _lineage(batch_id, lane, lambda _message: None)
    return (not lineage.gap and not lineage.closed_invalid and not lineage.conflicting
            and agent_id in lineage.authorized)


def _lanes(raw_lanes: list[Any]) -> list[_Lane]:
    lanes = []
    counts: dict[str, int] = {}
    for raw in raw_lanes:
        name = lane_name_of(raw)
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    for raw in raw_lanes:
        name = lane_name_of(raw)
        malformed = (
            not isinstance(raw, dict) or name is None or ":" in name or counts.get(name, 0) > 1
        )
        lanes.append(_Lane(raw, name, lane_owner_of(raw), lane_targets_of(raw), malformed))
    return lanes


def _attributor(lanes: list[_Lane]) -> Any:
    by_name = {lane.name: lane for lane in lanes if not lane.malformed and lane.name}
    by_target: dict[str, list[_Lane]] = {}
    by_owner: dict[str, list[_Lane]] = {}
    for lane in lanes:
        for target in dict.fromkeys(lane.targets):
            by_target.setdefault(target, []).append(lane)
        if lane.owner:
            by_owner.setdefault(lane.owner, []).append(lane)

    def attribute(event: dict[str, Any]) -> _Lane | None:
        named = event.get("lane")
        if isinstance(named, str) and named:
            return by_name.get(named)  # an explicit lane is trusted; no fallback
        target = _key(event.get("target"))
        if target is not None:
            hits = by_target.get(target, [])
            if len(hits) == 1 and not hits[0].malformed:
                return hits[0]
        agent = event.get("agent_id")
        if isinstance(agent, str) and agent:
            hits = by_owner.get(agent, [])
            if len(hits) == 1 and not hits[0].malformed:
                lane = hits[0]
                if target is None or target in lane.targets:
                    return lane
        return None

    return attribute


def _ordinary_problem(event: dict[str, Any], batch_id: str) -> str | None:
    """Why an ordinary (schema 1) lifecycle event is not valid evidence, or None."""
    version = event.get("schema_version")
    if version != 1 or isinstance(version, bool):
        return "schema_version is not 1"
    for key in ("event_id", "batch_id", "agent_id", "at"):
        if not _factual(event.get(key)):
            return f"{key} is missing or not a factual string"
    if event["batch_id"] != batch_id:
        return "batch_id names another batch"
    for key in ("lane", "repo", "target"):
        if event.get(key) is not None and not _factual(event[key]):
            return f"{key} is not a factual string"
    if not is_rfc3339(event["at"]):
        return "at is not an RFC 3339 time"
    kind = event["type"]
    status = event.get("status")
    if kind == ACQUIRED and status is not None and status != "active":
        return "claim.acquired status is neither absent nor active"
    if kind == RELEASED and status is not None and status != "released":
        return "claim.released status is neither absent nor released"
    if kind == PHASE:
        if "previous_phase" in event:
            before, after = event.get("previous_phase"), event.get("phase")
        else:  # the older shape
            before, after = event.get("old_phase"), event.get("new_phase")
        if not (_factual(before) and _factual(after)) or before == after:
            return "phase.changed is not a real phase transition"
    return None


def _lane_closed_problem(event: dict[str, Any], batch_id: str, lane: _Lane) -> str | None:
    """Why a lane_closed record fails the version-2 contract or this lane's identity."""
    version = event.get("schema_version")
    if version != 2 or isinstance(version, bool):
        return "schema_version is not 2"
    if lane.name is None or event.get("event_id") != ids.lane_closed_event_id(lane.name):
        return "event_id is not this lane's lane_closed reservation"
    repo = event.get("repo")
    if not isinstance(repo, str) or _REPO.match(repo) is None:
        return "repo is not OWNER/REPO"
    for key in ("target", "workspace"):
        if not _factual(event.get(key)):
            return f"{key} is missing or not a factual string"
    if event.get("terminal") not in LANE_TERMINALS:
        return "terminal is not done, abandoned or superseded"
    closed_by = event.get("closed_by")
    if (
        not isinstance(closed_by, dict)
        or set(closed_by) != {"agent_id", "machine"}
        or not _factual(closed_by.get("agent_id"))
        or not _factual(closed_by.get("machine"))
    ):
        return "closed_by is not {agent_id, machine}"
    if not is_rfc3339(event.get("at")):
        return "at is not an RFC 3339 time"
    for key in ("batch_id", "lane", "branch", "pr_state", "agent_id"):
        if event.get(key) is not None and not _factual(event[key]):
            return f"{key} is not a factual string"
    for key in ("pr_url", "evidence_url"):
        value = event.get(key)
        if value is not None and (not isinstance(value, str) or _URL.match(value) is None):
            return f"{key} is not an http(s) URL"
    if event.get("batch_id") is not None and event["batch_id"] != batch_id:
        return "batch_id names another batch"
    if event.get("lane") is not None and event["lane"] != lane.name:
        return "lane names another lane"
    if event["target"] not in lane.targets:
        return "target is not one of the lane's targets"
    if event.get("agent_id") is not None and event["agent_id"] != closed_by["agent_id"]:
        return "agent_id differs from closed_by.agent_id"
    return None


@dataclass
class _Lineage:
    authorized: set[str] = field(default_factory=set)
    acquired: bool = False
    terminal: bool = False
    gap: bool = False  # an invalid, unauthorized or unordered ordinary lifecycle event
    closed_invalid: bool = False
    conflicting: bool = False


def _evaluate(ctx: Ctx, batch_id: str, lane: _Lane) -> list[str]:
    lineage = _lineage(batch_id, lane, ctx.warn)
    missing = []
    if not lineage.acquired:
        missing.append("claim.acquired")
    if not lineage.terminal:
        missing.append("terminal")
    if lineage.gap:
        missing.append("lifecycle")
    return missing


def _lineage(batch_id: str, lane: _Lane, warn: Any) -> _Lineage:
    out = _Lineage()
    closed_seen = False

    def problem(path: str, why: str, *, lifecycle: bool = True) -> None:
        """Report why; an ordinary event's problem is a lifecycle gap, a lane_closed's only
        costs the terminal signal (agent-coord's rule)."""
        out.gap = out.gap or lifecycle
        warn(f"batch-audit {batch_id} lane {lane.name}: {path}: {why}")

    valid: list[tuple[Any, str, str, dict[str, Any]]] = []
    for path, event in lane.events:
        kind = event.get("type")
        if kind not in LIFECYCLE:
            continue
        if kind == LANE_CLOSED:
            closed_seen = True
            why = _lane_closed_problem(event, batch_id, lane)
            if why is not None:
                out.closed_invalid = True
        else:
            why = _ordinary_problem(event, batch_id)
        if why is not None:
            problem(path, why, lifecycle=kind != LANE_CLOSED)
            continue
        valid.append((parse_ts(event["at"]), event["event_id"], path, event))

    order = [(at, event_id) for at, event_id, _, _ in valid]
    if len(set(order)) != len(order) or len({e for _, e in order}) != len(order):
        problem(f"events/{batch_id}/", "lifecycle events do not form a uniquely ordered (at, event_id) lineage")
    valid.sort(key=lambda item: (item[0], item[1]))

    holder: str | None = None
    released = False
    closes: list[dict[str, Any]] = []
    for _, _, path, event in valid:
        kind = event["type"]
        if kind == ACQUIRED and lane.owner is None:
            # nobody can be admitted to a lane without an owner (agent-coord's rule):
            # the acquisition is there, the lineage is not valid
            out.acquired = True
            problem(path, "claim.acquired on a lane without an owner")
            continue
        if kind == ACQUIRED:
            out.authorized.add(event["agent_id"])
            holder = event["agent_id"]
            out.acquired = True
            released = False
            continue
        agent = event["closed_by"]["agent_id"] if kind == LANE_CLOSED else event["agent_id"]
        if agent not in out.authorized:
            problem(path, f"{kind} from {agent}, who never acquired the lane",
                    lifecycle=kind != LANE_CLOSED)
            if kind == LANE_CLOSED:
                out.closed_invalid = True
            continue
        if kind == RELEASED and agent == holder:
            released = True
        elif kind == LANE_CLOSED:
            closes.append(event)

    if closed_seen:
        semantics = {tuple(repr(close.get(k)) for k in _CLOSE_SEMANTICS) for close in closes}
        if len(semantics) > 1:
            out.conflicting = True
            problem(f"events/{batch_id}/", "conflicting lane_closed records", lifecycle=False)
        out.terminal = bool(closes) and not out.closed_invalid and len(semantics) == 1
    else:
        out.terminal = released
    return out
