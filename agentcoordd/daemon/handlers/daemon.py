"""version, config show, daemon status, daemon stop: what the daemon answers itself."""

from __future__ import annotations

import os
import time

from agentcoordd import protocol as p
from agentcoordd.coord.info import config_info, version_info
from agentcoordd.daemon.call import Call
from agentcoordd.daemon.services import Services


async def handle_version(req: p.Version, svc: Services, call: Call) -> p.Response:
    return call.reply({**version_info(), "daemon_version": p.DAEMON_VERSION,
                       "protocol_version": p.PROTOCOL_VERSION})


async def handle_config(req: p.ConfigShow, svc: Services, call: Call) -> p.Response:
    # `notifications` and `leases` are ours (additive): the machine's settings, secrets redacted.
    return call.reply({**config_info(), "notifications": svc.notifier.current().describe(),
                       "leases": svc.leases.current().describe()})


async def handle_status(req: p.DaemonStatus, svc: Services, call: Call) -> p.Response:
    return call.reply({**svc.server.describe(), "backends": svc.pool.describe(),
                       "metrics_url": svc.dashboards.metrics_url(),
                       "metrics_token_file": svc.dashboards.metrics_token_file(),
                       "dashboard": svc.dashboards.describe(),
                       "feed": svc.feed.describe()})


async def handle_stop(req: p.DaemonStop, svc: Services, call: Call) -> p.Response:
    svc.server.request_stop("daemon stop requested", caller_pid=req.caller.pid)
    return call.reply({"stopping": True, "pid": os.getpid(), "at": time.time()})
