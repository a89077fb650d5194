"""lanes / lanes stop: the daemon's keep-alive lanes (with their batches' stop state)."""

from __future__ import annotations

from typing import Any

from agentcoordd import protocol as p
from agentcoordd.coord import trust
from agentcoordd.coord.context import Ctx
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services
from agentcoordd.model.errors import UsageError
from agentcoordd.model.identity import resolve_identity


async def handle(req: p.Lanes, svc: Services, call: Call) -> p.Response:
    listing = svc.keeper.listing(req.agent_id)

    def ctx_for(resolved: Any) -> Ctx:
        return Ctx(store=svc.pool.get(resolved), clock=svc.clock)

    await svc.stop_notices.annotate_lanes(listing, svc.keeper.backend_of, ctx_for)
    return call.reply(listing)


async def handle_stop(req: p.LanesStop, svc: Services, call: Call) -> p.Response:
    """Stop the agent's lanes; one another machine or session registered needs --force,
    and records who did it in its end event (coord.trust)."""
    forced: dict[str, dict[str, Any]] = {}
    for key, spec in svc.keeper.specs.items():
        if spec.agent_id != req.agent_id:
            continue
        resolved = svc.keeper.resolved.get(key)
        identity = resolve_identity(req.caller.env,
                                    fallback_machine=resolved.machine_id if resolved else None)
        why = trust.foreign({"machine_id": spec.machine_id, "session_id": spec.session_id}, identity)
        if why is None:
            continue
        if not req.force:
            raise UsageError(f"keep-alive lane of {req.agent_id} is another agent's: {why}; stop "
                             "it with --force (recorded in its end event as forced_by)")
        forced[key] = trust.forced_by(call.actor(identity), why)
        call.warnings.append(f"stopped {req.agent_id}'s lane by force ({why}); recorded as forced_by")
    return call.reply({"stopped": await svc.keeper.stop(req.agent_id, forced)})
