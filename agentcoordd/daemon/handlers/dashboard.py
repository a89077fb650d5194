"""dashboard: start (once) the daemon's loopback dashboard on the caller's backend; its URL."""

from __future__ import annotations

from agentcoordd import protocol as p
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services
from agentcoordd.model.errors import UsageError
from agentcoordd.model.identity import resolve_identity


async def handle(req: p.Dashboard, svc: Services, call: Call) -> p.Response:
    if req.port is not None and not 0 <= req.port <= 65535:
        raise UsageError(f"--port must be 0..65535: {req.port}")
    resolved = call.backend(write=True)  # its writes (a manifest, a stop, an answer) go there
    identity = resolve_identity(req.caller.env, fallback_machine=resolved.machine_id)
    board, started = await svc.dashboards.show(resolved, identity, req.port, call.notices,
                                               call.warnings)
    return call.reply({"url": board.url, "login_url": board.login_url, "host": board.host,
                       "port": board.port, "started": started,
                       "token_file": str(svc.dashboards.token_file) if svc.dashboards.token_file else None,
                       "backend": resolved.describe()})
