"""`takeover --force --reason TEXT`: an operator takes a target from any holder.

    takeover --force --reason TEXT --agent-id NEW --repo OWNER/REPO --target N [--batch-id B]

No liveness decision: the holder may be alive (a runaway agent, a claim whose TTL
nobody bounded). The claim records `previous_holder`, `takeover_reason: forced`
and the reason; the batch's trail gets claim.acquired and a typed
human_intervention event (kind takeover). Without --force or --reason: exit 1,
nothing written (docs/keepalive.md#forced-takeover).
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentcoordctl import spec
from agentcoordctl.claims import CLAIM_TTL
from agentcoordctl.options import (
    AGENT_ID, BACKEND, BATCH_ID, BRANCH, JSON, METADATA, REPO, TARGET, run,
)
from agentcoordctl.render import printable
from agentcoordctl.spec import Opt
from agentcoordd import protocol as p


def render(payload: dict[str, Any]) -> str:
    record = payload.get("claim") or {}
    label = f"{record.get('repo')}#{record.get('target')}"
    if payload.get("action") != "taken_over":
        return printable(f"claimed {label} by {record.get('agent_id')} until "
                         f"{record.get('expires_at')} (it had no other holder)")
    return printable(f"took over {label} from {record.get('previous_holder')} for "
                     f"{record.get('agent_id')} until {record.get('expires_at')} (forced: "
                     f"{record.get('takeover_note')})")


def takeover(*, agent_id: str, repo: str, target: str, reason: str | None, force: bool,
             batch_id: str | None, branch: str | None, ttl: int | None, meta: Any,
             selection: p.Selection, json: bool) -> None:
    run(p.Takeover(agent_id=agent_id, repo=repo, target=target, reason=reason, force=force,
                   batch_id=batch_id, branch=branch, ttl=ttl, meta=meta, selection=selection),
        as_json=json, text=render)


COMMANDS = (spec.Command(
    ("takeover",), "Take ISSUE_OR_PR from whoever holds it, alive or not (an operator's "
    "override): needs --force and --reason, both recorded.",
    (msgspec.structs.replace(AGENT_ID, help="The agent (or operator) that takes the target."),
     REPO, TARGET,
     Opt("--force", "force", "flag", help="Yes, take it from a holder that may be alive."),
     Opt("--reason", "reason", metavar="TEXT", help="Why (recorded in the claim and the event)."),
     BATCH_ID, BRANCH, CLAIM_TTL, METADATA, BACKEND, JSON),
    takeover),)
