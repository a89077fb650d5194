"""heartbeat: upsert heartbeats/<agent-id>.json, the liveness source of claims."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agentcoordd.coord.cas import Put, cas_update
from agentcoordd.coord.common import metadata_fields, positive_ttl, text_field
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.events import emit, lifecycle_fields
from agentcoordd.model import ids
from agentcoordd.model.errors import UsageError
from agentcoordd.model.identity import stamp_attribution
from agentcoordd.model.records import SCHEMA_VERSION, Heartbeat, Metadata, load
from agentcoordd.model.status import DEFAULT_HEARTBEAT_STATUS, normalize_status
from agentcoordd.model.timefmt import expiry, format_ts
from agentcoordd.store.base import Versioned

DEFAULT_HEARTBEAT_TTL = 15 * 60
PHASE_EVENT_FIELDS = ("agent_id", "repo", "target", "branch", "synthetic", "synthetic_kind")


async def heartbeat(
    ctx: Ctx,
    *,
    agent_id: str,
    repo: str | None = None,
    target: str | None = None,
    batch_id: str | None = None,
    branch: str | None = None,
    status: str | None = None,
    ttl: int | None = None,
    meta: Metadata = Metadata(),
) -> dict[str, Any]:
    """Write the agent's heartbeat; emit phase.changed on a real phase transition."""
    path = ids.heartbeat_path(agent_id)
    if repo is not None:
        ids.repo_ref(repo)
    if target is not None:
        if repo is None:
            raise UsageError("--target requires --repo")
        ids.claim_path(repo, target)
    if batch_id is not None:
        ids.batch_id(batch_id)
    text_field("branch", branch)
    ttl = positive_ttl(ttl, DEFAULT_HEARTBEAT_TTL)
    fields = metadata_fields(meta)
    for name, value in (("repo", repo), ("target", target), ("batch_id", batch_id), ("branch", branch)):
        if value is not None:
            fields[name] = value
    given = text_field("status", status)
    normalized = normalize_status(DEFAULT_HEARTBEAT_STATUS if given is None else given)
    if normalized.warning:
        ctx.warn(normalized.warning)

    async def decide(current: Versioned | None) -> Put:
        now = ctx.clock.now()
        record: dict[str, Any] = dict(current.data) if current is not None else {}
        if current is not None:
            load(Heartbeat, current.data, path)
        previous_phase = record.get("phase")
        record.update(schema_version=SCHEMA_VERSION, agent_id=agent_id, **fields)
        record["status"] = normalized.status
        record.pop("status_raw", None)
        if normalized.status_raw is not None:
            record["status_raw"] = normalized.status_raw
        record["updated_at"] = format_ts(now)
        record["expires_at"] = expiry(now, ttl)
        record = stamp_attribution(record, ctx.identity)
        load(Heartbeat, record, path)
        return Put(record, (record, previous_phase))

    record, previous_phase = await cas_update(ctx.store, path, decide)
    phase = fields.get("phase")
    if phase is not None and previous_phase and previous_phase != phase:
        await emit(
            ctx,
            record.get("batch_id"),
            "phase.changed",
            {
                **lifecycle_fields(record, PHASE_EVENT_FIELDS),
                "message": f"phase {previous_phase} -> {phase}",
                "previous_phase": previous_phase,
                "phase": phase,
            },
        )
    return {"path": path, "heartbeat": record}
