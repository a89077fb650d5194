"""batch stop | stopped: the batch stop signals (events only; nothing is killed);
batch block | unblock: the batch's blocker (the dashboard's Blocker panel)."""

from __future__ import annotations

from typing import Any

from agentcoordctl import spec
from agentcoordctl.options import BACKEND, BATCH_ID_REQUIRED, JSON, OPT_AGENT_ID, run
from agentcoordctl.spec import REQUIRED, Opt
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


def _blocked_text(payload: dict[str, Any]) -> str:
    blocker = (payload.get("record") or {}).get("blocker") or {}
    return (f"batch {payload.get('batch_id')} blocked: {blocker.get('message')} "
            f"(decisions: {'; '.join(blocker.get('decisions') or [])})")


def _unblocked_text(payload: dict[str, Any]) -> str:
    resolution = payload.get("resolution") or {}
    chosen = resolution.get("decision")
    return f"batch {payload.get('batch_id')} unblocked" + (f": {chosen}" if chosen else "")


def block(*, batch_id: str, message: str, decisions: list[str], recommended_reply: str | None,
          agent_id: str | None, json: bool, selection: p.Selection) -> None:
    run(p.BatchBlock(batch_id=batch_id, message=message, decisions=decisions,
                     recommended_reply=recommended_reply, agent_id=agent_id, selection=selection),
        as_json=json, text=_blocked_text)


def unblock(*, batch_id: str, decision: str | None, message: str | None, agent_id: str | None,
            json: bool, selection: p.Selection) -> None:
    run(p.BatchUnblock(batch_id=batch_id, decision=decision, message=message, agent_id=agent_id,
                       selection=selection), as_json=json, text=_unblocked_text)


def _completed_text(payload: dict[str, Any]) -> str:
    record = payload.get("record") or {}
    verdict = (record.get("audit") or {}).get("verdict")
    said = "already has" if payload.get("action") == "exists" else "wrote"
    return (f"batch {payload.get('batch_id')}: {said} its completion report (audit {verdict}"
            f"{', archive-ready' if payload.get('archive_ready') else ''})")


def complete(*, batch_id: str, report: str | None, json: bool, selection: p.Selection) -> None:
    from agentcoordctl.batches import read_input
    from agentcoordctl.options import fail

    text = None
    if report is not None:
        try:
            text = read_input(report, "report", p.LAUNCH_PROMPT_CAP).decode("utf-8")
        except UnicodeDecodeError:
            raise fail("report must be valid UTF-8", p.EXIT_USAGE) from None
    run(p.BatchComplete(batch_id=batch_id, report=text, selection=selection), as_json=json,
        text=_completed_text)


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
    spec.Command(
        ("batch", "block"), "Block a batch on operator authority: the Blocker panel.\n\n"
        "Stores the blocker (message, the decisions the operator may take, an optional "
        "recommended reply) on the batch and appends batch.blocked (notified like a help "
        "request). Blocking again replaces the blocker.",
        (BATCH_ID_REQUIRED,
         Opt("--message", "message", default=REQUIRED, metavar="TEXT",
             help="What the supervisor is blocked on."),
         Opt("--decision", "decisions", "many", default=REQUIRED, metavar="TEXT",
             help="A decision the operator may take (repeatable; at least one)."),
         Opt("--recommended-reply", "recommended_reply", metavar="TEXT",
             help="The reply the supervisor recommends."),
         OPT_AGENT_ID, JSON, BACKEND), block),
    spec.Command(
        ("batch", "unblock"), "Resolve a batch's blocker: the decision chosen, by whom.\n\n"
        "Removes the blocker, keeps the answer as blocker_resolution and appends "
        "batch.unblocked. --decision must be one of the blocker's decisions.",
        (BATCH_ID_REQUIRED,
         Opt("--decision", "decision", metavar="TEXT", help="The decision taken."),
         Opt("--message", "message", metavar="TEXT", help="A note for the supervisor."),
         OPT_AGENT_ID, JSON, BACKEND), unblock),
    spec.Command(
        ("batch", "complete"), "Write the batch's completion report (the dashboard's drawer).\n\n"
        "The batch-audit verdict, receipts, baseline, per-lane outcomes and the usage totals "
        "(unknown stays unknown). Written on its own when the last lane closes; again here "
        "only with a different --report. Idempotent on retry.",
        (BATCH_ID_REQUIRED,
         Opt("--report", "report", metavar="FILE", help="The final report (text; - for stdin)."),
         JSON, BACKEND), complete),
)
