"""`answer`: reply to a help_requested / escalation_requested event; and the wait for
an answer that `wait --until-answered` and `record-event --wait-answer` share.

    answer --batch-id B --to-event ID --message TEXT [--decision TEXT] [--agent-id ME]

The daemon reads the request by its id, writes help_answered (or
escalation_answered) with `reply_to` = ID, and refuses (exit 1, one line) an
id that is unknown in that batch or names another kind of event. Waiting is
daemon-side, in slices (agentcoordctl.wait.wait_slices): exit 0 prints the
earliest answer, exit 2 says there is no answer yet (UNKNOWN: the agent decides).
"""

from __future__ import annotations

from typing import Any

from agentcoordctl import spec
from agentcoordctl.options import BACKEND, BATCH_ID_REQUIRED, JSON, run
from agentcoordctl.render import printable
from agentcoordctl.spec import REQUIRED, Opt
from agentcoordd import protocol as p

REQUEST_TYPES = ("help_requested", "escalation_requested")


def render(payload: dict[str, Any]) -> str:
    event = payload.get("event") or {}
    request = payload.get("request") or {}
    return (f"answered {request.get('type')} {request.get('event_id')} with {event.get('type')} "
            f"{event.get('batch_id')} {event.get('event_id')}")


def answer(*, batch_id: str, to_event: str, message: str, decision: str | None,
           agent_id: str | None, json: bool, selection: p.Selection) -> None:
    run(p.Answer(batch_id=batch_id, to_event=to_event, message=message, decision=decision,
                 agent_id=agent_id, selection=selection), as_json=json, text=render)


def render_answer(found: dict[str, Any]) -> str:
    by = f" by {found['agent_id']}" if found.get("agent_id") else ""
    lines = [f"{found.get('type')} {found.get('event_id')}{by} at {found.get('at')}: "
             f"{found.get('message', '')}"]
    if found.get("decision") is not None:
        lines.append(f"decision: {found['decision']}")
    return "\n".join(printable(line) for line in lines)


COMMANDS = (spec.Command(
    ("answer",), "Answer a help_requested or escalation_requested event (help_answered / "
    "escalation_answered, reply_to = its event id).",
    (BATCH_ID_REQUIRED,
     Opt("--to-event", "to_event", default=REQUIRED, metavar="EVENT_ID",
         help="The request's event id (record-event prints it)."),
     Opt("--message", "message", default=REQUIRED, metavar="TEXT", help="The answer."),
     Opt("--decision", "decision", metavar="TEXT", help="A short decision (e.g. proceed, stop)."),
     Opt("--agent-id", "agent_id", metavar="ID", help="Who answers."),
     JSON, BACKEND),
    answer),)
