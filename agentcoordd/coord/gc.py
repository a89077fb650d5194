"""gc: one retention plan for every backend (spec: the gc section, Archive Schema).

Planning reads the hot families and the archive, and decides per record:

* released/terminal claims, dead or terminal heartbeats and completed batches
  are archived (copied to archive/<path> create-only, then the hot source is
  deleted with CAS) once their hot window has passed;
* events of a terminal lane are compacted into one immutable envelope whose
  path carries an identity digest and a source-generation digest;
* archive envelopes past delete_after are deleted (CAS delete).

Dry-run and execute run the same plan and the same preflight (1 MiB envelope
cap). A malformed record met while evaluating an eligible action fails the whole
plan naming its path; CAS means a record renewed after planning is never lost.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Awaitable, Callable
from functools import partial
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import anyio
import msgspec

from agentcoordd.coord.context import Ctx
from agentcoordd.model import ids
from agentcoordd.model.errors import OperationalError, UsageError
from agentcoordd.model.liveness import DEAD_AFTER_TTL_MULTIPLIER, liveness
from agentcoordd.model.records import (
    ARCHIVE_FAMILIES,
    ARCHIVE_SCHEMA_VERSION,
    ARCHIVED_RECORD,
    COMPACTED_EVENTS,
    Event,
    Heartbeat,
    LaneClosed,
    load,
    try_load,
)
from agentcoordd.model.status import LANE_TERMINALS, is_terminal
from agentcoordd.model.timefmt import expiry, format_ts, parse_ts
from agentcoordd.store.base import Conflict, Create, Delete, Get, NotFound, Op, Replace, known, run_singly
from agentcoordd.store.cache import Malformed, scan

DEFAULT_HOT_DAYS = 7
DEFAULT_ARCHIVE_DAYS = 30
DEFAULT_SYNTHETIC_HOT_DAYS = 1
ENVELOPE_CAP_BYTES = 1024 * 1024
HOT_PREFIXES = ("claims", "heartbeats", "batches", "events")

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Policy:
    hot_days: int = DEFAULT_HOT_DAYS
    archive_days: int = DEFAULT_ARCHIVE_DAYS
    synthetic_hot_days: int = DEFAULT_SYNTHETIC_HOT_DAYS


@dataclass
class Action:
    action: str  # archive | replace_archive | compact | delete (an expired archive record)
    reason: str
    archive_path: str
    eligible_at: str
    source_path: str | None = None
    source_paths: list[str] | None = None
    # execution inputs (not shown): the envelope, its preflight size, and the
    # content hash of every source as planned (re-checked before any delete)
    envelope: dict[str, Any] | None = None
    size: int = 0
    expected: dict[str, str] = field(default_factory=dict)
    retained: list[str] = field(default_factory=list)
    # replace_archive: the content hash of the expired archive copy it overwrites
    replaces: str | None = None

    def public(self) -> dict[str, Any]:
        if self.action == "delete":  # agent-coord names the record it deletes source_path
            return {"action": "delete", "eligible_at": self.eligible_at, "reason": self.reason,
                    "source_path": self.archive_path}
        shown: dict[str, Any] = {
            "action": self.action,
            "archive_path": self.archive_path,
            "eligible_at": self.eligible_at,
            "reason": self.reason,
        }
        if self.source_path is not None:
            shown["source_path"] = self.source_path
        if self.source_paths is not None:
            shown["source_paths"] = self.source_paths
        return shown


def _canonical(value: Any) -> bytes:
    """Recursively key-sorted compact JSON: the digest input."""
    return msgspec.json.encode(value, order="sorted")


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()[:16]


def _archive_path(path: str) -> str:
    """archive/<path> for a path the store listed (already validated): only the
    archive length rule can still fail."""
    archived = f"archive/{path}"
    if len(archived.encode("utf-8")) > ids.MAX_ARCHIVE_PATH_BYTES:
        raise OperationalError(f"gc: archive path too long for {path}")
    return archived


def _content(data: Any) -> str:
    return hashlib.sha256(_canonical(data)).hexdigest()[:32]


def _days(n: int) -> dt.timedelta:
    """A retention window; any size is accepted (agent-coord's), capped where a
    timedelta ends (2.7 million years is as good as forever)."""
    return dt.timedelta(days=min(n, 999_999_999))


class EventFacts(NamedTuple):
    """What planning needs of one event; cached per file, so a warm plan over
    100,000 events never re-parses them."""

    type: str | None
    lane: str | None
    repo: str | None
    target: str | None
    at: str | None
    synthetic: bool
    phase: str | None
    closes_lane: bool  # a valid lane_closed naming its lane
    problem: str | None  # why it is not a valid record of its family
    size: int  # canonical JSON length, for the envelope preflight
    content: str  # content hash, for the generation digest and change checks


def event_facts(path: str, data: Any) -> EventFacts:
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    closing = data.get("type") == "lane_closed"
    problem = None
    try:
        record = load(LaneClosed if closing else Event, data, path)
    except OperationalError as exc:
        problem, record = exc.message, None
    version = data.get("schema_version")
    if problem is None and version not in (1, 2):
        problem = f"gc: {path} has schema_version {version}, newer than this tool; upgrade"
    encoded = _canonical(data)

    def text(name: str) -> str | None:
        value = data.get(name)
        return value if isinstance(value, str) else None

    return EventFacts(
        text("type"), text("lane"), text("repo"), text("target"), text("at"),
        data.get("synthetic") is True, text("phase"),
        closing and record is not None and bool(getattr(record, "lane", None)),
        problem, len(encoded), hashlib.sha256(encoded).hexdigest()[:32],
    )


def whole_record(path: str, data: Any) -> Any:
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    return data


class _Planner:
    def __init__(self, ctx: Ctx, policy: Policy, now: dt.datetime) -> None:
        self.ctx = ctx
        self.policy = policy
        self.now = now
        self.archived_at = format_ts(now)
        self.delete_after = expiry(now, policy.archive_days * 86_400)  # clamped at year 9999
        self.actions: list[Action] = []
        self.archives: dict[str, Any] = {}  # archive/ as scanned: path -> record

    def _due(self, eligible: dt.datetime, synthetic: bool) -> bool:
        window = self.policy.synthetic_hot_days if synthetic else self.policy.hot_days
        return self.now - eligible >= _days(window)

    def _envelope(self, path: str, data: dict[str, Any], reason: str) -> dict[str, Any]:
        return {
            "schema_version": ARCHIVE_SCHEMA_VERSION,
            "record_family": ARCHIVED_RECORD,
            "source_path": path,
            "reason": reason,
            "synthetic": data.get("synthetic") is True,
            "archived_at": self.archived_at,
            "delete_after": self.delete_after,
            "data": data,
        }

    def _archive(self, path: str, data: dict[str, Any], reason: str, eligible: dt.datetime) -> None:
        if not self._due(eligible, data.get("synthetic") is True):
            return
        envelope = self._envelope(path, data, reason)
        destination = _archive_path(path)
        action, replaces = "archive", None
        existing = self.archives.get(destination)
        if existing is not None and not _same_archive(existing, envelope) and not _same_archive(
                existing, self._envelope(path, data, "expired_archive_replacement")):
            # agent-coord's rule: an archive copy of an earlier generation is replaced
            # once it has expired; until then the newer source stays hot
            expires = parse_ts(existing.get("delete_after")) if isinstance(existing, dict) else None
            if expires is None or self.now < expires:
                return
            action, reason, replaces = "replace_archive", "expired_archive_replacement", _content(existing)
            envelope = self._envelope(path, data, reason)
        self.actions.append(
            Action(
                action,
                reason,
                destination,
                format_ts(eligible),
                source_path=path,
                envelope=envelope,
                size=len(_canonical(envelope)),
                expected={path: _content(data)},
                replaces=replaces,
            )
        )

    # ---- hot families ------------------------------------------------------

    def claim(self, path: str, raw: dict[str, Any]) -> None:
        if raw.get("status") != "released" and raw.get("terminal") not in LANE_TERMINALS:
            return  # active or unknown records stay hot, untouched
        eligible = _retention_time(raw, path)
        self._known_schema(path, raw)
        self._archive(path, raw, "terminal_claim", eligible)

    def heartbeat(self, path: str, raw: dict[str, Any]) -> None:
        if is_terminal(raw.get("status")):
            eligible = _retention_time(raw, path)
            self._known_schema(path, raw)
            self._archive(path, raw, "terminal_heartbeat", eligible)
            return
        beat = try_load(Heartbeat, raw)
        if beat is None:
            return
        updated, expires = parse_ts(beat.updated_at), parse_ts(beat.expires_at)
        if updated is None or expires is None:
            return
        if liveness(beat.updated_at, beat.expires_at, self.now) == "dead":
            ttl = max(expires - updated, dt.timedelta(0))
            self._known_schema(path, raw)
            self._archive(path, raw, "dead_heartbeat", updated + DEAD_AFTER_TTL_MULTIPLIER * ttl)

    def batch(self, path: str, raw: dict[str, Any]) -> None:
        if raw.get("status") != "completed":
            return
        eligible = _retention_time(raw, path, "completed_at")
        self._known_schema(path, raw)
        self._archive(path, raw, "completed_batch", eligible)

    @staticmethod
    def _known_schema(path: str, raw: dict[str, Any]) -> None:
        """An eligible record is archived as it is, if of a schema version we know."""
        version = raw.get("schema_version")
        if version is not None and version not in (1, 2):
            raise OperationalError(
                f"gc: {path} has schema_version {version}, newer than this tool; upgrade"
            )

    # ---- events ------------------------------------------------------------

    def events(self, rows: list[tuple[str, EventFacts]]) -> None:
        by_batch: dict[str, list[tuple[str, EventFacts]]] = {}
        for path, facts in rows:
            parts = path.split("/")
            if len(parts) == 3:
                by_batch.setdefault(parts[1], []).append((path, facts))
        for batch_dir, members in sorted(by_batch.items()):
            self._batch_events(batch_dir, members)

    def _batch_events(self, batch_dir: str, rows: list[tuple[str, EventFacts]]) -> None:
        terminal_lanes = {(f.lane, f.repo, f.target) for _, f in rows if f.closes_lane}
        by_target: dict[tuple[str | None, str | None], list[tuple]] = {}
        for lane_key in terminal_lanes:
            by_target.setdefault(lane_key[1:], []).append(lane_key)
        groups: dict[tuple[str | None, str | None, str | None], list[tuple[str, EventFacts]]] = {}
        for path, facts in rows:
            if facts.lane is None:
                matches = by_target.get((facts.repo, facts.target), [])
                key = matches[0] if len(matches) == 1 else (None, facts.repo, facts.target)
            else:
                key = (facts.lane, facts.repo, facts.target)
            groups.setdefault(key, []).append((path, facts))
        for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
            self._group(batch_dir, key, members, key in terminal_lanes)

    def _group(self, batch_dir: str, key: tuple, members: list[tuple[str, EventFacts]], terminal: bool) -> None:
        lane, repo, target = key
        synthetic = all(f.synthetic for _, f in members)
        if not terminal and not synthetic:
            return  # non-synthetic orphans stay (synthetic ones go, lane or not: agent-coord)
        times = []
        for path, facts in members:
            moment = parse_ts(facts.at)
            if moment is None:
                if terminal:
                    raise OperationalError(f"gc: event without a readable `at`: {path}")
                return
            times.append(moment)
        if not all(self._due(t, synthetic) for t in times):
            return  # a generation waits until every source event passed its window
        for path, facts in members:
            if facts.problem is not None:
                raise OperationalError(facts.problem if facts.problem.startswith("gc:") else facts.problem)
        ordered = sorted(zip(times, members), key=lambda tm: (tm[0], tm[1][0]))
        identity = {"lane": lane, "repo": repo, "target": target}  # nulls too, as agent-coord's digest
        sources = sorted(path for path, _ in members)
        contents = {path: facts.content for path, facts in members}
        generation = _digest([[path, contents[path]] for path in sources])
        path = f"archive/events/{batch_dir}/compact-{_digest(identity)}-{generation}.json"
        reason = "terminal_target_events" if terminal else "synthetic_orphan_events"
        retained = _retained([(p, f) for _, (p, f) in ordered])
        envelope = {
            "schema_version": ARCHIVE_SCHEMA_VERSION,
            "record_family": COMPACTED_EVENTS,
            "source_paths": sources,
            "reason": reason,
            "synthetic": synthetic,
            "archived_at": self.archived_at,
            "delete_after": self.delete_after,
            "records": [],  # filled from the sources at execute time
        }
        sizes = [f.size for _, f in retained]
        size = len(_canonical(envelope)) + sum(sizes) + max(len(sizes) - 1, 0)
        self.actions.append(
            Action(
                "compact",
                reason,
                ids.state_path(path),
                format_ts(max(times)),
                source_paths=sources,
                envelope=envelope,
                size=size,
                expected=contents,
                retained=[p for p, _ in retained],
            )
        )

    # ---- archive expiry ------------------------------------------------------

    def expiry(self, path: str, data: dict[str, Any]) -> None:
        """An archive record past delete_after is deleted. One whose family or
        delete_after cannot be read stops the run (exit 2), as in agent-coord:
        retention must not guess about what it deletes."""
        if data.get("record_family") not in ARCHIVE_FAMILIES:
            raise OperationalError(f"archive record has unknown family at {path}")
        expires = parse_ts(data.get("delete_after"))
        if expires is None:
            raise OperationalError(f"archive record has invalid delete_after at {path}")
        if self.now < expires:
            return
        self.actions.append(
            Action("delete", "archive_expired", path, format_ts(expires),
                   expected={path: _content(data)}))


def _retention_time(data: dict[str, Any], path: str, preferred: str | None = None) -> dt.datetime:
    """When a record's retention starts: its first timestamp of these (agent-coord's
    order); a record with none, or with an unreadable one, stops the run (exit 2)."""
    names = [preferred] if preferred else []
    names += ["updated_at", "at", "released_at", "completed_at", "expires_at"]
    value = next((data[n] for n in names if data.get(n) is not None), None)
    if value is None:
        raise OperationalError(f"gc record is missing a retention timestamp at {path}")
    moment = parse_ts(value)
    if moment is None:
        raise OperationalError(f"gc record has invalid retention timestamp at {path}: {value}")
    return moment


def _retained(events: list[tuple[str, EventFacts]]) -> list[tuple[str, EventFacts]]:
    """First, last, every terminal event and real phase transitions."""
    kept: list[tuple[str, EventFacts]] = []
    phase = None
    for index, (path, facts) in enumerate(events):
        current = facts.phase
        transition = current is not None and phase is not None and current != phase
        if current is not None:
            phase = current
        if index in (0, len(events) - 1) or facts.type == "lane_closed" or transition:
            kept.append((path, facts))
    return kept


async def gc(
    ctx: Ctx,
    *,
    execute: bool,
    hot_days: int | None = None,
    archive_days: int | None = None,
    synthetic_hot_days: int | None = None,
    prefixes: list[str] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Plan (and with execute=True apply) retention; returns the plan summary."""
    for name, value in (("--hot-days", hot_days), ("--archive-days", archive_days), ("--synthetic-hot-days", synthetic_hot_days)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UsageError(f"{name} must be a whole number of days")
        if value is not None and value < 0:
            raise UsageError(f"{name} must be zero or greater")
    policy = Policy(
        DEFAULT_HOT_DAYS if hot_days is None else hot_days,
        DEFAULT_ARCHIVE_DAYS if archive_days is None else archive_days,
        DEFAULT_SYNTHETIC_HOT_DAYS if synthetic_hot_days is None else synthetic_hot_days,
    )
    selected = list(dict.fromkeys(prefixes)) if prefixes else list(HOT_PREFIXES)
    for prefix in selected:
        if prefix not in HOT_PREFIXES:
            raise UsageError(f"--prefix must be one of: {', '.join(HOT_PREFIXES)}")
    planner = _Planner(ctx, policy, ctx.clock.now())
    visit = {"claims": planner.claim, "heartbeats": planner.heartbeat, "batches": planner.batch}
    # archive/ first: an archive action needs to know the copy already at its destination
    for prefix in ["archive"] + [p for p in HOT_PREFIXES if p in selected]:
        digest, name = (event_facts, "gc-events") if prefix == "events" else (whole_record, "record")
        found = await scan(ctx.store, prefix, digest, name)
        if found.partial:
            raise OperationalError(
                f"gc: the listing of {prefix}/ was filtered by this token's scope; "
                "gc needs read coverage of every selected prefix and archive/"
            )
        for path, reason in found.unreadable:
            ctx.warn(f"gc: {path} is not a readable record ({reason}); left untouched")
        if progress:
            progress(f"scanned {prefix}", len(found.rows), len(found.rows))
        if prefix == "events":
            planner.events(found.rows)
        elif prefix == "archive":
            for path, data in found.rows:
                planner.expiry(path, data)
                planner.archives[path] = data
        else:
            for path, data in found.rows:
                visit[prefix](path, data)
    # an expired archive copy that an action replaces is not also deleted (agent-coord)
    destinations = {a.archive_path for a in planner.actions if a.action != "delete"}
    actions = sorted((a for a in planner.actions if a.action != "delete" or a.archive_path not in destinations),
                     key=lambda a: (a.action == "delete", a.archive_path))
    for action in actions:  # the same preflight for dry-run and execute
        if action.size > ENVELOPE_CAP_BYTES:
            raise OperationalError(
                f"gc: archive envelope {action.archive_path} would exceed the 1 MiB cap; "
                "split or reduce the source history before retrying"
            )
    if execute:
        await _apply_all(ctx, actions, progress)
    return {
        "actions": [a.public() for a in actions],
        "mode": "execute" if execute else "dry-run",
        "policy": {
            "archive_days": policy.archive_days,
            "hot_days": policy.hot_days,
            "synthetic_hot_days": policy.synthetic_hot_days,
        },
        "prefixes": [p for p in HOT_PREFIXES if p in selected],
    }


# A chunk of actions is applied together: each step (read the sources, create
# the archives, delete the sources) is one batch — one round trip (HTTP), one
# round with one fsync per directory (local files) — or, where a store has no
# batches (etcd), its single calls a few at a time. This many chunks run at
# once, so one's disk waits overlap another's work, and a local store's round
# threads (store/rounds.py) take more than one chunk per round, one directory
# fsync for them all; 8 x 4 single calls fit an etcd store's connection pool.
BATCH_ACTIONS = 32
PARALLEL_CHUNKS = 8
SINGLE_CALLS_PER_CHUNK = 4

T = TypeVar("T")
Run = Callable[[list[Op]], Awaitable[list[Any]]]


async def _apply_all(ctx: Ctx, actions: list[Action], progress: Progress | None) -> None:
    """Every archive first, then the sources they copied, then the expiries.

    All copies are durable before any source is deleted (copy-before-delete
    across the whole run, not only per chunk), and no archive is created while
    sources are being deleted: on an ext4 without a journal each new inode's
    allocation skips every recently freed one, so interleaving the two made
    the copies pay for the deletes (gc execute of the 21,600-action root on a
    fresh such filesystem: 17.2 s interleaved, 13.0-14.3 s in this order). A
    delete still creates its record's lock file when there is none; creating
    them all before the first delete was measured and bought nothing. An
    action counts as applied in the progress once its archive is written; a
    run cut short between the steps converges on the next (the archive is found
    identical, the source deleted then).
    """
    done = 0
    batch = ctx.store.capabilities.batch
    run: Run = batch.run_batch if batch is not None else partial(run_singly, ctx.store, concurrency=SINGLE_CALLS_PER_CHUNK)
    limiter = anyio.CapacityLimiter(PARALLEL_CHUNKS)
    copied: list[Delete] = []  # the sources whose archives are written

    def applied(chunk: list[Action]) -> None:
        nonlocal done
        done += len(chunk)
        if progress:
            progress("applied", done, len(actions))

    async def copy(chunk: list[Action]) -> None:
        async with limiter:
            copied.extend(await _copy(ctx, chunk, run))
        applied(chunk)

    async def delete(ops: list[Delete]) -> None:
        async with limiter:
            await _delete(ctx, ops, run)

    async def expire(chunk: list[Action]) -> None:
        async with limiter:
            await _delete(ctx, await _copy(ctx, chunk, run), run)
        applied(chunk)

    chunks = _chunks(actions, BATCH_ACTIONS)
    await _each(copy, [chunk for chunk in chunks if chunk[0].action != "delete"])
    await _each(delete, [copied[i:i + BATCH_ACTIONS] for i in range(0, len(copied), BATCH_ACTIONS)])
    await _each(expire, [chunk for chunk in chunks if chunk[0].action == "delete"])


async def _each(step: Callable[[T], Awaitable[None]], parts: list[T]) -> None:
    """`step` on every part at once (the limiter inside bounds them); the first error."""
    try:
        async with anyio.create_task_group() as tg:
            for part in parts:
                tg.start_soon(step, part)
    except BaseExceptionGroup as group:
        raise _first(group) from None


def _first(group: BaseExceptionGroup) -> BaseException:
    """The first real error of a task group (the one a sequential run would raise)."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _chunks(actions: list[Action], size: int) -> list[list[Action]]:
    """Consecutive runs of at most `size` actions that name no path twice, expiries
    (deletes) never together with the rest: they stay after every copy."""
    chunks: list[list[Action]] = []
    seen: set[str] = set()
    for action in actions:
        paths = {action.archive_path, *action.expected}
        last = chunks[-1] if chunks else None
        if last is None or len(last) >= size or paths & seen or \
                (last[-1].action == "delete") != (action.action == "delete"):
            chunks.append([])
            seen = set()
        chunks[-1].append(action)
        seen |= paths
    return chunks


async def _copy(ctx: Ctx, chunk: list[Action], run: Run) -> list[Delete]:
    """Write the chunk's archives; the deletes of their sources, each guarded by the
    version read here (an expiry has no archive: just its delete).

    Each source is re-read first: content that changed since planning is left
    alone (it is no longer what the plan archived), and the delete's CAS guard
    protects against a change between this read and the delete.
    """
    sources = [path for action in chunk for path in action.expected]
    sources += [action.archive_path for action in chunk if action.replaces is not None]
    read = dict(zip(sources, await run([Get(path) for path in sources]), strict=True))
    ready: list[tuple[Action, dict[str, str], dict[str, Any] | None]] = []
    replaced_versions: dict[str, str] = {}
    for action in chunk:
        if action.replaces is not None:
            copy = known(read[action.archive_path])
            if copy is None or _content(copy.data) != action.replaces:
                ctx.warn(f"gc: {action.archive_path} changed after planning; source kept hot")
                continue
            replaced_versions[action.archive_path] = copy.version
        versions: dict[str, str] = {}
        records: dict[str, Any] = {}
        for path, content in action.expected.items():
            current = known(read[path])
            if current is None:
                if action.action == "compact" and path not in action.retained:
                    continue  # a source a previous, interrupted run already deleted
                ctx.warn(f"gc: {path} disappeared after planning; skipped {action.archive_path}")
                break
            if _content(current.data) != content:
                ctx.warn(f"gc: {path} changed after planning; kept (CAS)")
                break
            versions[path] = current.version
            records[path] = current.data
        else:
            envelope = None
            if action.envelope is not None:
                envelope = dict(action.envelope)
                if action.action == "compact":
                    envelope["records"] = [records[p] for p in action.retained]
            ready.append((action, versions, envelope))
    copies = [(action, envelope) for action, _, envelope in ready if envelope is not None]
    written = await run([Create(action.archive_path, envelope) if action.replaces is None
                         else Replace(action.archive_path, envelope, replaced_versions[action.archive_path])
                         for action, envelope in copies])
    clashes = []
    for (action, envelope), outcome in zip(copies, written, strict=True):
        if not isinstance(outcome, Conflict):
            known(outcome)
            continue
        clashes.append((action, envelope))
    existing = await run([Get(action.archive_path) for action, _ in clashes])
    refused = set()
    for (action, envelope), outcome in zip(clashes, existing, strict=True):
        current = known(outcome)
        if current is None or not _same_archive(current.data, envelope):
            ctx.warn(f"gc: {action.archive_path} already holds a different record; source kept hot")
            refused.add(action.archive_path)
    return [Delete(path, version) for action, versions, _ in ready
            if action.archive_path not in refused for path, version in versions.items()]


async def _delete(ctx: Ctx, deletes: list[Delete], run: Run) -> None:
    for op, outcome in zip(deletes, await run(deletes), strict=True):
        if isinstance(outcome, NotFound):
            continue  # already gone: a converging retry
        if isinstance(outcome, Conflict):
            ctx.warn(f"gc: {op.path} changed after planning; kept (CAS)")
            continue
        known(outcome)


def _same_archive(stored: Any, planned: dict[str, Any]) -> bool:
    """An identical retry reuses the destination (timestamps aside)."""
    if not isinstance(stored, dict):
        return False
    skip = {"archived_at", "delete_after"}
    return {k: v for k, v in stored.items() if k not in skip} == {
        k: v for k, v in planned.items() if k not in skip
    }
