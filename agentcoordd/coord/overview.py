"""The dashboard's overview: batches and lanes with who/where/what, QA and stop state.

`overview(ctx)` composes full `status` (claims, heartbeats, batches with
projected lanes) with the telemetry signals (QA, stop requests), one row per
lane:

* name, owner, status, liveness, deps, blocked_on, targets (from status);
* machine (the owner's heartbeat `machine_id`, else the claim's), host,
  phase, branch, thread_handle, pr_url (lane first, then the owner's
  heartbeat, then a claim on one of the lane's targets);
* pr — the PR number (from `pr_url`, else the first target);
* qa — `missing` / `requested` / `in_progress` / `passed` / `failed` /
  `unknown` from the latest QA event for the batch repo and `pr`.

Each batch also carries its `stop` state. `search(rows, query)` finds lanes by
PR or issue number (`4005`, `#4005`), branch, thread handle, lane name or
owner (case-insensitive substring; numbers match a target exactly).
"""

from __future__ import annotations

from typing import Any

from agentcoordd.coord import telemetry
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.health import pr_of
from agentcoordd.coord.status import status
from agentcoordd.model.timefmt import format_ts


def _pr_number(url: Any) -> str | None:
    parsed = pr_of(url)
    return parsed[1] if parsed else None


async def overview(ctx: Ctx) -> dict[str, Any]:
    state = await status(ctx, events=0)
    signals = await telemetry.signal_events(ctx)
    qa = telemetry.latest_qa(signals.events)
    beats = {b.get("agent_id"): b for b in state.get("heartbeats", [])}
    claims_by_target: dict[tuple[str, str], dict[str, Any]] = {}
    for claim in state.get("claims", []):
        claims_by_target[(str(claim.get("repo")), str(claim.get("target")))] = claim
    stop_events: dict[str, list[dict[str, Any]]] = {}
    for event in signals.events:
        if event.get("type") in (telemetry.STOP_REQUESTED, telemetry.STOPPED):
            stop_events.setdefault(str(event.get("batch_id")), []).append(event)
    history_counts: dict[str, int] = {}
    for event in signals.events:
        key = str(event.get("batch_id"))
        history_counts[key] = history_counts.get(key, 0) + 1

    batches = []
    for batch in state.get("batches", []):
        batch_id = batch.get("batch_id")
        repo = batch.get("repo") if isinstance(batch.get("repo"), str) else None
        lanes = []
        for lane in batch.get("lanes", []):
            owner = lane.get("owner")
            beat = beats.get(owner, {})
            targets = [str(t) for t in lane.get("targets", [])]
            claim = next((claims_by_target[(repo, t)] for t in targets if (repo, t) in claims_by_target), {})
            claim = {k: v for k, v in claim.items() if v != "UNKNOWN"}
            pr_url = lane.get("pr_url") or beat.get("pr_url") or claim.get("pr_url")
            pr = _pr_number(pr_url) or (targets[0] if targets else None)
            row = {
                "batch_id": batch_id,
                "repo": repo,
                "name": lane.get("name"),
                "owner": owner,
                "machine": beat.get("machine_id") or claim.get("machine_id"),
                "host": lane.get("host") or beat.get("host") or claim.get("host"),
                "phase": beat.get("phase") or lane.get("phase") or claim.get("phase"),
                "status": lane.get("status"),
                "liveness": lane.get("liveness"),
                "deps": lane.get("deps", []),
                "blocked_on": lane.get("blocked_on", []),
                "targets": targets,
                "branch": lane.get("branch") or beat.get("branch") or claim.get("branch"),
                "thread_handle": lane.get("thread_handle") or beat.get("thread_handle") or claim.get("thread_handle"),
                "pr_url": pr_url,
                "pr": pr,
                "updated_at": beat.get("updated_at"),
            }
            row.update(telemetry.qa_view(qa.get((repo, pr)) if repo and pr else None))
            lanes.append({k: v for k, v in row.items() if v is not None})
        stop = telemetry.stop_summary(stop_events.get(str(batch_id), []), str(batch_id))
        batches.append({
            "batch_id": batch_id,
            "repo": repo,
            "objective": batch.get("objective"),
            "status": batch.get("status"),
            "created_at": batch.get("created_at") or batch.get("registered_at"),
            "created_by_machine": batch.get("created_by_machine"),
            "has_launch_prompt": bool(batch.get("launch_prompt")),
            "event_count": history_counts.get(str(batch_id), 0),
            "stop": stop,
            "lanes": lanes,
        })
    return {
        "generated_at": format_ts(ctx.clock.now()),
        "version": state.get("version"),
        # events=0 above: the "older events omitted" note is ours, not a degradation.
        "degraded": [d for d in state.get("degraded", []) if not d.startswith("showing the most recent 0 events")],
        "history_problems": signals.problems,
        "batches": batches,
        "claims": state.get("claims", []),
        "heartbeats": state.get("heartbeats", []),
        "exit_code": state.get("exit_code", 0) if not signals.error else 2,
    }


def search(batches: list[dict[str, Any]], query: str) -> list[dict[str, Any]]:
    """Lanes matching `query` (see the module docstring)."""
    text = query.strip().lower().lstrip("#")
    if not text:
        return []
    out = []
    for batch in batches:
        for lane in batch.get("lanes", []):
            numbers = {str(lane.get("pr") or "")} | set(lane.get("targets", []))
            words = [lane.get(k) for k in ("branch", "thread_handle", "name", "owner", "pr_url")]
            if (text.isdigit() and text in numbers) or any(
                isinstance(w, str) and text in w.lower() for w in words
            ):
                out.append(lane)
    return out
