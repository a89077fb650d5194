"""health: the telemetry contract's Dashboard Health Signals and QA per PR.

Exit 0 clean, 1 when any signal fired (like batch-audit's incomplete), 2 when
the state could not be read. `--json` prints the daemon's payload (the same
one the dashboard's Health tab shows).
"""

from __future__ import annotations

from typing import Any

from agentcoordctl import spec
from agentcoordctl.options import BACKEND, BATCH_ID, JSON, positive_seconds, run, seconds
from agentcoordctl.render import open_request
from agentcoordctl.spec import Opt
from agentcoordd import protocol as p


def render(payload: dict[str, Any]) -> str:
    scope = payload.get("scope") or {}
    where = f"batch {scope.get('batch_id')}" if scope.get("kind") == "batch" else "all batches"
    warnings = payload.get("warnings") or []
    verdict = payload.get("verdict")
    head = f"health {verdict} ({where})"
    if warnings:
        head += f": {len(warnings)} warning{'s' if len(warnings) != 1 else ''}"
    lines = [head]
    for warning in warnings:
        lines.append(f"- {warning.get('signal')}: {warning.get('message')}")
    counts = {k: v for k, v in (payload.get("signals") or {}).items() if v}
    if counts:
        lines.append("signals: " + ", ".join(f"{k}={v}" for k, v in counts.items()))
    qa = payload.get("qa") or []
    lines.append("qa")
    if not qa:
        lines.append("- no pull requests")
    for row in qa:
        line = f"- {row.get('repo')}#{row.get('target')} {row.get('qa')}"
        if row.get("batch_id"):
            line += f" batch {row['batch_id']}"
        if row.get("qa_at"):
            line += f" at {row['qa_at']}"
        if row.get("qa_message"):
            line += f": {row['qa_message']}"
        lines.append(line)
    if payload.get("open_requests"):
        lines.append("open requests")
        lines.extend(open_request(r) for r in payload["open_requests"])
    for item in payload.get("unreadable") or []:
        lines.append(f"unreadable: {item.get('path')}: {item.get('reason')}")
    for error in payload.get("errors") or []:
        lines.append(f"error: {error}")
    for prefix in payload.get("partial") or []:
        lines.append(f"partial listing: {prefix}")
    return "\n".join(lines)


def health(*, batch_id: str | None, json: bool, selection: p.Selection,
           unanswered_after: float | None = None, first_heartbeat_grace: float | None = None) -> None:
    run(p.Health(batch_id=batch_id, unanswered_after=unanswered_after,
                 first_heartbeat_grace=first_heartbeat_grace, selection=selection),
        as_json=json, text=render)


COMMANDS = (spec.Command(
    ("health",), "Telemetry health signals and QA per PR: exit 0 clean, 1 warnings, 2 unreadable.",
    (BATCH_ID, JSON, BACKEND,
     Opt("--unanswered-after", "unanswered_after", "custom", parse=positive_seconds,
         metavar="SECONDS", help="Warn (request_unanswered) about a help/escalation request "
         "open longer than this (default 1800)."),
     Opt("--first-heartbeat-grace", "first_heartbeat_grace", "custom", parse=seconds,
         metavar="SECONDS", help="No claim_without_heartbeat / lane_without_heartbeat for a "
         "claim or batch younger than this: the normal gap before a first heartbeat "
         "(default 300).")),
    health),)
