"""lanes / lanes stop: the daemon's keep-alive lanes (with their batches' stop state)."""

from __future__ import annotations

from typing import Any

from agentcoordd import protocol as p
from agentcoordd.coord.context import Ctx
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle(req: p.Lanes, svc: Services, call: Call) -> p.Response:
    listing = svc.keeper.listing(req.agent_id)

    def ctx_for(resolved: Any) -> Ctx:
        return Ctx(store=svc.pool.get(resolved), clock=svc.clock)

    await svc.stop_notices.annotate_lanes(listing, svc.keeper.backend_of, ctx_for)
    return call.reply(listing)


async def handle_stop(req: p.LanesStop, svc: Services, call: Call) -> p.Response:
    return call.reply({"stopped": await svc.keeper.stop(req.agent_id)})
