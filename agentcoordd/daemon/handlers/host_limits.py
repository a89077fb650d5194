"""limit report|clear|list: usage-limit records of this machine's quota hosts
(coord/host_limits.py, docs/capacity.md)."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord import host_limits
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle_report(req: p.LimitReport, svc: Services, call: Call) -> p.Response:
    return await call.use_case(host_limits.report, write=True, workspace=req.workspace,
                               quota_host=req.quota_host, scope=req.scope,
                               resets_at=req.resets_at, source=req.source)


async def handle_clear(req: p.LimitClear, svc: Services, call: Call) -> p.Response:
    return await call.use_case(host_limits.clear, write=True, workspace=req.workspace,
                               quota_host=req.quota_host, scope=req.scope)


async def handle_list(req: p.LimitList, svc: Services, call: Call) -> p.Response:
    return await call.use_case(host_limits.list_limits, write=False, workspace=req.workspace)
