"""heartbeat."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from agentcoordctl import lanes, render
from agentcoordctl.lanes import IdleTimeout, KeepAliveFlag, RenewEvery, WatchPid
from agentcoordctl.options import (
    Json,
    AgentId, ApiUrl, BatchId, Branch, ChatHandle, DashboardUrl, EtcdEndpoints, Generation, Host,
    InstanceId, LegacyBackend, Operator, OptRepo, OptTarget, Phase, PrUrl, StateRoot, Synthetic,
    SyntheticKind, ThreadHandle, Ttl, metadata, run, selection,
)
from agentcoordd import protocol as p


def register(app: typer.Typer) -> None:
    app.command("heartbeat")(heartbeat)


def heartbeat(
    agent_id: AgentId, repo: OptRepo = None, target: OptTarget = None, batch_id: BatchId = None,
    branch: Branch = None,
    status: Annotated[Optional[str], typer.Option(
        "--status", metavar="STATUS", help="Heartbeat status (default in_progress).")] = None,
    ttl: Ttl = None,
    thread_handle: ThreadHandle = None, chat_handle: ChatHandle = None, host: Host = None,
    pr_url: PrUrl = None, dashboard_url: DashboardUrl = None, operator: Operator = None,
    phase: Phase = None, generation: Generation = None, instance_id: InstanceId = None,
    synthetic: Synthetic = False, synthetic_kind: SyntheticKind = None,
    state_root: StateRoot = None, api_url: ApiUrl = None, etcd_endpoints: EtcdEndpoints = None,
    backend: LegacyBackend = None,
    json: Json = False,
    keep_alive: KeepAliveFlag = False, renew_every: RenewEvery = None, watch_pid: WatchPid = None,
    idle_timeout: IdleTimeout = None,
) -> None:
    """Write heartbeats/<agent-id>.json: you are alive, and what you are doing."""
    ka = lanes.keep_alive(keep_alive, renew_every=renew_every, watch_pid=watch_pid,
                          idle_timeout=idle_timeout)
    meta = metadata(locals())
    run(p.Heartbeat(agent_id=agent_id, repo=repo, target=target, batch_id=batch_id, branch=branch,
                    status=status, ttl=ttl, meta=meta, keep_alive=ka,
                    selection=selection(state_root, api_url, etcd_endpoints, backend)),
        as_json=json, text=render.heartbeat)
