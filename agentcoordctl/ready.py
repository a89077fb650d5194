"""ready and claim --next: the lanes of a batch that can start now, and taking the first.

    ready --batch-id B [--agent-id A] [--json]   every lane: ready, or why not
    claim --next --batch-id B --agent-id A       claim the first ready lane A may take

The daemon decides (agentcoordd/coord/ready.py); this module sends and prints.
"""

from __future__ import annotations

from typing import Any

from agentcoordctl import spec
from agentcoordctl.options import BACKEND, BATCH_ID_REQUIRED, JSON, run
from agentcoordd import protocol as p


def _reason(row: dict[str, Any]) -> str:
    state = row.get("state")
    if state == "closed":
        return f"terminal {row.get('terminal')}"
    limit = row.get("blocked_on_limit")
    if state == "blocked" and isinstance(limit, dict):
        until = limit.get("resets_at") or "cleared (reset unknown)"
        return (f"blocked on host limit {limit.get('quota_host')}/{limit.get('scope')} of "
                f"{limit.get('machine')} until {until}")
    if state == "blocked":
        return "blocked_on " + ",".join(str(ref) for ref in row.get("blocked_on") or [])
    if state == "held":
        return "; ".join(f"{h.get('target')} held by {h.get('agent_id')} ({h.get('liveness')})"
                         for h in row.get("held_by") or [])
    return "may take" if row.get("may_take") else ""


def render(payload: dict[str, Any]) -> str:
    counts = payload.get("counts") or {}
    head = (f"batch {payload.get('batch_id')}: {counts.get('ready', 0)} ready, "
            f"{counts.get('blocked', 0)} blocked, {counts.get('held', 0)} held, "
            f"{counts.get('closed', 0)} closed")
    if payload.get("agent_id") is not None:
        head += f"; {len(payload.get('takeable') or [])} for {payload['agent_id']}"
    lines = [head]
    for row in payload.get("lanes") or []:
        owner = f"owner {row.get('owner')}" + (" (pool)" if row.get("pool") else "")
        priority = "" if row.get("priority") is None else f" priority {row['priority']}"
        reason = _reason(row)
        lines.append(f"  {row.get('state'):<7} {row.get('name')} {owner} targets "
                     f"{','.join(row.get('targets') or []) or '-'}{priority}"
                     + (f" - {reason}" if reason else ""))
    return "\n".join(lines)


def ready(*, batch_id: str, agent_id: str | None, json: bool, selection: p.Selection) -> None:
    run(p.Ready(batch_id=batch_id, agent_id=agent_id, selection=selection), as_json=json,
        text=render)


def render_claimed(payload: dict[str, Any]) -> str:
    record = payload.get("claim") or {}
    return (f"claimed lane {payload.get('lane')} of batch {payload.get('batch_id')}: "
            f"{payload.get('repo')}#{payload.get('target')} by {record.get('agent_id')} "
            f"until {record.get('expires_at')}")


def claim_next(*, agent_id: str, batch_id: str, branch: str | None, ttl: int | None, meta: Any,
               selection: p.Selection, json: bool, keep_alive: p.KeepAlive | None) -> None:
    run(p.ClaimNext(agent_id=agent_id, batch_id=batch_id, branch=branch, ttl=ttl, meta=meta,
                    keep_alive=keep_alive, selection=selection),
        as_json=json, text=render_claimed)


COMMANDS = (spec.Command(
    ("ready",), "The lanes of --batch-id that can start now (priority, then manifest order), "
    "and why each other lane cannot.",
    (BATCH_ID_REQUIRED,
     spec.Opt("--agent-id", "agent_id", metavar="ID",
              help="Mark the ready lanes this agent may take (its own and pool lanes)."),
     JSON, BACKEND),
    ready),)
