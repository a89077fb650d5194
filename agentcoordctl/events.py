"""record-event, with the typed operational-signal fields."""

from __future__ import annotations

from typing import Any

from agentcoordctl.compat import AGENT_COORD
from agentcoordctl import render, spec
from agentcoordctl.claims import CLOSEOUT
from agentcoordctl.options import (
    BACKEND, BATCH_ID_REQUIRED, BRANCH, JSON, METADATA, OPT_AGENT_ID, OPT_REPO, OPT_TARGET, run,
)
from agentcoordctl.spec import REQUIRED, Group, Opt
from agentcoordd import protocol as p


def _typed(name: str, help: str) -> Opt:
    return Opt("--" + name.replace("_", "-"), name, help=help, panel="Typed events")


TYPED = Group("typed", (
    _typed("reason", "help_requested: blocked-user-input|question|permission"),
    _typed("from_route", "escalation_requested: current route"),
    _typed("to_route", "escalation_requested: requested route"),
    _typed("evidence", "escalation_requested: why"),
    _typed("severity", "error: P0|P1|P2|P3"),
    _typed("category", "error: category"),
    _typed("kind", "human_intervention: takeover|supersede|manual-fix|drain"),
), lambda v: {k: value for k, value in v.items() if value is not None})


def record_event(*, batch_id: str, type: str, lane: str | None, agent_id: str | None,
                 repo: str | None, target: str | None, branch: str | None, status: str | None,
                 message: str | None, typed: dict[str, str], terminal: str | None,
                 pr_state: str | None, evidence_url: str | None, workspace: str | None,
                 meta: Any, selection: p.Selection, queue_on_failure: bool, json: bool) -> None:
    run(p.RecordEvent(batch_id=batch_id, type=type, lane=lane, agent_id=agent_id, repo=repo,
                      target=target, branch=branch, status=status, message=message, meta=meta,
                      typed=typed, terminal=terminal, pr_state=pr_state, evidence_url=evidence_url,
                      workspace=workspace, queue_on_failure=queue_on_failure, selection=selection),
        as_json=json, text=render.record_event)


COMMANDS = (spec.Command(
    ("record-event",), "Append an immutable event under events/<batch-id>/ (lane_closed: "
    "create-only).",
    (BATCH_ID_REQUIRED,
     Opt("--type", "type", default=REQUIRED, metavar="TYPE", help="Event type."),
     Opt("--lane", "lane", metavar="NAME", help="Lane name."),
     OPT_AGENT_ID, OPT_REPO, OPT_TARGET, BRANCH,
     Opt("--status", "status", metavar="STATUS", help="Heartbeat-vocabulary status."),
     Opt("--message", "message", metavar="TEXT", help="Free text."),
     TYPED, *CLOSEOUT, METADATA, BACKEND,
     Opt("--queue-on-failure", "queue_on_failure", "flag",
         help="If the backend cannot take the event now, queue it in agentcoordd's durable "
         "outbox (retried until delivered; exit 0, action queued, a warning)."),
     JSON),
    record_event, **AGENT_COORD),)
