"""batch-audit: is every lane of the batch complete (0), incomplete (1), unknown (2)?"""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.coord.audit import batch_audit
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.BatchAudit, svc: Services, call: Call) -> p.Response:
    return await call.use_case(batch_audit, write=False, status_read=True, batch_id=req.batch_id,
                                include_archived=req.include_archived)
