"""Host limits at run time (schema/state/v1/host-limit.schema.json, docs/capacity.md).

A usage-limit record is keyed by (workspace, machine, quota_host, scope) and
stored at `host_limits/<ws>/<machine>/<quota_host>/<scope>.json`; the machine is
the caller's resolved machine id. `report` makes it active (a known reset time,
or an unknown one), `clear` makes it cleared; an active record whose resets_at
has passed stops counting by itself (readers decide from the record:
model.foundation.host_limit.is_effective), so no writer is needed at reset.

Consumers: `ready`/`claim --next`/`wait --until-ready` treat a ready lane whose
manifest entry carries a matching `quota_host` as blocked on the limit (the
contract matches on workspace, machine and quota_host: the caller's machine);
`reserve` refuses a lane whose quota host is limited for the planner's machine;
`status` and `health` project the records.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from agentcoordd.coord.cas import Put, cas_update
from agentcoordd.coord.context import Ctx
from agentcoordd.model import ids
from agentcoordd.model.errors import UsageError
from agentcoordd.model.foundation.host_limit import (
    HostLimit,
    QuotaId,
    canonical_quota_host,
    is_effective,
)
from agentcoordd.model.timefmt import format_ts, parse_ts
from agentcoordd.store.base import Store

DEFAULT_WORKSPACE = "default"
SOURCES = ("manual", "host-message", "hook", "probe")


def limit_path(workspace: str, machine: str, quota_host: str, scope: str) -> str:
    return ids.admission_path("host_limits", workspace, machine, quota_host, scope)


def _quota_id(raw: str, what: str) -> str:
    value = canonical_quota_host(raw)
    try:
        return msgspec.convert(value, QuotaId)
    except msgspec.ValidationError:
        raise UsageError(f"invalid {what}: {raw!r} (a canonical pool id: lowercase letters, "
                         "digits, . _ -; no scheme, port or path)") from None


def _machine(ctx: Ctx) -> str:
    machine = ctx.identity.machine_id
    if machine is None:
        raise UsageError("a host limit is recorded for this machine: set AGENT_COORD_MACHINE_ID")
    return machine


async def report(ctx: Ctx, *, workspace: str, quota_host: str, scope: str,
                 resets_at: str | None, source: str = "manual") -> dict[str, Any]:
    """Record (or re-record) an active limit of the caller's machine on `quota_host`."""
    if source not in SOURCES:
        raise UsageError(f"invalid --source {source!r} (one of {', '.join(SOURCES)})")
    now = ctx.clock.now()
    record: dict[str, Any] = {
        "schema_version": 1, "workspace": ids.workspace_id(workspace), "machine": _machine(ctx),
        "quota_host": _quota_id(quota_host, "quota host"), "scope": _quota_id(scope, "scope"),
        "status": "active", "observed_at": format_ts(now), "resets_at": None, "source": source}
    if resets_at is not None:
        reset = parse_ts(resets_at)
        if reset is None:
            raise UsageError(f"invalid --resets-at {resets_at!r} (an RFC 3339 time with a zone, "
                             "e.g. 2026-08-04T00:00:00Z)")
        if reset <= now:
            raise UsageError(f"--resets-at {resets_at} is not in the future: nothing to record")
        record["resets_at"] = format_ts(reset)
    msgspec.convert(record, HostLimit)
    path = limit_path(workspace, record["machine"], record["quota_host"], record["scope"])
    return await cas_update(ctx.store, path, lambda _current: Put(record, {**record, "path": path}))


async def clear(ctx: Ctx, *, workspace: str, quota_host: str, scope: str) -> dict[str, Any]:
    """Mark the caller's machine's record cleared (kept, with cleared_at, as the contract says)."""
    machine = _machine(ctx)
    path = limit_path(workspace, machine, _quota_id(quota_host, "quota host"),
                      _quota_id(scope, "scope"))
    now = format_ts(ctx.clock.now())

    def cleared(current: Any) -> Put:
        if current is None:
            raise UsageError(f"no host limit recorded at {path}")
        record = {**current.data, "status": "cleared", "cleared_at": now}
        msgspec.convert(record, HostLimit)
        return Put(record, {**record, "path": path})

    return await cas_update(ctx.store, path, cleared)


async def records(store: Store, workspace: str, machine: str | None = None) -> list[HostLimit]:
    """Every valid host-limit record of the workspace (of one machine, given one). An
    invalid record is not a limit anyone can act on: it is skipped, not fatal."""
    prefix = ids.admission_prefix("host_limits", workspace)
    if machine is not None:
        prefix = f"{prefix}/{ids.workspace_id(machine)}"
    found, cursor = [], None
    while True:
        page = await store.list(prefix, cursor=cursor)
        for entry in page.entries:
            try:
                found.append(msgspec.convert(entry.data, HostLimit))
            except (msgspec.ValidationError, ValueError):
                continue
        cursor = page.next_cursor
        if not cursor:
            return found


def projection(limit: HostLimit, now: dt.datetime) -> dict[str, Any]:
    """A record as `status`/`limit list` show it: plus whether it counts now."""
    return {**msgspec.to_builtins(limit), "effective": is_effective(limit, now)}


async def projected(store: Store, now: dt.datetime, quota_hosts: set[str] | None = None,
                    *, effective_only: bool = False) -> list[dict[str, Any]]:
    """The contract's optional `host_limits` status projection of the self-hosted
    workspace: every record (those of `quota_hosts`, given them) plus `effective` now."""
    if quota_hosts is not None and not quota_hosts:
        return []
    shown = [projection(r, now) for r in await records(store, DEFAULT_WORKSPACE)
             if quota_hosts is None or r.quota_host in quota_hosts]
    return [row for row in shown if row["effective"]] if effective_only else shown


def lane_quota_hosts(manifests: list[Any]) -> set[str]:
    """The quota hosts the lanes of these manifests name."""
    found = set()
    for manifest in manifests:
        lanes = manifest.get("lanes") if isinstance(manifest, dict) else None
        for lane in lanes if isinstance(lanes, list) else []:
            if isinstance(lane, dict) and isinstance(lane.get("quota_host"), str):
                found.add(canonical_quota_host(lane["quota_host"]))
    return found


async def list_limits(ctx: Ctx, *, workspace: str) -> dict[str, Any]:
    now = ctx.clock.now()
    return {"workspace": workspace, "as_of": format_ts(now),
            "host_limits": [projection(r, now) for r in await records(ctx.store, workspace)]}


async def effective_for(store: Store, workspace: str, machine: str | None,
                        now: dt.datetime) -> dict[str, HostLimit]:
    """quota_host -> the effective record that blocks it for `machine` (the one resetting
    last; an unknown reset outranks every known one)."""
    if machine is None:
        return {}
    out: dict[str, HostLimit] = {}
    for limit in await records(store, workspace, machine):
        if not is_effective(limit, now):
            continue
        held = out.get(limit.quota_host)
        if held is None or _until(limit) > _until(held):
            out[limit.quota_host] = limit
    return out


def _until(limit: HostLimit) -> dt.datetime:
    reset = parse_ts(limit.resets_at) if limit.resets_at is not None else None
    return reset or dt.datetime.max.replace(tzinfo=dt.timezone.utc)


def blocked_by(limit: HostLimit) -> dict[str, Any]:
    """What a blocked lane says about the limit: which record, until when."""
    return {"quota_host": limit.quota_host, "scope": limit.scope, "machine": limit.machine,
            "resets_at": limit.resets_at,
            "path": limit_path(limit.workspace, limit.machine, limit.quota_host, limit.scope)}


def limit_words(limit: HostLimit) -> str:
    until = f"until {limit.resets_at}" if limit.resets_at is not None else "until cleared (reset unknown)"
    return f"host limit {limit.quota_host}/{limit.scope} on {limit.machine} {until}"
