"""batch block / unblock: the structured blocker of a batch (batch blocker v1).

`block` stores the Blocker panel payload (message, decisions, optional
recommendedReply) as the manifest's `blocker` field — the record is keyed by
(workspace, batch_id) like the batch itself (docs/compat.md#batch-records-on-the-manifest)
— and appends a `batch.blocked` event, which notifies like a help request.
Blocking a batch that is already blocked replaces its blocker.

`unblock` is the operator's answer: the decision chosen (one of the blocker's
decisions, when given), by whom (the daemon's stamp: machine and agent id) and
when. It removes `blocker`, keeps the answer as `blocker_resolution` and
appends `batch.unblocked`. Unblocking a batch with no blocker is exit 1.
"""

from __future__ import annotations

from typing import Any

from agentcoordd.coord import trust
from agentcoordd.coord.batches import update_registered
from agentcoordd.coord.common import text_field
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.events import write_event
from agentcoordd.model import ids
from agentcoordd.model.errors import UsageError
from agentcoordd.model.timefmt import format_ts
from agentcoordd.model.validation import contract_error

BLOCKED = "batch.blocked"
UNBLOCKED = "batch.unblocked"
BLOCKER_FIELD = "blocker"
RESOLUTION_FIELD = "blocker_resolution"


def envelope(batch_id: str, blocker: dict[str, Any], workspace: str = "default") -> dict[str, Any]:
    """The batch blocker v1 record of a stored blocker (what `validate` checks)."""
    return {"schema_version": 1, "workspace": workspace, "batch_id": batch_id, "blocker": blocker}


async def block(ctx: Ctx, *, batch_id: str, message: str, decisions: list[str],
                recommended_reply: str | None = None, agent_id: str | None = None) -> dict[str, Any]:
    ids.batch_id(batch_id)
    text_field("message", message)
    blocker: dict[str, Any] = {"message": message, "decisions": list(decisions)}
    if recommended_reply is not None:
        blocker["recommendedReply"] = recommended_reply
    record = envelope(batch_id, blocker)
    error = contract_error("batch_blocker", record, "batch blocker")
    if error is not None:
        raise error

    def change(manifest: dict[str, Any]) -> str | None:
        repo = manifest.get("repo")
        manifest[BLOCKER_FIELD] = blocker
        manifest.pop(RESOLUTION_FIELD, None)  # a new blocker: the last answer is history
        return repo if isinstance(repo, str) else None

    repo = await update_registered(ctx, batch_id, change)
    fields = {"type": BLOCKED, "status": "blocked", "message": message,
              "decisions": list(decisions), **({"repo": repo} if repo else {}),
              **({"agent_id": agent_id} if agent_id else {}),
              **({"recommended_reply": recommended_reply} if recommended_reply is not None else {})}
    written = await write_event(ctx, batch_id, fields, queue_on_failure=True)
    return {"action": "blocked", "batch_id": batch_id, "record": record, **(written or {})}


async def unblock(ctx: Ctx, *, batch_id: str, decision: str | None = None,
                  message: str | None = None, agent_id: str | None = None) -> dict[str, Any]:
    ids.batch_id(batch_id)
    text_field("decision", decision)
    text_field("message", message)
    at = format_ts(ctx.clock.now())
    by = trust.stamp(ctx.identity, agent_id)

    def change(manifest: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        held = manifest.get(BLOCKER_FIELD)
        if not isinstance(held, dict):
            raise UsageError(f"batch {batch_id} is not blocked")
        choices = held.get("decisions") if isinstance(held.get("decisions"), list) else []
        if decision is not None and decision not in choices:
            raise UsageError(f"--decision must be one of the blocker's decisions: "
                             f"{', '.join(map(str, choices))}")
        resolution = {"blocker": held, "at": at, "by": by,
                      **({"decision": decision} if decision is not None else {}),
                      **({"message": message} if message is not None else {})}
        del manifest[BLOCKER_FIELD]
        manifest[RESOLUTION_FIELD] = resolution
        repo = manifest.get("repo")
        return resolution, repo if isinstance(repo, str) else None

    resolution, repo = await update_registered(ctx, batch_id, change)
    fields = {"type": UNBLOCKED, "status": "unblocked", trust.STAMP_FIELD: by,
              **({"repo": repo} if repo else {}),
              **({"agent_id": agent_id} if agent_id else {}),
              **({"decision": decision} if decision is not None else {}),
              **({"message": message} if message is not None else {})}
    written = await write_event(ctx, batch_id, fields, queue_on_failure=True)
    return {"action": "unblocked", "batch_id": batch_id, "resolution": resolution, **(written or {})}
