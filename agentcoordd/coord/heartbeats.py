"""heartbeat: upsert heartbeats/<agent-id>.json, the liveness source of claims."""

from __future__ import annotations

from typing import Any

from agentcoordd.coord.cas import Put, cas_update
from agentcoordd.coord import lease
from agentcoordd.coord.batches import lane_entry_for_target, lane_for_target, lane_name_of
from agentcoordd.coord.common import metadata_fields, text_field
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.events import emit, lifecycle_fields
from agentcoordd.model import ids
from agentcoordd.model.identity import stamp_attribution
from agentcoordd.model.records import SCHEMA_VERSION, Heartbeat, Metadata, load, try_load
from agentcoordd.model.status import DEFAULT_HEARTBEAT_STATUS, normalize_status
from agentcoordd.model.timefmt import expiry, format_ts
from agentcoordd.store.base import Versioned

TOKEN_LIMIT_PAUSE = "token_limit_pause"  # the telemetry contract's working status

DEFAULT_HEARTBEAT_TTL = 15 * 60
LANE_FIELDS = ("repo", "target", "batch_id", "branch")
# What a beat on the same lane keeps of the stored heartbeat (agent-coord's list); a beat
# naming another lane keeps only the repo/target it did not change.
SAME_LANE_KEEPS = (
    "repo", "target", "batch_id", "branch", "thread_handle", "chat_handle", "host", "machine_id",
    "session_id", "session_source", "pr_url", "dashboard_url", "operator", "phase", "generation",
    "instance_id", "synthetic", "synthetic_kind",
)
PHASE_EVENT_FIELDS = ("agent_id", "repo", "target", "branch", *Metadata.__struct_fields__)


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
    fencing_token: int | None = None,
) -> dict[str, Any]:
    """Write the agent's heartbeat; emit phase.changed on a real phase transition.
    With `fencing_token` it is written only while that grant holds repo/target
    (else exit 3, nothing written).

    repo, target, batch and branch are what the agent says it works on, stored as
    given (agent-coord validates none of them; a phase event for an unusable batch
    id is a warning)."""
    path = ids.heartbeat_path(agent_id)
    for name, value in (("repo", repo), ("target", target), ("batch_id", batch_id), ("branch", branch)):
        text_field(name, value)
    # the status is normalized (and warned about) before the TTL is checked, as in
    # agent-coord: a call refused for its TTL still says its status is not canonical
    given = text_field("status", status)
    normalized = normalize_status(DEFAULT_HEARTBEAT_STATUS if given is None else given)
    if normalized.warning:
        ctx.warn(normalized.warning)
    ttl = lease.bounded_ttl(ttl, DEFAULT_HEARTBEAT_TTL, ctx.lease)
    meta_fields = metadata_fields(meta)
    lane = {k: v for k, v in zip(LANE_FIELDS, (repo, target, batch_id, branch)) if v is not None}
    await lease.check_fencing_token(ctx, repo, target, fencing_token)

    def decide(current: Versioned | None) -> Put:  # plain: read and write in one round
        now = ctx.clock.now()
        # The agent's own record: one that is not a valid heartbeat ({}, "str", 42)
        # is overwritten, as agent-coord does; nothing of it is kept.
        stored: dict[str, Any] = {}
        if current is not None and try_load(Heartbeat, current.data) is not None:
            stored = current.data
        record = stamp_attribution({
            **_kept(stored, lane),
            "schema_version": SCHEMA_VERSION, "agent_id": agent_id, **lane,
            "status": normalized.status,
            **({"status_raw": normalized.status_raw} if normalized.status_raw is not None else {}),
            "updated_at": format_ts(now), "expires_at": expiry(now, ttl),
            **meta_fields,
        }, ctx.identity)
        load(Heartbeat, record, path)
        return Put(record, (record, stored))

    record, stored = await cas_update(ctx.store, path, decide)
    phase = meta_fields.get("phase")
    before = stored.get("phase")
    if (phase is not None and before and before != phase
            and all(str(stored.get(k, "")) == v for k, v in lane.items() if k != "branch")):
        fields = {**{k: stored[k] for k in PHASE_EVENT_FIELDS if stored.get(k) is not None},
                  **lifecycle_fields(record, PHASE_EVENT_FIELDS)}
        batch = batch_id or stored.get("batch_id")
        # the lane whose phase changed, when the registered batch names one for the target
        lane_name = await lane_for_target(ctx, batch, str(fields["target"])) \
            if batch and fields.get("target") is not None else None
        await emit(ctx, batch, "phase.changed", {
            **fields, **({"lane": lane_name} if lane_name else {}),
            "previous_phase": before, "message": f"phase {before} -> {phase}"})
    if normalized.status == TOKEN_LIMIT_PAUSE:
        await _offer_limit_report(ctx, record)
    return {"path": path, "heartbeat": record}


async def _offer_limit_report(ctx: Ctx, record: dict[str, Any]) -> None:
    """A pause for a provider's usage limit on a lane that names its quota pool: say how
    to record the limit (docs/capacity.md). Nothing is recorded for the agent: the
    contract keeps provider facts UNKNOWN until someone reports them."""
    batch, target = record.get("batch_id"), record.get("target")
    if not isinstance(batch, str) or target is None:
        return
    lane = await lane_entry_for_target(ctx, batch, str(target))
    quota = lane.get("quota_host") if lane is not None else None
    if isinstance(quota, str) and quota:
        ctx.warn(f"lane {lane_name_of(lane)} of {batch} uses quota host {quota}: if its usage "
                 f"limit is reached, record it so no lane here is handed work until the reset: "
                 f"agentcoordctl limit report --quota-host {quota} --scope SCOPE "
                 "(--resets-at TIME | --reset-unknown)")


def _kept(stored: dict[str, Any], lane: dict[str, str]) -> dict[str, Any]:
    """The stored fields a beat carries forward: all of SAME_LANE_KEEPS while the lane
    fields given match (or were unset); else the repo (and its target) not re-given."""
    changed = {k for k, v in lane.items() if stored.get(k, _ABSENT) != v}
    if "repo" in lane and "target" not in lane and "target" in stored:
        changed.add("target")  # a new repo without a target: the old target is not its
    if not stored or not changed:
        names: tuple[str, ...] = SAME_LANE_KEEPS
    else:
        names = tuple(n for n, keep in (("repo", "repo" not in changed),
                                        ("target", not {"repo", "target"} & changed)) if keep)
    return {k: stored[k] for k in names if stored.get(k) is not None}


_ABSENT = object()
