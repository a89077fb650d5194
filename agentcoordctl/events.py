"""record-event, with the typed operational-signal fields."""

from __future__ import annotations

from typing import Any

from agentcoordctl.compat import AGENT_COORD
from agentcoordctl.fence import FENCING_TOKEN
from agentcoordctl import render, spec
from agentcoordctl.claims import CLOSEOUT
from agentcoordctl.options import (
    BACKEND, BATCH_ID_REQUIRED, BRANCH, JSON, METADATA, OPT_AGENT_ID, OPT_REPO, OPT_TARGET,
    positive_seconds, run,
)
from agentcoordctl.spec import REQUIRED, Exit, Group, Opt
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
                 meta: Any, selection: p.Selection, queue_on_failure: bool, json: bool,
                 wait_answer: float | None = None, fencing_token: int | None = None) -> None:
    message_ = p.RecordEvent(batch_id=batch_id, type=type, lane=lane, agent_id=agent_id, repo=repo,
                      target=target, branch=branch, status=status, message=message, meta=meta,
                      typed=typed, terminal=terminal, pr_state=pr_state, evidence_url=evidence_url,
                      workspace=workspace, queue_on_failure=queue_on_failure, selection=selection,
                      fencing_token=fencing_token)
    if wait_answer is not None:
        record_and_wait(message_, wait_answer, json=json)
    run(message_, as_json=json, text=render.record_event)


def record_and_wait(request: p.RecordEvent, seconds: float, *, json: bool) -> None:
    """--wait-answer: record the request (its confirmation on stderr), then wait for its
    answer: stdout gets only the answer (agentcoordctl.wait.wait_answered)."""
    from agentcoordctl import answer, wait
    from agentcoordctl.options import eprint, fail, send, show

    if request.type not in answer.REQUEST_TYPES:
        raise fail("--wait-answer needs --type help_requested or escalation_requested",
                   p.EXIT_USAGE)
    response = send(request)
    if response.exit_code != 0 or not isinstance(response.payload, dict):
        show(response, as_json=json, text=render.record_event)
    event = response.payload.get("event") or {}
    payload, response.payload = response.payload, None
    try:
        show(response)  # notices and warnings
    except Exit:
        pass
    if payload.get("action") == "queued":  # nobody can see (or answer) it before delivery
        eprint(render.printable(render.record_event(payload)))
        raise fail(f"record-event: the request is not in the backend yet, so nobody can answer it; "
                   f"later: agentcoordctl wait --until-answered --batch-id {request.batch_id} "
                   f"--event-id {event.get('event_id')}", p.EXIT_OPERATIONAL)
    eprint(render.printable(render.record_event(payload)) + f"; waiting up to {seconds:g}s for an answer")
    wait.wait_answered(request.batch_id, str(event.get("event_id")), timeout=seconds,
                       interval=1.0, json=json, selection=request.selection)


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
     Opt("--wait-answer", "wait_answer", "custom", parse=positive_seconds, metavar="SECONDS",
         help="help_requested/escalation_requested: then wait this long for the answer and "
         "print it (exit 0), or exit 2 (no answer yet)."),
     JSON, FENCING_TOKEN),
    record_event, **AGENT_COORD),)
