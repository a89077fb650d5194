"""gc: one retention plan for every backend (spec: the gc section, Archive Schema).

Planning reads the hot families and the archive, and decides per record:

* released/terminal claims, dead or terminal heartbeats and completed batches
  are archived (copied to archive/<path> create-only, then the hot source is
  deleted with CAS) once their hot window has passed;
* events of a terminal lane are compacted into one immutable envelope whose
  path carries an identity digest and a source-generation digest;
* archive envelopes past delete_after expire (CAS delete).

Dry-run and execute run the same plan and the same preflight (1 MiB envelope
cap). A malformed record met while evaluating an eligible action fails the whole
plan naming its path; CAS means a record renewed after planning is never lost.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentcoordd.coord.context import Ctx
from agentcoordd.model import ids
from agentcoordd.model.errors import OperationalError, UsageError
from agentcoordd.model.liveness import DEAD_AFTER_TTL_MULTIPLIER, liveness
from agentcoordd.model.records import (
    ARCHIVE_SCHEMA_VERSION,
    Batch,
    Claim,
    Event,
    Heartbeat,
    LaneClosed,
    load,
    try_load,
)
from agentcoordd.model.status import is_terminal
from agentcoordd.model.timefmt import format_ts, parse_ts
from agentcoordd.store.base import Conflict, Entry, NotFound, list_all

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
    action: str  # archive | compact | expire
    reason: str
    archive_path: str
    eligible_at: str
    source_path: str | None = None
    source_paths: list[str] | None = None
    # execution inputs (not shown): the envelope and the versions to guard
    envelope: dict[str, Any] | None = None
    guards: dict[str, str] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
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


def _days(n: int) -> dt.timedelta:
    return dt.timedelta(days=n)


class _Planner:
    def __init__(self, ctx: Ctx, policy: Policy, now: dt.datetime) -> None:
        self.ctx = ctx
        self.policy = policy
        self.now = now
        self.archived_at = format_ts(now)
        self.delete_after = format_ts(now + _days(policy.archive_days))
        self.actions: list[Action] = []

    def _due(self, eligible: dt.datetime, synthetic: bool) -> bool:
        window = self.policy.synthetic_hot_days if synthetic else self.policy.hot_days
        return self.now >= eligible + _days(window)

    def _envelope(self, path: str, data: dict[str, Any], reason: str) -> dict[str, Any]:
        return {
            "schema_version": ARCHIVE_SCHEMA_VERSION,
            "record_family": "archived_record",
            "source_path": path,
            "reason": reason,
            "synthetic": data.get("synthetic") is True,
            "archived_at": self.archived_at,
            "delete_after": self.delete_after,
            "data": data,
        }

    def _archive(self, entry: Entry, reason: str, eligible: dt.datetime) -> None:
        if not self._due(eligible, entry.data.get("synthetic") is True):
            return
        self.actions.append(
            Action(
                "archive",
                reason,
                ids.archive_path(entry.path),
                format_ts(eligible),
                source_path=entry.path,
                envelope=self._envelope(entry.path, entry.data, reason),
                guards={entry.path: entry.version},
            )
        )

    # ---- hot families ------------------------------------------------------

    def claim(self, entry: Entry) -> None:
        raw = entry.data
        if not isinstance(raw, dict) or raw.get("status") != "released":
            return  # active, unknown or non-object records stay hot, untouched
        record = self._strict(Claim, entry)
        eligible = parse_ts(record.released_at) or parse_ts(record.updated_at)
        if eligible is None:
            raise OperationalError(f"gc: unreadable release time in {entry.path}")
        self._archive(entry, "terminal_claim", eligible)

    def heartbeat(self, entry: Entry) -> None:
        beat = try_load(Heartbeat, entry.data)
        if beat is None:
            return
        updated, expires = parse_ts(beat.updated_at), parse_ts(beat.expires_at)
        if updated is None or expires is None:
            return
        if is_terminal(beat.status):
            self._strict(Heartbeat, entry)
            self._archive(entry, "terminal_heartbeat", updated)
        elif liveness(beat.updated_at, beat.expires_at, self.now) == "dead":
            ttl = max(expires - updated, dt.timedelta(0))
            self._archive(entry, "dead_heartbeat", updated + DEAD_AFTER_TTL_MULTIPLIER * ttl)

    def batch(self, entry: Entry) -> None:
        raw = entry.data
        if not isinstance(raw, dict) or raw.get("status") != "completed":
            return
        record = self._strict(Batch, entry)
        eligible = parse_ts(record.completed_at) or parse_ts(record.updated_at)
        if eligible is None:
            raise OperationalError(f"gc: unreadable completion time in {entry.path}")
        self._archive(entry, "completed_batch", eligible)

    def _strict(self, cls: type, entry: Entry) -> Any:
        """An eligible record must be valid and of a schema version we know."""
        record = load(cls, entry.data, entry.path)
        version = entry.data.get("schema_version")
        if version is not None and version not in (1, 2):
            raise OperationalError(
                f"gc: {entry.path} has schema_version {version}, newer than this tool; upgrade"
            )
        return record

    # ---- events ------------------------------------------------------------

    def events(self, entries: list[Entry]) -> None:
        by_batch: dict[str, list[Entry]] = {}
        for entry in entries:
            parts = entry.path.split("/")
            if len(parts) == 3:
                by_batch.setdefault(parts[1], []).append(entry)
        for batch_dir, batch_entries in sorted(by_batch.items()):
            self._batch_events(batch_dir, batch_entries)

    def _batch_events(self, batch_dir: str, entries: list[Entry]) -> None:
        terminal_lanes: set[tuple[str | None, str | None, str | None]] = set()
        for entry in entries:
            data = entry.data
            if isinstance(data, dict) and data.get("type") == "lane_closed":
                closed = try_load(LaneClosed, data)
                if closed is not None and closed.lane:
                    terminal_lanes.add((closed.lane, closed.repo, closed.target))
        groups: dict[tuple[str | None, str | None, str | None], list[Entry]] = {}
        for entry in entries:
            data = entry.data
            if not isinstance(data, dict):
                continue
            repo, target, lane = data.get("repo"), data.get("target"), data.get("lane")
            if lane is None:
                matches = [k for k in terminal_lanes if k[1] == repo and k[2] == target]
                key = matches[0] if len(matches) == 1 else (None, repo, target)
            else:
                key = (lane, repo, target)
            groups.setdefault(key, []).append(entry)
        for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
            self._group(batch_dir, key, members, key in terminal_lanes)

    def _group(self, batch_dir: str, key: tuple, members: list[Entry], terminal: bool) -> None:
        lane, repo, target = key
        synthetic = all(m.data.get("synthetic") is True for m in members)
        if not terminal and not (synthetic and any(key)):
            return  # non-synthetic orphans and metadata-less legacy events stay
        times = []
        for member in members:
            moment = parse_ts(member.data.get("at"))
            if moment is None:
                if terminal:
                    raise OperationalError(f"gc: event without a readable `at`: {member.path}")
                return
            times.append(moment)
        if not all(self._due(t, synthetic) for t in times):
            return  # a generation waits until every source event passed its window
        for member in members:
            family = LaneClosed if member.data.get("type") == "lane_closed" else Event
            self._strict(family, member)
        ordered = sorted(zip(times, members), key=lambda tm: (tm[0], tm[1].path))
        identity = {k: v for k, v in (("lane", lane), ("repo", repo), ("target", target)) if v is not None}
        sources = sorted(m.path for m in members)
        generation = _digest([[m.path, m.data] for m in sorted(members, key=lambda m: m.path)])
        path = f"archive/events/{batch_dir}/compact-{_digest(identity)}-{generation}.json"
        reason = "terminal_target_events" if terminal else "synthetic_orphan_events"
        envelope = {
            "schema_version": ARCHIVE_SCHEMA_VERSION,
            "record_family": "compacted_events",
            "source_paths": sources,
            "reason": reason,
            "synthetic": synthetic,
            "archived_at": self.archived_at,
            "delete_after": self.delete_after,
            "records": _retained([m.data for _, m in ordered]),
        }
        self.actions.append(
            Action(
                "compact",
                reason,
                ids.state_path(path),
                format_ts(max(times)),
                source_paths=sources,
                envelope=envelope,
                guards={m.path: m.version for m in members},
            )
        )

    # ---- archive expiry ------------------------------------------------------

    def expiry(self, entry: Entry) -> None:
        data = entry.data
        if not isinstance(data, dict):
            return
        expires = parse_ts(data.get("delete_after"))
        if expires is None or self.now < expires:
            return
        self.actions.append(
            Action(
                "expire",
                "archive_expired",
                entry.path,
                format_ts(expires),
                source_path=data.get("source_path") if isinstance(data.get("source_path"), str) else None,
                guards={entry.path: entry.version},
            )
        )


def _retained(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """First, last, every terminal event and real phase transitions."""
    kept: list[dict[str, Any]] = []
    phase = None
    for index, event in enumerate(events):
        current = event.get("phase")
        transition = current is not None and phase is not None and current != phase
        if current is not None:
            phase = current
        if index in (0, len(events) - 1) or event.get("type") == "lane_closed" or transition:
            kept.append(event)
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
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > 36500):
            raise UsageError(f"{name} must be a whole number of days from 0 to 36500")
    policy = Policy(
        DEFAULT_HOT_DAYS if hot_days is None else hot_days,
        DEFAULT_ARCHIVE_DAYS if archive_days is None else archive_days,
        DEFAULT_SYNTHETIC_HOT_DAYS if synthetic_hot_days is None else synthetic_hot_days,
    )
    selected = list(dict.fromkeys(prefixes)) if prefixes else list(HOT_PREFIXES)
    for prefix in selected:
        if prefix not in HOT_PREFIXES:
            raise UsageError(f"invalid --prefix {prefix!r} (allowed: {', '.join(HOT_PREFIXES)})")
    planner = _Planner(ctx, policy, ctx.clock.now())
    visit = {"claims": planner.claim, "heartbeats": planner.heartbeat, "batches": planner.batch}
    for prefix in [p for p in HOT_PREFIXES if p in selected] + ["archive"]:
        page = await list_all(ctx.store, prefix)
        if page.partial:
            raise OperationalError(
                f"gc: the listing of {prefix}/ was filtered by this token's scope; "
                "gc needs read coverage of every selected prefix and archive/"
            )
        if progress:
            progress(f"scanned {prefix}", len(page.entries), len(page.entries))
        if prefix == "events":
            planner.events(page.entries)
        elif prefix == "archive":
            for entry in page.entries:
                planner.expiry(entry)
        else:
            for entry in page.entries:
                visit[prefix](entry)
    actions = sorted(planner.actions, key=lambda a: (a.action == "expire", a.archive_path))
    for action in actions:  # the same preflight for dry-run and execute
        if action.envelope is not None and len(_canonical(action.envelope)) > ENVELOPE_CAP_BYTES:
            raise OperationalError(
                f"gc: archive envelope {action.archive_path} would exceed the 1 MiB cap; "
                "split or reduce the source history before retrying"
            )
    if execute:
        for done, action in enumerate(actions, 1):
            await _apply(ctx, action)
            if progress:
                progress("applied", done, len(actions))
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


async def _apply(ctx: Ctx, action: Action) -> None:
    """Copy before delete; every delete is guarded by the planned version."""
    store = ctx.store
    if action.envelope is not None:
        try:
            await store.create(action.archive_path, action.envelope)
        except Conflict:
            existing = await store.get(action.archive_path)
            if existing is None or not _same_archive(existing.data, action.envelope):
                ctx.warn(f"gc: {action.archive_path} already holds a different record; source kept hot")
                return
    for path, version in action.guards.items():
        try:
            await store.delete(path, version)
        except NotFound:
            continue  # already gone: a converging retry
        except Conflict:
            ctx.warn(f"gc: {path} changed after planning; kept (CAS)")


def _same_archive(stored: Any, planned: dict[str, Any]) -> bool:
    """An identical retry reuses the destination (timestamps aside)."""
    if not isinstance(stored, dict):
        return False
    skip = {"archived_at", "delete_after"}
    return {k: v for k, v in stored.items() if k not in skip} == {
        k: v for k, v in planned.items() if k not in skip
    }
