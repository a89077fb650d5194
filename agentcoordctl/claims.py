"""claim and release."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from agentcoordctl import lanes, render
from agentcoordctl.lanes import HeartbeatTtl, IdleTimeout, KeepAliveFlag, RenewEvery, WatchPid
from agentcoordctl.options import (
    Json,
    AgentId, ApiUrl, BatchId, Branch, ChatHandle, DashboardUrl, EtcdEndpoints, Generation, Host,
    InstanceId, LegacyBackend, Operator, Phase, PrUrl, Repo, StateRoot, Synthetic, SyntheticKind,
    Target, ThreadHandle, Ttl, metadata, run, selection,
)
from agentcoordd import protocol as p


def register(app: typer.Typer) -> None:
    app.command("claim")(claim)
    app.command("release")(release)


def claim(
    agent_id: AgentId, repo: Repo, target: Target, batch_id: BatchId = None, branch: Branch = None,
    ttl: Ttl = None,
    thread_handle: ThreadHandle = None, chat_handle: ChatHandle = None, host: Host = None,
    pr_url: PrUrl = None, dashboard_url: DashboardUrl = None, operator: Operator = None,
    phase: Phase = None, generation: Generation = None, instance_id: InstanceId = None,
    synthetic: Synthetic = False, synthetic_kind: SyntheticKind = None,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
    json: Json = False,
    keep_alive: KeepAliveFlag = False, renew_every: RenewEvery = None, watch_pid: WatchPid = None,
    idle_timeout: IdleTimeout = None, heartbeat_ttl: HeartbeatTtl = None,
) -> None:
    """Acquire or renew the lease on ISSUE_OR_PR (exit 3 while another holder is live or stale)."""
    ka = lanes.keep_alive(keep_alive, renew_every=renew_every, watch_pid=watch_pid,
                          idle_timeout=idle_timeout, heartbeat_ttl=heartbeat_ttl)
    meta = metadata(locals())
    run(p.Claim(agent_id=agent_id, repo=repo, target=target, batch_id=batch_id, branch=branch,
                ttl=ttl, meta=meta, keep_alive=ka,
                selection=selection(state_root, api_url, etcd_endpoints, backend)),
        as_json=json, text=render.claim)


Terminal = Annotated[Optional[str], typer.Option(
    "--terminal", metavar="done|abandoned|superseded",
    help="Close the lane: write a lane_closed event, then release.")]
PrState = Annotated[Optional[str], typer.Option("--pr-state", metavar="STATE",
                                                help="Final pull-request state.")]
EvidenceUrl = Annotated[Optional[str], typer.Option("--evidence-url", metavar="URL",
                                                    help="Replayable closeout evidence.")]
Workspace = Annotated[Optional[str], typer.Option("--workspace", metavar="WORKSPACE",
                                                  help="Workspace of the lane (default: default).")]


def release(
    agent_id: AgentId, repo: Repo, target: Target,
    handoff_to: Annotated[Optional[str], typer.Option(
        "--handoff-to", metavar="ID", help="Structured handoff: the next agent.")] = None,
    handoff_note: Annotated[Optional[str], typer.Option(
        "--handoff-note", metavar="TEXT", help="Structured handoff: the resume note.")] = None,
    terminal: Terminal = None, pr_state: PrState = None, evidence_url: EvidenceUrl = None,
    workspace: Workspace = None,
    thread_handle: ThreadHandle = None, chat_handle: ChatHandle = None, host: Host = None,
    pr_url: PrUrl = None, dashboard_url: DashboardUrl = None, operator: Operator = None,
    phase: Phase = None, generation: Generation = None, instance_id: InstanceId = None,
    synthetic: Synthetic = False, synthetic_kind: SyntheticKind = None,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
    json: Json = False,
) -> None:
    """Release your claim on ISSUE_OR_PR: plain, structured handoff, or terminal closeout."""
    meta = metadata(locals())
    run(p.Release(agent_id=agent_id, repo=repo, target=target, meta=meta, handoff_to=handoff_to,
                  handoff_note=handoff_note, terminal=terminal, pr_state=pr_state,
                  evidence_url=evidence_url, workspace=workspace,
                  selection=selection(state_root, api_url, etcd_endpoints, backend)),
        as_json=json, text=render.release)
