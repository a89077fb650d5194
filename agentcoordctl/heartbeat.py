"""heartbeat."""

from __future__ import annotations

from typing import Any

import msgspec

from agentcoordctl.compat import AGENT_COORD
from agentcoordctl.fence import FENCING_TOKEN
from agentcoordctl import render, spec
from agentcoordctl.lanes import KEEP_ALIVE_HEARTBEAT
from agentcoordctl.options import (
    AGENT_ID, BACKEND, BATCH_ID, BRANCH, JSON, METADATA, OPT_REPO, OPT_TARGET, TTL, run,
)
from agentcoordctl.spec import Opt
from agentcoordd import protocol as p
from agentcoordd.model.status import DEFAULT_HEARTBEAT_STATUS, TERMINAL_STATUSES, WORKING_STATUSES

# The daemon's default (agentcoordd.coord.heartbeats.DEFAULT_HEARTBEAT_TTL; a test keeps them equal).
HEARTBEAT_TTL = msgspec.structs.replace(TTL, help="Heartbeat lifetime (default 900 = 15 min; "
                                    "dead after 4 x ttl).")
STATUS = Opt("--status", "status", metavar="STATUS", help=(
    f"Heartbeat status (default {DEFAULT_HEARTBEAT_STATUS}). Working: "
    f"{', '.join(WORKING_STATUSES)}. Terminal (the lane is finished; ends keep-alive): "
    f"{', '.join(TERMINAL_STATUSES)}. Other values are kept, with a warning."))


def heartbeat(*, agent_id: str, repo: str | None, target: str | None, batch_id: str | None,
              branch: str | None, status: str | None, ttl: int | None, meta: Any,
              selection: p.Selection, json: bool, keep_alive: p.KeepAlive | None,
              fencing_token: int | None = None) -> None:
    run(p.Heartbeat(agent_id=agent_id, repo=repo, target=target, batch_id=batch_id, branch=branch,
                    status=status, ttl=ttl, meta=meta, keep_alive=keep_alive, selection=selection,
                    fencing_token=fencing_token),
        as_json=json, text=render.heartbeat)


COMMANDS = (spec.Command(
    ("heartbeat",), "Write heartbeats/<agent-id>.json: you are alive, and what you are doing.",
    (AGENT_ID, OPT_REPO, OPT_TARGET, BATCH_ID, BRANCH,
     STATUS, HEARTBEAT_TTL, METADATA, BACKEND, JSON, KEEP_ALIVE_HEARTBEAT, FENCING_TOKEN),
    heartbeat, **AGENT_COORD),)
