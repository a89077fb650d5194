"""The dashboard's overview: batches and lanes with who/where/what, QA and stop state.

`overview(ctx)` composes full `status` (claims, heartbeats, batches with
projected lanes) with the telemetry signals (QA, stop requests), one row per
lane:

* name, owner, pool, deps, blocked_on, targets (from status);
* lane_state, and while held: holder, since, fencing_token, detail, liveness
  (the holder's under the lease rules; none without a holder: a closed lane
  is not "dead") — all from the lane's own claim (coord/holders.py);
* status: the terminal a closed lane was closed with, else the holder's
  heartbeat status when that heartbeat is about this lane, else the lane state
  in words ("not started", "blocked", "released");
* machine (the holder's heartbeat `machine_id`, else its claim's), host,
  phase, branch, thread_handle, pr_url (lane first, then the holder's
  heartbeat when it is about this lane, then the lane's claim);
* pr — the PR number, only from `pr_url`;
* qa — `missing` / `requested` / `in_progress` / `passed` / `failed` /
  `unknown` from the latest QA event for the batch repo and the PR (the
  first target when the lane has no PR URL).

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
from agentcoordd.model.foundation import route as route_contract
from agentcoordd.model.timefmt import format_ts


# What the overview carries of a batch's own records: the usage tiles, the Merge
# auth field, the Blocker panel (and how it was resolved), the completion drawer.
BATCH_RECORD_FIELDS = ("usage_totals", "merge_authority", "blocker", "blocker_resolution", "completion")


def lane_route(lane: dict[str, Any], *records: dict[str, Any]) -> str | None:
    """The lane's route chip: the manifest's (already a chip in the status row), else the
    holder's heartbeat about this lane, else its claim's (route contract canonical form)."""
    if isinstance(lane.get("route"), str):
        return lane["route"]
    for record in records:
        chip = route_contract.chip_text(record.get("route"))
        if chip is not None:
            return chip
    return None


def _pr_number(url: Any) -> str | None:
    parsed = pr_of(url)
    return parsed[1] if parsed else None


def _lane_row(lane: dict[str, Any], batch_id: Any, repo: str | None, beats: dict[Any, Any],
              claims_by_target: dict[tuple[str, str], dict[str, Any]],
              qa: dict[Any, Any]) -> dict[str, Any]:
    """One lane as the dashboard shows it: told from that lane's own claim and holder
    (coord/holders.py), never from its owner's heartbeat about another lane."""
    holder = lane.get("holder") or {}
    agent = holder.get("agent_id")
    beat = beats.get(agent, {}) if agent is not None else {}
    about = beat if "status" in holder else {}  # the holder's heartbeat is about this lane
    targets = [str(t) for t in lane.get("targets", [])]
    claim = claims_by_target.get((str(repo), targets[0]), {}) if targets else {}
    claim = {k: v for k, v in claim.items() if v != "UNKNOWN"}
    if agent is not None and claim.get("agent_id") != agent:
        claim = {}  # an earlier holder's claim says nothing of this holder
    pr_url = lane.get("pr_url") or about.get("pr_url") or claim.get("pr_url")
    pr = _pr_number(pr_url)
    state = lane.get("lane_state")
    row = {
        "batch_id": batch_id,
        "repo": repo,
        "name": lane.get("name"),
        "owner": lane.get("owner"),
        "pool": lane.get("pool") is True or None,
        "lane_state": state,
        "holder": agent,
        "since": holder.get("since"),
        "fencing_token": holder.get("fencing_token"),
        "detail": holder.get("detail"),
        "machine": beat.get("machine_id") or claim.get("machine_id"),
        "host": lane.get("host") or about.get("host") or claim.get("host"),
        "phase": holder.get("phase") or lane.get("phase") or claim.get("phase"),
        # what the lane is at: its closing terminal, its holder's report, else its state
        "status": lane.get("closed_as") or holder.get("status") or
                  (state.replace("_", " ") if isinstance(state, str) else lane.get("status")),
        "liveness": holder.get("liveness"),  # no holder, no liveness (a closed lane is not dead)
        "deps": lane.get("deps", []),
        "blocked_on": lane.get("blocked_on", []),
        "targets": targets,
        "branch": lane.get("branch") or about.get("branch") or claim.get("branch"),
        "thread_handle": lane.get("thread_handle") or about.get("thread_handle") or claim.get("thread_handle"),
        "pr_url": pr_url,
        "pr": pr,
        "updated_at": holder.get("updated_at"),
        "route": lane_route(lane, about, claim),
    }
    # QA is keyed by PR number; a lane without a PR URL is looked up by its target
    qa_key = pr or (targets[0] if targets else None)
    row.update(telemetry.qa_view(qa.get((repo, qa_key)) if repo and qa_key else None))
    return {k: v for k, v in row.items() if v is not None}


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
            lanes.append(_lane_row(lane, batch_id, repo, beats, claims_by_target, qa))
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
            # the batch's own records (additive; absent stays absent: the dashboard shows —)
            **{k: batch[k] for k in BATCH_RECORD_FIELDS if k in batch},
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
        # Usage limits of quota pools (docs/capacity.md): status's optional projection.
        "host_limits": state.get("host_limits", []),
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
