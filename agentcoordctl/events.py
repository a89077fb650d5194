"""record-event, with the typed operational-signal fields."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from agentcoordctl import render
from agentcoordctl.claims import EvidenceUrl, PrState, Terminal, Workspace
from agentcoordctl.options import (
    Json,
    ApiUrl, Branch, ChatHandle, DashboardUrl, EtcdEndpoints, Generation, Host, InstanceId,
    LegacyBackend, Operator, OptAgentId, OptRepo, OptTarget, Phase, PrUrl, StateRoot, Synthetic,
    SyntheticKind, ThreadHandle, metadata, run, selection,
)
from agentcoordd import protocol as p


def register(app: typer.Typer) -> None:
    app.command("record-event")(record_event)


def _typed(flag: str, help: str) -> object:
    return typer.Option(flag, help=help, rich_help_panel="Typed events")


Reason = Annotated[Optional[str], _typed("--reason", "help_requested: blocked-user-input|question|permission")]
FromRoute = Annotated[Optional[str], _typed("--from-route", "escalation_requested: current route")]
ToRoute = Annotated[Optional[str], _typed("--to-route", "escalation_requested: requested route")]
Evidence = Annotated[Optional[str], _typed("--evidence", "escalation_requested: why")]
Severity = Annotated[Optional[str], _typed("--severity", "error: P0|P1|P2|P3")]
Category = Annotated[Optional[str], _typed("--category", "error: category")]
Kind = Annotated[Optional[str], _typed("--kind", "human_intervention: takeover|supersede|manual-fix|drain")]


def record_event(
    batch_id: Annotated[str, typer.Option("--batch-id", metavar="ID", help="Batch id.")],
    type: Annotated[str, typer.Option("--type", metavar="TYPE", help="Event type.")],
    lane: Annotated[Optional[str], typer.Option("--lane", metavar="NAME", help="Lane name.")] = None,
    agent_id: OptAgentId = None, repo: OptRepo = None, target: OptTarget = None,
    branch: Branch = None,
    status: Annotated[Optional[str], typer.Option("--status", metavar="STATUS",
                                                  help="Heartbeat-vocabulary status.")] = None,
    message: Annotated[Optional[str], typer.Option("--message", metavar="TEXT",
                                                   help="Free text.")] = None,
    reason: Reason = None, from_route: FromRoute = None, to_route: ToRoute = None,
    evidence: Evidence = None, severity: Severity = None, category: Category = None,
    kind: Kind = None,
    terminal: Terminal = None, pr_state: PrState = None, evidence_url: EvidenceUrl = None,
    workspace: Workspace = None,
    thread_handle: ThreadHandle = None, chat_handle: ChatHandle = None, host: Host = None,
    pr_url: PrUrl = None, dashboard_url: DashboardUrl = None, operator: Operator = None,
    phase: Phase = None, generation: Generation = None, instance_id: InstanceId = None,
    synthetic: Synthetic = False, synthetic_kind: SyntheticKind = None,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
    queue_on_failure: Annotated[bool, typer.Option(
        "--queue-on-failure",
        help="If the backend cannot take the event now, queue it in agentcoordd's durable "
        "outbox (retried until delivered; exit 0, action queued, a warning).")] = False,
    json: Json = False,
) -> None:
    """Append an immutable event under events/<batch-id>/ (lane_closed: create-only)."""
    meta = metadata(locals())
    typed = {k: v for k, v in dict(reason=reason, from_route=from_route, to_route=to_route,
                                   evidence=evidence, severity=severity, category=category,
                                   kind=kind).items() if v is not None}
    run(p.RecordEvent(batch_id=batch_id, type=type, lane=lane, agent_id=agent_id, repo=repo,
                      target=target, branch=branch, status=status, message=message, meta=meta,
                      typed=typed, terminal=terminal, pr_state=pr_state, evidence_url=evidence_url,
                      workspace=workspace, queue_on_failure=queue_on_failure,
                      selection=selection(state_root, api_url, etcd_endpoints, backend)),
        as_json=json, text=render.record_event)
