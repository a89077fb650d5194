"""usage record: per-model token and cost reports, kept on the batch manifest.

A report is one usage record v1 (schema/state/v1/usage/), keyed by
(workspace, repo, batch_id, lane_name, agent_id, target, model). Records live
in the batch manifest's `usage` array — the contract's embeddable usage
status fragment — so they reach every backend through the one record every
backend already stores, and gc keeps or archives them exactly with their
batch (docs/compat.md#batch-records-on-the-manifest). A report for a key
already present replaces it (a later report supersedes an earlier one).

A metric the reporter does not know is stored as null and stays unknown in
every aggregate (`usage_totals`, model/foundation/usage.py `tiles`): never a fabricated zero.
"""

from __future__ import annotations

from typing import Any

from agentcoordd.coord.batches import update_registered
from agentcoordd.coord.common import text_field
from agentcoordd.coord.context import Ctx
from agentcoordd.model import ids
from agentcoordd.model.dependencies import lane_name_of
from agentcoordd.model.errors import UsageError
from agentcoordd.model.foundation import usage as contract
from agentcoordd.model.timefmt import format_ts
from agentcoordd.model.validation import contract_error

MANIFEST_FIELD = "usage"


def _batch_lane_names(manifest: dict[str, Any]) -> set[str]:
    lanes = manifest.get("lanes")
    return {n for n in (lane_name_of(lane) for lane in lanes) if n} if isinstance(lanes, list) else set()


async def record_usage(
    ctx: Ctx, *, batch_id: str, lane: str, agent_id: str, repo: str, target: str, model: str,
    input_tokens: int | None = None, output_tokens: int | None = None, cost: float | None = None,
    workspace: str = "default",
) -> dict[str, Any]:
    """Upsert one usage record on batch `batch_id`; returns {batch_id, path, record, replaced}."""
    ids.batch_id(batch_id)
    ids.agent_id(agent_id)
    ids.repo(repo)
    for name, value in (("lane", lane), ("target", target), ("model", model), ("workspace", workspace)):
        text_field(name, value, required=True)
    record: dict[str, Any] = {
        "schema_version": 1,
        "workspace": workspace,
        "repo": repo,
        "target": target,
        "batch_id": batch_id,
        "lane_name": lane,
        "agent_id": agent_id,
        "model": model,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost": cost,
        "currency": "USD",
        "reported_at": format_ts(ctx.clock.now()),
    }
    error = contract_error("usage", record, "usage record")
    if error is not None:
        raise error
    key = tuple(record[f] for f in contract.LOGICAL_KEY)

    def change(manifest: dict[str, Any]) -> bool:
        if lane not in _batch_lane_names(manifest):
            raise UsageError(f"batch {batch_id} has no lane {lane}")
        held = manifest.get(MANIFEST_FIELD)
        rows = [r for r in held if isinstance(r, dict)] if isinstance(held, list) else []
        kept = [r for r in rows if tuple(r.get(f) for f in contract.LOGICAL_KEY) != key]
        manifest[MANIFEST_FIELD] = [*kept, record]
        return len(kept) < len(rows)

    replaced = await update_registered(ctx, batch_id, change)
    path = ids.batch_path(batch_id)
    return {"batch_id": batch_id, "path": path, "record": record, "replaced": replaced}

