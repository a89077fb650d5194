"""status: full, target-scoped or batch-scoped."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from agentcoordctl import render
from agentcoordctl.options import (
    ApiUrl, BatchId, EtcdEndpoints, Json, LegacyBackend, OptRepo, OptTarget, StateRoot, run,
    seconds_at_least,
    selection,
)
from agentcoordd import protocol as p


def register(app: typer.Typer) -> None:
    app.command("status")(status)


def status(
    repo: OptRepo = None, target: OptTarget = None, batch_id: BatchId = None, json: Json = False,
    include_archived: Annotated[bool, typer.Option(
        "--include-archived", help="Unscoped status: also list archive/.")] = False,
    events: Annotated[Optional[int], typer.Option(
        "--events", metavar="N", min=1,
        help="Recent events per batch (default 20 in full status; all in batch scope).")] = None,
    all_events: Annotated[bool, typer.Option("--all-events", help="Show every event.")] = False,
    watch: Annotated[bool, typer.Option(
        "--watch", help="Refresh until Ctrl-C (a live view on a terminal, snapshots otherwise).")] = False,
    interval: Annotated[float, typer.Option(
        "--interval", metavar="SECONDS", parser=seconds_at_least(0.2),
        help="--watch refresh period.")] = 2.0,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
) -> None:
    """Coordination state: prefer --repo/--target or --batch-id scope for lane decisions."""
    if watch:  # agentcoordctl/watch.py
        from agentcoordctl import watch as live

        live.run(selection=selection(state_root, api_url, etcd_endpoints, backend),
                 interval=interval, batch_id=batch_id, repo=repo, target=target, as_json=json)
    run(p.Status(repo=repo, target=target, batch_id=batch_id, include_archived=include_archived,
                 events=events, all_events=all_events,
                 selection=selection(state_root, api_url, etcd_endpoints, backend)),
        as_json=json, text=render.status)
