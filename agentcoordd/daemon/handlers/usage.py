"""usage record: upsert one per-model usage record on a batch (coord/usage.py)."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.usage import record_usage
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.UsageRecord, svc: Services, call: Call) -> p.Response:
    return await call.use_case(
        record_usage, write=True, batch_id=req.batch_id, lane=req.lane, agent_id=req.agent_id,
        repo=req.repo, target=req.target, model=req.model, input_tokens=req.input_tokens,
        output_tokens=req.output_tokens, cost=req.cost, workspace=req.workspace)
