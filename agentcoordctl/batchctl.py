"""batch stop | stopped: the batch stop signals (events only; nothing is killed)."""

from __future__ import annotations

from typing import Any

from agentcoordctl import spec
from agentcoordctl.options import BACKEND, BATCH_ID_REQUIRED, JSON, run
from agentcoordctl.spec import Opt
from agentcoordd import protocol as p

MESSAGE = Opt("--message", "message", metavar="TEXT",
              help="Why (shown to the batch's agents and on the dashboard).")


def _text(payload: dict[str, Any]) -> str:
    event = payload.get("event") or {}
    return f"recorded {event.get('type')} for batch {payload.get('batch_id')} ({event.get('event_id')})"


def stop(*, batch_id: str, message: str | None, json: bool, selection: p.Selection) -> None:
    run(p.BatchStop(batch_id=batch_id, message=message, selection=selection), as_json=json,
        text=_text)


def stopped(*, batch_id: str, message: str | None, json: bool, selection: p.Selection) -> None:
    run(p.BatchStopped(batch_id=batch_id, message=message, selection=selection), as_json=json,
        text=_text)


COMMANDS = (
    spec.Command(
        ("batch", "stop"), "Request a batch stop: append batch.stop_requested.\n\n"
        "An audit/control signal only: it kills nothing, releases no claim and edits no "
        "heartbeat. Every later ctl call for a lane of the batch prints a notice and carries "
        "stop_requested: true; agents finish their safe checkpoint and stop.",
        (BATCH_ID_REQUIRED, MESSAGE, JSON, BACKEND), stop),
    spec.Command(
        ("batch", "stopped"), "Record that a batch has stopped: append batch.stopped (nothing else).",
        (BATCH_ID_REQUIRED, MESSAGE, JSON, BACKEND), stopped),
)
