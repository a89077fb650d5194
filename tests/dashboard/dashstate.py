"""Generated coordination state for the dashboard tests (written as records directly)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from agentcoordd.model.timefmt import format_ts
from agentcoordd.store.local import LocalStore

REPO = "o/r"
LIVENESS_CYCLE = ("live", "stale", "dead", "none")


def prompt_for(batch_id: str, targets: list[int]) -> str:
    lanes = "\n".join(f"Lane l{i}: owner w-{batch_id}-{i}, PR #{t}" for i, t in enumerate(targets))
    return f"Use $pr-batch.\n\nRepository: {REPO}\nBatch id: {batch_id}\nBatch objective: Generated.\n\n{lanes}\n"


def generate(root: Path, batch_id: str, lanes: int, now: dt.datetime, *, first_pr: int = 1000) -> None:
    """A batch of `lanes` lanes (PR first_pr + i), heartbeats in a cycle of
    liveness states, claims, one history event per lane, and a QA event on
    every third PR."""
    store = LocalStore(root)
    targets = [first_pr + i for i in range(lanes)]
    manifest_lanes = []
    for i, target in enumerate(targets):
        owner = f"w-{batch_id}-{i}"
        lane = {"name": f"l{i}", "owner": owner, "targets": [str(target)], "status": "queued",
                "branch": f"feature/pr-{target}", "thread_handle": f"thread-{batch_id}-{i}",
                "host": "codex" if i % 2 else "claude", "pr_url": f"https://github.com/{REPO}/pull/{target}"}
        if i and i % 5 == 0:
            lane["depends_on"] = [f"{batch_id}:l{i - 1}"]
        manifest_lanes.append(lane)
        kind = LIVENESS_CYCLE[i % len(LIVENESS_CYCLE)]
        if kind != "none":
            updated = now - {"live": dt.timedelta(minutes=1), "stale": dt.timedelta(minutes=20),
                             "dead": dt.timedelta(hours=3)}[kind]
            store.write_sync(f"heartbeats/{owner}.json", {
                "schema_version": 1, "agent_id": owner, "status": "in_progress" if i % 3 else "blocked",
                "repo": REPO, "target": str(target), "batch_id": batch_id, "machine_id": f"box-{i % 3}",
                "phase": "implementing", "host": lane["host"], "branch": lane["branch"],
                "updated_at": format_ts(updated), "expires_at": format_ts(updated + dt.timedelta(minutes=15)),
            }, None)
            store.write_sync(f"claims/{REPO}/{target}.json", {
                "schema_version": 1, "repo": REPO, "target": str(target), "agent_id": owner, "status": "active",
                "batch_id": batch_id, "machine_id": f"box-{i % 3}", "branch": lane["branch"],
                "claimed_at": format_ts(updated), "updated_at": format_ts(updated),
                "expires_at": format_ts(updated + dt.timedelta(hours=4)),
            }, None)
        store.write_sync(f"events/{batch_id}/{format_ts(now).replace(':', '')}-{i:05d}.json", {
            "schema_version": 1, "event_id": f"{format_ts(now).replace(':', '')}-{i:05d}", "batch_id": batch_id,
            "type": "lane.started", "lane": f"l{i}", "agent_id": owner, "repo": REPO, "target": str(target),
            "at": format_ts(now - dt.timedelta(hours=1)),
        }, None)
        if i % 3 == 0:
            qa = ("qa.validation_passed", "qa.validation_failed", "qa.validation_started")[(i // 3) % 3]
            store.write_sync(f"events/{batch_id}/qa-{i:05d}.json", {
                "schema_version": 1, "event_id": f"qa-{i:05d}", "batch_id": batch_id, "type": qa,
                "repo": REPO, "target": str(target), "at": format_ts(now - dt.timedelta(minutes=30)),
            }, None)
    store.write_sync(f"batches/{batch_id}.json", {
        "schema_version": 1, "batch_id": batch_id, "repo": REPO, "objective": f"Generated batch of {lanes} lanes",
        "targets": [{"type": "pull_request", "target": str(t), "url": f"https://github.com/{REPO}/pull/{t}"} for t in targets],
        "lanes": manifest_lanes, "created_at": format_ts(now - dt.timedelta(hours=2)),
        "created_by_machine": "box-0", "launch_prompt": prompt_for(batch_id, targets),
    }, None)
