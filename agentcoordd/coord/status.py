"""status: full, target-scoped and batch-scoped views of coordination state.

Returns the `status --json` payload (key sets as the existing tool:
version, scope, degraded, section_notes, claims, heartbeats, batches, events,
and archive with --include-archived) plus two extra keys the daemon pops:
**`exit_code`**, the command's exit code (0, or 2 when the backend result is
UNKNOWN), and with 2 **`exit_error`**, the stderr line saying why (`state
unreadable: …`, as agent-coord says it). Neither is part of the rendered JSON.

What each scope reads (the spec's list, and nothing else):

* target (`--repo R --target T`): `claims/<R>/<T>.json` and, when the claim
  names a holder, `heartbeats/<holder>.json`;
* batch (`--batch-id ID`): `batches/<ID>.json`, the listing of
  `events/<ID>/`, the lane owners' heartbeats, and for dependency refs into
  other batches those batch files plus the referenced lane owners'
  heartbeats;
* full: every hot record (`claims`, `heartbeats`, `batches`, `events`), and
  `archive/` only with `include_archived`.

Degraded notes (`section_notes`, one per section; `degraded` lists their
distinct values in the order they were noted) say what a row cannot vouch
for: sections intentionally not checked in a scope, missing lane-owner
heartbeats, a filtered (partial) listing, events omitted by the per-batch
limit — all exit 0. A record in a listing that cannot be read (invalid JSON,
outside the record bounds, not what its family needs) is named in a note and
a warning and left out: one bad record is its own problem, exit 0 (docs/
reliability.md, "One bad record"). The record a scope is *about* — the
target's claim, the batch's manifest — unreadable, or a section the backend
refused to list, makes the result UNKNOWN: everything readable is still
returned, with exit 2.

Events: full status shows the most recent `events` (default 20) events of
each batch; batch scope shows all of the batch's events unless `events` is
given; `all_events` lifts the limit. Shown events are ordered by `at` (path
breaks ties), as the spec asks consumers to order mixed event families.
"""

from __future__ import annotations

import bisect
import heapq
import operator
from typing import Any

from agentcoordd.coord import holders, lease
from agentcoordd.coord import projections as pj
from agentcoordd.coord.open_requests import batch_open_requests
from agentcoordd.coord.batches import lane_dependencies, lane_name_of, lane_owner_of, split_dependency
from agentcoordd.coord.common import WireData
from agentcoordd.coord.context import Ctx
from agentcoordd.coord import host_limits as limits
from agentcoordd.coord.info import CONTRACT_VERSION
from agentcoordd.model import ids
from agentcoordd.model.errors import EXIT_OK, EXIT_OPERATIONAL, UsageError
from agentcoordd.model.records import Claim, Heartbeat, try_load
from agentcoordd.store.base import Forbidden, InvalidRecord, StoreError
from agentcoordd.store.cache import Scan, caches, read_many, scan

DEFAULT_EVENTS_PER_BATCH = 20
# Cached event projections kept by a CachingStore (the selected recent events).
_EVENT_PROJECTION_CAP = 5_000


class _Report:
    """Collects section notes, whether the result is UNKNOWN, and the records left out."""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {}
        self.unknown: list[str] = []  # the notes that make the result UNKNOWN
        self.unreadable: list[str] = []  # records named in a note, left out of the rows

    def note(self, section: str, text: str, *, unknown: bool = False) -> None:
        self.notes[section] = f"{self.notes[section]}; {text}" if section in self.notes else text
        if unknown:
            self.unknown.append(text)

    def absorb(self, section: str, result: Scan[Any]) -> None:
        if result.partial:
            self.note(section, f"{section} filtered by scoped token")
        if result.unreadable:  # one bad record is its own problem: the rest is served
            self.unreadable.extend(path for path, _ in result.unreadable)
            paths = ", ".join(path for path, _ in result.unreadable)
            self.note(section, f"unreadable records: {paths}")

    async def scan(self, ctx: Ctx, section: str, prefix: str, digest: Any, name: str) -> Scan[Any]:
        try:
            result = await scan(ctx.store, prefix, digest, name)
        except StoreError as exc:
            self.note(section, f"{prefix} not readable: {exc.message}", unknown=True)
            return Scan()
        self.absorb(section, result)
        return result

    def payload(self, ctx: Ctx, scope: dict[str, Any], **sections: Any) -> WireData:
        if self.unreadable:
            ctx.warn(f"unreadable records left out (see the degraded notes): {', '.join(self.unreadable)}")
        degraded: list[str] = []
        for text in self.notes.values():
            if text not in degraded:
                degraded.append(text)
        return WireData({
            "version": CONTRACT_VERSION,
            "scope": scope,
            "degraded": degraded,
            "section_notes": dict(self.notes),
            **sections,
            "exit_code": EXIT_OPERATIONAL if self.unknown else EXIT_OK,
            **({"exit_error": "state unreadable: " + "; ".join(self.unknown)} if self.unknown else {}),
        })


async def status(
    ctx: Ctx,
    *,
    repo: str | None = None,
    target: str | None = None,
    batch_id: str | None = None,
    include_archived: bool = False,
    events: int | None = None,
    all_events: bool = False,
) -> dict[str, Any]:
    if batch_id is not None and (repo is not None or target is not None):
        raise UsageError("--batch-id cannot be combined with --repo or --target")
    if repo is not None and target is None:
        raise UsageError("missing required --target")
    if target is not None and repo is None:
        raise UsageError("missing required --repo")
    scoped = repo is not None or batch_id is not None
    if include_archived and scoped:
        raise UsageError("--include-archived is only valid for unscoped status")
    if events is not None and (isinstance(events, bool) or not isinstance(events, int) or events < 0):
        raise UsageError(f"--events must be a non-negative number: {events}")
    if events is not None and all_events:
        raise UsageError("--events and --all-events cannot be combined")
    if repo is not None:
        return await _target_status(ctx, repo, str(target))
    if all_events:
        limit = None
    elif events is not None:
        limit = events
    else:
        limit = None if batch_id is not None else DEFAULT_EVENTS_PER_BATCH
    if batch_id is not None:
        payload = await _batch_status(ctx, batch_id, limit)
        if ctx.seen is not None:  # lanes first: requests count only for a registered batch
            ctx.seen.lanes(ctx.store.name, payload["batches"], complete=False)
            ctx.seen.open_requests(ctx.store.name, payload.get("open_requests", []), batch_id=batch_id)
        return payload
    payload = await _full_status(ctx, include_archived, limit)
    if ctx.seen is not None:  # a whole listing of batches/ tells which batches left
        ctx.seen.lanes(ctx.store.name, payload["batches"],
                       complete="batches" not in payload["section_notes"])
    return payload


# ---- events (shared by full and batch scope) -----------------------------


_BY_TIME = operator.itemgetter(1, 0)  # rows are (path, key): order by (at, path)
_KEY = operator.itemgetter(1)


def _most_recent(rows: list[tuple[str, float]], limit: int | None) -> tuple[list[tuple[str, float]], int]:
    """Per batch directory, the `limit` most recent rows; rows are in path order.

    A batch's events are one contiguous run of the path-ordered listing, found
    by bisection rather than by looking at every path.
    """
    if limit is None:
        return sorted(rows, key=_BY_TIME), 0
    chosen: list[tuple[str, float]] = []
    omitted = 0
    i, n = 0, len(rows)
    while i < n:
        parts = rows[i][0].split("/", 2)
        if len(parts) > 2:  # events/<batch>/...: everything before "events/<batch>0"
            j = bisect.bisect_left(rows, f"{parts[0]}/{parts[1]}0", i, n, key=operator.itemgetter(0))
        else:
            j = i + 1
        if j - i > limit:
            omitted += j - i - limit
            # newest first, ties broken toward the larger path (nlargest is stable)
            chosen.extend(heapq.nlargest(limit, rows[j - 1 : i - 1 if i else None : -1], key=_KEY))
        else:
            chosen.extend(rows[i:j])
        i = j
    chosen.sort(key=_BY_TIME)
    return chosen, omitted


async def _recent_events(
    ctx: Ctx, report: _Report, prefix: str, limit: int | None,
    every: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Events below `prefix`, the most recent `limit` of each batch, by `at`.
    `every` receives all of them when the listing carried them anyway (remote)."""
    projections: dict[str, dict[str, Any]] | None = None
    if caches(ctx.store):
        # Local files: keep only sort keys for every event, read the shown ones.
        keyed = await report.scan(ctx, "events", prefix, pj.event_key_digest, "status.event_keys")
        rows = keyed.rows
    else:
        # A remote listing already carries every record: project in one pass.
        both = await report.scan(ctx, "events", prefix, pj.event_status_digest, "status.event_rows")
        rows = [(path, key) for path, (key, _) in both.rows]
        projections = {path: projection for path, (_, projection) in both.rows}
        if every is not None:
            every.extend(projections.values())
    chosen, omitted = _most_recent(rows, limit)
    if omitted:
        report.note(
            "events",
            f"showing the most recent {limit} events per batch; {omitted} older events omitted",
        )
    if projections is None and chosen:
        try:
            read = await read_many(
                ctx.store,
                [path for path, _ in chosen],
                pj.event_projection,
                "status.events",
                cap=_EVENT_PROJECTION_CAP,
            )
        except StoreError as exc:
            report.note("events", f"{prefix} not readable: {exc.message}", unknown=True)
            return []
        report.absorb("events", read)
        projections = dict(read.rows)
    if projections is None:
        return []
    return [projections[path] for path, _ in chosen if path in projections]


# ---- full status ---------------------------------------------------------


async def _full_status(ctx: Ctx, include_archived: bool, limit: int | None) -> dict[str, Any]:
    now = ctx.clock.now()
    report = _Report()
    claims = await report.scan(ctx, "claims", "claims", pj.claim_digest, "status.claims")
    beats = await report.scan(ctx, "heartbeats", "heartbeats", pj.heartbeat_view, "status.heartbeats")
    batches = await report.scan(ctx, "batches", "batches", pj.batch_digest, "status.batches")

    by_agent: dict[str, Any] = {}
    mismatched: list[str] = []
    for path, _ in beats.unreadable:
        by_agent[path.rsplit("/", 1)[-1].removesuffix(".json")] = pj.HB_UNREADABLE
    for path, view in beats.rows:
        file_agent = path.rsplit("/", 1)[-1].removesuffix(".json")
        if view.mismatched:
            mismatched.append(path)
            by_agent[file_agent] = pj.HB_MISMATCHED
        else:
            by_agent[file_agent] = view
    if mismatched:
        report.note("heartbeats", f"heartbeat agent_id differs from its path: {', '.join(mismatched)}")

    lane_states: dict[str, str] = {}
    for _, view in batches.rows:
        lane_states.update(view.lane_states(by_agent))
    leases: dict[tuple[str, str], Any] = {
        (str(shown["repo"]), str(shown["target"])): held for _, (shown, held) in claims.rows}
    for path, _ in claims.unreadable:  # claims/<owner>/<repo>/<target>.json
        parts = path.removesuffix(".json").split("/")
        if len(parts) == 4:
            leases[(f"{parts[1]}/{parts[2]}", parts[3])] = holders.UNREADABLE
    projected_batches = []
    bad_lanes: list[str] = []
    bad_names: list[str] = []
    for path, view in batches.rows:
        projected_batches.append(pj.batch_projection(path, view, by_agent, lane_states, now, leases))
        bad_lanes.extend(f"{path}#{position}" for position in view.malformed)
        bad_names.extend(view.bad_names)
    _note_lanes(report, bad_names, bad_lanes)

    shown_events = await _recent_events(ctx, report, "events", limit)
    sections: dict[str, Any] = {
        "claims": [projection for _, (projection, _) in claims.rows],
        "heartbeats": [view.projection(now) for _, view in beats.rows],
        "batches": projected_batches,
        "events": shown_events,
    }
    if include_archived:
        archive = await report.scan(ctx, "archive", "archive", pj.archive_projection, "status.archive")
        sections["archive"] = [projection for _, projection in archive.rows]
    sections.update(await _host_limits(ctx, report, None))
    return report.payload(ctx, {"kind": "all"}, **sections)


async def _host_limits(ctx: Ctx, report: _Report, quota_hosts: set[str] | None) -> dict[str, Any]:
    """The optional `host_limits` projection: present only when there is a record — of
    the batch's lanes' quota hosts, in batch scope (agent-coord's key set otherwise).
    Outside the caller's scopes: absent."""
    try:
        shown = await limits.projected(ctx.store, ctx.clock.now(), quota_hosts)
    except Forbidden:
        return {}
    except StoreError as exc:
        report.note("host_limits", f"host limits unreadable: {exc.message}")
        return {}
    return {"host_limits": shown} if shown else {}


def _note_lanes(report: _Report, bad_names: list[str], bad_lanes: list[str]) -> None:
    if bad_names:
        report.note("lanes", f"malformed lane names: {', '.join(bad_names)}")
    if bad_lanes:
        report.note("lanes", f"malformed lane entries: {', '.join(bad_lanes)}")


# ---- target scope --------------------------------------------------------


async def _target_status(ctx: Ctx, repo: str, target: str) -> dict[str, Any]:
    now = ctx.clock.now()
    path = ids.claim_path(repo, target)
    report = _Report()
    report.note("batches", "not checked in target scope")
    report.note("events", "not checked in target scope")
    claims: list[dict[str, Any]] = []
    heartbeats: list[dict[str, Any]] = []
    verdict: dict[str, Any] | None = None
    claim = await _read_object(ctx, report, "claims", path, "claim unreadable")
    if claim is not None:
        claims.append(pj.claim_projection(path, claim))
        holder = claim.get("agent_id")
        if holder is None or holder == "":
            report.note("heartbeats", "claim holder not set")
        elif not isinstance(holder, str) or holder == pj.UNKNOWN:
            # no heartbeat is looked up for these (agent-coord's rule and words)
            report.note("heartbeats", "holder heartbeat not found")
        else:
            beat, beat_record = await _owner_heartbeat_read(ctx, holder)
            if claim.get("status") == "active":
                verdict = _lease_verdict(claim, beat, beat_record, now)
            if isinstance(beat, pj.HeartbeatView):
                heartbeats.append(beat.projection(now))
            elif beat in (pj.HB_UNREADABLE, pj.HB_FORBIDDEN):  # a torn one leaves the claim known: exit 0
                report.note("heartbeats", "holder heartbeat unreadable", unknown=beat == pj.HB_FORBIDDEN)
            elif beat == pj.HB_MISMATCHED:
                report.note("heartbeats", "holder heartbeat mismatched")
            else:
                report.note("heartbeats", "holder heartbeat not found")
    payload = report.payload(
        ctx,
        {"kind": "target", "repo": repo, "target": target},
        claims=claims,
        heartbeats=heartbeats,
        batches=[],
        events=[],
    )
    if verdict is not None:  # ours: what `claim` would decide now (`wait --until-free`)
        payload["lease"] = verdict
    return payload


async def _read_object(
    ctx: Ctx, report: _Report, section: str, path: str, label: str
) -> dict[str, Any] | None:
    """One record that must be a JSON object; unreadable ones are noted (UNKNOWN)."""
    try:
        current = await ctx.store.get(path)
    except InvalidRecord:
        report.note(section, f"{label}: {path}", unknown=True)
        return None
    except Forbidden as exc:  # outside this token's scope: show the rest, result UNKNOWN
        # the store's message names the path (and, for a rejected token, the rotation hint)
        report.note(section, f"{label}: {exc.message}", unknown=True)
        return None
    if current is None:
        return None
    if not isinstance(current.data, dict):
        report.note(section, f"{label}: {path}", unknown=True)
        return None
    return current.data


async def owner_heartbeat(ctx: Ctx, owner: str) -> Any:
    """An owner's heartbeat as a view, or HB_UNREADABLE / HB_FORBIDDEN / HB_MISMATCHED / None."""
    return (await _owner_heartbeat_read(ctx, owner))[0]


async def _owner_heartbeat_read(ctx: Ctx, owner: str) -> tuple[Any, Any]:
    """owner_heartbeat's answer, and the record it read (None when it read none)."""
    try:
        path = ids.heartbeat_path(owner)
    except UsageError:
        return pj.HB_MISSING, None
    try:
        current = await ctx.store.get(path)
    except InvalidRecord:
        return pj.HB_UNREADABLE, None
    except Forbidden:
        return pj.HB_FORBIDDEN, None
    if current is None:
        return pj.HB_MISSING, None
    if not isinstance(current.data, dict):
        return pj.HB_UNREADABLE, current.data
    view = pj.HeartbeatView(path, current.data)
    return (pj.HB_MISMATCHED if view.mismatched else view), current.data


def _lease_verdict(claim: dict[str, Any], beat: Any, record: Any, now: Any) -> dict[str, Any] | None:
    """What `claim` would decide of this active claim now (coord/lease.py), from the holder
    heartbeat status already read; None when it cannot be told (a heartbeat out of scope)."""
    held = try_load(Claim, claim)
    if held is None or beat == pj.HB_FORBIDDEN:
        return None
    parsed = try_load(Heartbeat, record) if isinstance(record, dict) else None
    problem = None if parsed is not None else ("missing" if beat == pj.HB_MISSING else "invalid")
    verdict = lease.judge(held, parsed, problem, now)
    return {"holder": verdict.holder, "liveness": verdict.liveness, "claimable": verdict.takeable,
            "takeover_reason": verdict.takeover, "detail": verdict.detail}


# ---- batch scope ---------------------------------------------------------


async def _batch_status(ctx: Ctx, batch_id: str, limit: int | None) -> dict[str, Any]:
    now = ctx.clock.now()
    path = ids.batch_path(batch_id)
    prefix = ids.events_prefix(batch_id)
    report = _Report()
    report.note("claims", "not checked in batch scope")
    batch = await _read_object(ctx, report, "batches", path, "batch unreadable")
    listed: list[dict[str, Any]] = []  # every event, when the listing carried them
    shown_events = await _recent_events(ctx, report, prefix, limit, listed)

    owners: dict[str, Any] = {}  # owner -> heartbeat outcome, in first-read order

    async def owner_state(owner: str | None) -> Any:
        key = owner or pj.UNKNOWN
        if key not in owners:
            owners[key] = pj.HB_MISSING if key == pj.UNKNOWN else await owner_heartbeat(ctx, key)
        return owners[key]

    projected_batches: list[dict[str, Any]] = []
    if batch is not None:
        own_id = pj.batch_id_of(path, batch)
        lanes = batch.get("lanes") if isinstance(batch.get("lanes"), list) else []
        lane_states: dict[str, str] = {}
        for lane in lanes:
            name = lane_name_of(lane)
            if not isinstance(lane, dict) or name is None or ":" in name:
                continue
            state = await owner_state(lane_owner_of(lane))
            lane_states[f"{own_id}:{name}"] = pj.lane_status(lane, state)
        malformed_refs, unresolved_refs = await _resolve_dependencies(
            ctx, report, lanes, lane_states, owner_state
        )
        unreadable = [o for o, s in owners.items() if s in (pj.HB_UNREADABLE, pj.HB_FORBIDDEN)]
        mismatched = [o for o, s in owners.items() if s == pj.HB_MISMATCHED]
        missing = [o for o, s in owners.items() if s is pj.HB_MISSING]
        if unreadable:
            report.note("heartbeats", f"lane-owner heartbeats unreadable: {', '.join(unreadable)}",
                        unknown=pj.HB_FORBIDDEN in owners.values())
        if mismatched:
            report.note("heartbeats", f"lane-owner heartbeats mismatched: {', '.join(mismatched)}")
        if missing:
            report.note("heartbeats", f"lane-owner heartbeats not found: {', '.join(missing)}")
        view = pj.BatchView(path, batch)
        leases, beats = await _lane_leases(ctx, report, view, owners)
        projected_batches.append(pj.batch_projection(path, view, beats, lane_states, now, leases))
        _note_lanes(report, view.bad_names, [f"{path}#{p}" for p in view.malformed])
        if malformed_refs:
            report.note("dependencies", f"malformed dependency refs: {', '.join(malformed_refs)}")
        if unresolved_refs:
            report.note(
                "unresolved_dependencies", f"unresolved dependency refs: {', '.join(unresolved_refs)}"
            )
    elif "batches" not in report.notes:
        report.note("batches", "batch not found")
    heartbeats = [s.projection(now) for s in owners.values() if isinstance(s, pj.HeartbeatView)]
    # Help/escalation requests without an answer, oldest first (coord.open_requests):
    # an additive key, present only when there is one (agent-coord's key set otherwise).
    pending = await batch_open_requests(
        ctx, prefix, shown_events if limit is None else (listed or None), now)
    return report.payload(
        ctx,
        {"kind": "batch", "batch_id": batch_id},
        claims=[],
        heartbeats=heartbeats,
        batches=projected_batches,
        events=shown_events,
        **({"open_requests": pending} if pending else {}),
        **(await _host_limits(ctx, report, limits.lane_quota_hosts([batch]))),
    )


async def _lane_leases(ctx: Ctx, report: _Report, view: pj.BatchView,
                       owners: dict[str, Any]) -> tuple[dict[tuple[str, str], Any], dict[str, Any]]:
    """The claims of the batch's lane leases (each lane's first target in the manifest's
    repo) and the heartbeats the lane rows read: the owners' plus the holders'."""
    repo = view.extra.get("repo")
    wheres: dict[str, tuple[str, str]] = {}
    for _, _, _, targets, _, _ in view.lanes:
        where = holders.lease_target(repo, targets)
        if where is None:
            continue
        try:
            wheres[ids.claim_path(*where)] = where
        except UsageError:  # a legacy target no claim can name: nobody holds it
            continue
    leases: dict[tuple[str, str], Any] = {}
    beats = dict(owners)
    if not wheres:
        return leases, beats
    try:
        read = await read_many(ctx.store, list(wheres), pj.lease_claim_digest, "status.lease_claims")
    except StoreError as exc:  # never told free: the lanes say unknown
        report.note("lanes", f"lane holders not readable: {exc.message}")
        return dict.fromkeys(wheres.values(), holders.UNREADABLE), beats
    leases.update((wheres[path], holders.UNREADABLE) for path, _ in read.unreadable)
    leases.update((wheres[path], claim) for path, claim in read.rows)
    wanted = {claim.agent_id for claim in leases.values()
              if isinstance(claim, holders.LeaseClaim) and claim.agent_id not in beats}
    paths = {}
    for agent in wanted:
        try:
            paths[ids.heartbeat_path(agent)] = agent
        except UsageError:
            continue
    if paths:
        try:
            found = await read_many(ctx.store, list(paths), pj.heartbeat_view, "status.holder_beats")
        except StoreError:
            return leases, beats  # holders without a heartbeat read: judged on their claims
        beats.update((paths[path], held) for path, held in found.rows if not held.mismatched)
    return leases, beats


async def _resolve_dependencies(
    ctx: Ctx,
    report: _Report,
    lanes: list[Any],
    lane_states: dict[str, str],
    owner_state: Any,
) -> tuple[list[str], list[str]]:
    """Fill lane_states for refs into other batches: read only those batch files
    and the referenced lane owners' heartbeats. Returns (malformed, unresolved)."""
    refs: list[str] = []
    for lane in lanes:
        for ref in lane_dependencies(lane):
            if ref not in refs:
                refs.append(ref)
    other_batches: dict[str, dict[str, Any] | None] = {}
    malformed: list[str] = []
    unresolved: list[str] = []
    for ref in refs:
        if ref in lane_states:
            continue
        parts = split_dependency(ref)
        if parts is None:
            malformed.append(ref)
            continue
        dep_batch, dep_lane = parts
        if dep_batch not in other_batches:
            other_batches[dep_batch] = await _read_object(
                ctx, report, "dependencies", ids.batch_path(dep_batch), "dependency batch unreadable"
            )
        data = other_batches[dep_batch]
        if data is None:
            unresolved.append(ref)
            continue
        dep_lanes = data.get("lanes") if isinstance(data.get("lanes"), list) else []
        match = next((lane for lane in dep_lanes if lane_name_of(lane) == dep_lane), None)
        if not isinstance(match, dict):
            malformed.append(ref)
            continue
        lane_states[ref] = pj.lane_status(match, await owner_state(lane_owner_of(match)))
    return malformed, unresolved
