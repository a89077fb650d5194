"""register-batch: validate the manifest (contracts, dependency cycles) and write it."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.batches import register_batch
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.RegisterBatch, svc: Services, call: Call) -> p.Response:
    return await call.use_case(register_batch, write=True, manifest=req.manifest,
                               batch_id=req.batch_id,
                               launch_prompt=req.launch_prompt, synthetic=req.synthetic,
                               synthetic_kind=req.synthetic_kind)
