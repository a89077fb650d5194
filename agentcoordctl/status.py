"""status: full, target-scoped or batch-scoped."""

from __future__ import annotations

from typing import Annotated

import typer

from agentcoordctl import render
from agentcoordctl.options import (
    ApiUrl, BatchId, EtcdEndpoints, Json, LegacyBackend, OptRepo, OptTarget, StateRoot, run,
    selection,
)
from agentcoordd import protocol as p


def register(app: typer.Typer) -> None:
    app.command("status")(status)


def status(
    repo: OptRepo = None, target: OptTarget = None, batch_id: BatchId = None, json: Json = False,
    include_archived: Annotated[bool, typer.Option(
        "--include-archived", help="Unscoped status: also list archive/.")] = False,
    events: Annotated[int, typer.Option("--events", metavar="N",
                                        help="Recent events to show.")] = 20,
    all_events: Annotated[bool, typer.Option("--all-events", help="Show every event.")] = False,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
) -> None:
    """Coordination state: prefer --repo/--target or --batch-id scope for lane decisions."""
    run(p.Status(repo=repo, target=target, batch_id=batch_id, include_archived=include_archived,
                 events=events, all_events=all_events,
                 selection=selection(state_root, api_url, etcd_endpoints, backend)),
        as_json=json, text=render.status)
