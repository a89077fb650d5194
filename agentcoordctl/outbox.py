"""`outbox [--json]` lists the events agentcoordd could not deliver yet and the
notifications it has not sent yet (kind, signal, attempts, next try, last error);
`outbox flush` retries every one of them now (exit 2 while some stay queued)."""

from __future__ import annotations

from typing import Any

from agentcoordctl import spec
from agentcoordctl.options import JSON, fail, run
from agentcoordctl.spec import Arg
from agentcoordd import protocol as p


def outbox(*, action: str | None, json: bool) -> None:
    if action is None:
        run(p.OutboxList(), as_json=json, text=render_outbox)
    if action != "flush":
        raise fail(f"unknown outbox action: {action} (expected: flush)", p.EXIT_USAGE)
    run(p.OutboxFlush(), as_json=json, text=render_flush)


def _age(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _kind(row: dict[str, Any]) -> str:
    return f"notify:{row.get('target')}" if row.get("kind") == "notification" else "event"


def _notifications(payload: dict[str, Any]) -> list[str]:
    notes = payload.get("notifications") or {}
    lines = [f"notification configuration: {error}" for error in notes.get("errors") or []]
    if notes.get("depth"):
        lines.append(f"{notes['depth']} notification(s) pending ({notes.get('path')})")
    return lines


def render_outbox(payload: dict[str, Any]) -> str:
    rows = payload.get("entries") or []
    if not rows:
        return "\n".join([f"outbox empty ({payload.get('path')})", *_notifications(payload)])
    header = ("KIND", "PATH", "BATCH", "TYPE", "AGE", "ATTEMPTS", "NEXT TRY", "LAST ERROR")
    table = [header]
    for row in rows:
        table.append((
            _kind(row), str(row.get("path")), str(row.get("batch_id") or "-"),
            str(row.get("signal") or row.get("type") or "-"),
            _age(row.get("age_seconds")), str(row.get("attempts", 0)),
            "token" if row.get("waiting_for_token") else _age(row.get("next_try_in")),
            " ".join(str(row.get("last_error") or "-").split())[:80],
        ))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in table]
    if any(r.get("kind", "event") == "event" for r in rows):
        lines.append(f"{payload.get('depth')} queued, oldest {_age(payload.get('oldest_age_seconds'))} "
                     f"({payload.get('path')})")
    lines += _notifications(payload)
    if payload.get("waiting_for_token"):
        lines.append(f"{payload['waiting_for_token']} {payload.get('hint', 'waiting for a token')}")
    if payload.get("quarantine"):
        lines.append(f"unreadable lines were set aside in {payload['quarantine']}")
    return "\n".join(lines)


def render_flush(payload: dict[str, Any]) -> str:
    text = f"outbox flush: {payload.get('delivered', 0)} delivered, {payload.get('remaining', 0)} queued"
    if payload.get("entries"):
        text += "\n" + render_outbox(payload)
    return text


COMMANDS = (spec.Command(
    ("outbox",), "Events and notifications waiting in agentcoordd's durable outboxes (kind, "
    "path, batch, type or signal, age, attempts, next try, last error); `outbox flush` "
    "retries them now.",
    (Arg("action", "[flush]", "flush: retry every queued event and notification now.",
         default=None), JSON),
    outbox),)
