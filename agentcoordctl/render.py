"""Text output: the existing tool's line shapes, built from the daemon's payloads.

Every value a text line shows passes `printable` first: a stored field may
hold a newline, TAB, an escape sequence or a bidi override (U+202E) that would
forge or reorder lines on a terminal. They are shown escaped (`\\n`,
`\\u202e`); the record, and `--json`, keep the value verbatim.
"""

from __future__ import annotations

from typing import Any


def printable(value: Any) -> Any:
    """`value` with every string's non-printable characters escaped (dicts, lists deep)."""
    if isinstance(value, str):
        return value if value.isprintable() else "".join(
            ch if ch.isprintable() else _escape(ch) for ch in value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _label(record: dict[str, Any]) -> str:
    return f"{record.get('repo', '?')}#{record.get('target', '?')}"


def _dash(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def claim(payload: dict[str, Any]) -> str:
    record = payload.get("claim") or {}
    return f"claimed {_label(record)} by {record.get('agent_id')} until {record.get('expires_at')}"


def release(payload: dict[str, Any]) -> str:
    record = payload.get("claim") or {}
    action = payload.get("action")
    if action == "already_closed":
        return f"lane already closed for {_label(record)}"
    if action == "already_released":
        return f"already released {_label(record)} by {record.get('agent_id')}"
    return f"released {_label(record)} by {record.get('agent_id')}"


def heartbeat(payload: dict[str, Any]) -> str:
    record = payload.get("heartbeat") or {}
    return f"heartbeat {record.get('agent_id')} {record.get('updated_at')}"


def record_event(payload: dict[str, Any]) -> str:
    event = payload.get("event") or {}
    if payload.get("action") == "already_closed":
        return f"lane already closed for {_label(event)}"
    if payload.get("action") == "reconciled":  # the batch caught up with an existing closeout
        return f"reconciled terminal closeout for {_label(event)}"
    if payload.get("action") == "queued":
        return (f"queued event {event.get('batch_id')} {event.get('event_id')} in the agentcoordd "
                "outbox (retried until delivered; see `agentcoordctl outbox`)")
    return f"recorded event {event.get('batch_id')} {event.get('event_id')}"


def register_batch(payload: dict[str, Any]) -> str:
    batch = payload.get("batch") or {}
    return f"registered batch {batch.get('batch_id') or payload.get('batch_id')}"


def batch_audit(payload: dict[str, Any]) -> str:
    """agent-coord's lines (an unknown verdict: its reason; no lanes: `- no lanes
    registered`), then what only ours reports (archive source, unreadable records)."""
    lines = [f"batch-audit {payload.get('batch_id')} {payload.get('verdict')}"]
    if payload.get("verdict") == "unknown":
        lines.append(f"- {payload.get('reason')}")
    elif not payload.get("lanes"):
        lines.append("- no lanes registered")
    if payload.get("archive_path") and payload.get("lanes"):
        lines.append(f"audited from the archive: {payload['archive_path']}")
    for lane in payload.get("lanes") or []:
        state = ("complete" if lane.get("complete")
                 else "incomplete missing " + ", ".join(lane.get("missing") or []))
        lines.append(f"- lane {lane.get('name') or 'UNKNOWN'} owner {lane.get('owner') or 'UNKNOWN'} "
                     f"{state}")
    for item in payload.get("unreadable") or []:
        lines.append(f"unreadable (left out): {item.get('path')}: {item.get('reason')}")
    return "\n".join(lines)


def host_limit(row: dict[str, Any]) -> str:
    if row.get("status") == "cleared":
        state = f"cleared {row.get('cleared_at')}"
    elif not row.get("effective", True):
        state = f"reset {row.get('resets_at')}"
    else:
        state = f"active until {row.get('resets_at') or 'cleared (reset unknown)'}"
    return f"- {row.get('quota_host')}/{row.get('scope')} on {row.get('machine')}: {state}"


def status(payload: dict[str, Any]) -> str:
    lines: list[str] = []
    notes = payload.get("section_notes") or {}

    def section(name: str, rows: list[str]) -> None:
        lines.append(name)
        if rows:
            lines.extend(rows)
        elif notes.get(name):
            lines.append(f"- {notes[name]}")
        else:
            lines.append("- none")

    section("claims", [
        f"- {_label(c)} {c.get('status')} {c.get('agent_id')} branch {_dash(c.get('branch'))} "
        f"expires {c.get('expires_at')}"
        for c in payload.get("claims") or []
    ])
    section("heartbeats", [
        f"- {h.get('agent_id')} {h.get('status')} {h.get('liveness')} {_dash(h.get('target'))} "
        f"updated {h.get('updated_at')}"
        for h in payload.get("heartbeats") or []
    ])
    batches: list[str] = []
    for batch in payload.get("batches") or []:
        batches.append(f"- {batch.get('batch_id')}" + batch_records_line(batch))
        for lane in batch.get("lanes") or []:
            if not isinstance(lane, dict):
                batches.append("  - lane (malformed)")
                continue
            batches.append(
                f"  - lane {lane.get('name')} owner {_dash(lane.get('owner'))} targets "
                f"{_dash(lane.get('targets'))} status {_dash(lane.get('status'))} "
                f"{_dash(lane.get('liveness'))} deps {_dash(lane.get('deps'))} blocked_on "
                f"{_dash(lane.get('blocked_on'))}" + _lane_state_text(lane)
                + (f" route {lane['route']}" if lane.get("route") else "")
            )
        batches.extend(batch_record_rows(batch))
    section("batches", batches)
    section("events", [status_event(e) for e in payload.get("events") or []])
    if "open_requests" in payload:  # batch scope: requests nobody answered yet
        section("open requests", [open_request(r) for r in payload["open_requests"]])
    if "host_limits" in payload:  # usage limits of quota pools (docs/capacity.md)
        section("host limits", [host_limit(r) for r in payload["host_limits"]])
    if "archive" in payload:  # --include-archived
        section("archive", [
            f"- {a.get('path')} {a.get('record_family')} source "
            f"{a.get('source_path') or ','.join(a.get('source_paths') or [])} "
            f"delete_after {a.get('delete_after')}"
            for a in payload["archive"]])
    scope, degraded = _scope_notes(payload)
    if scope:
        lines.append(scope)
    if degraded:
        lines.append("degraded")
        lines.extend(f"- {note}" for note in degraded)
    return "\n".join(lines)


def _lane_state_text(lane: dict[str, Any]) -> str:
    """The lane's own state after agent-coord's columns (docs/compat.md#lane-holders):
    ` state held holder a4 live`, ` state closed done`, ` state not_started`."""
    state = lane.get("lane_state")
    if not state:
        return ""
    text = f" state {state}"
    if lane.get("closed_as"):
        text += f" {lane['closed_as']}"
    holder = lane.get("holder")
    if isinstance(holder, dict) and holder.get("agent_id"):
        text += f" holder {holder['agent_id']} {_dash(holder.get('liveness'))}"
    return text


def unknown_or(value: Any) -> str:
    """A metric as the tiles show it: unknown stays unknown (never 0)."""
    return "unknown" if value is None or value == "—" else str(value)


def batch_records_line(batch: dict[str, Any]) -> str:
    """What follows a batch's id in status text: its merge authority, only when declared."""
    authority = batch.get("merge_authority")
    return f" merge_authority {authority}" if isinstance(authority, str) else ""


def batch_record_rows(batch: dict[str, Any]) -> list[str]:
    """The batch's own records under its lanes (additive lines, only when present)."""
    rows = []
    blocker = batch.get("blocker")
    if isinstance(blocker, dict):
        rows.append(f"  - blocked: {blocker.get('message')} decisions "
                    f"{'; '.join(map(str, blocker.get('decisions') or []))}"
                    + (f" recommended {blocker['recommendedReply']}" if blocker.get("recommendedReply") else ""))
    usage = batch.get("usage_totals")
    if isinstance(usage, dict):
        for model, m in sorted((usage.get("tokens_by_model") or {}).items()):
            rows.append(f"  - usage {model} input {unknown_or(m.get('input_tokens'))} output "
                        f"{unknown_or(m.get('output_tokens'))} cost USD {unknown_or(m.get('cost'))}")
        t = usage.get("batch_totals") or {}
        rows.append(f"  - usage total input {unknown_or(t.get('input_tokens'))} output "
                    f"{unknown_or(t.get('output_tokens'))} cost USD {unknown_or(t.get('cost'))}")
    completion = batch.get("completion")
    if isinstance(completion, dict):
        rows.append(f"  - completed: audit {(completion.get('audit') or {}).get('verdict')}")
    return rows


def status_event(e: dict[str, Any]) -> str:
    """agent-coord's event line: batch, lane, type, phase (else status), agent, time,
    then the message when there is one."""
    line = (f"- {e.get('batch_id')} {e.get('lane') or '-'} {e.get('type')} "
            f"{e.get('phase') or e.get('status') or '-'} by {e.get('agent_id') or '-'} at {e.get('at')}")
    return line + (f" {e['message']}" if e.get("message") else "")


def age(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return "age unknown"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def open_request(r: dict[str, Any]) -> str:
    """One open help/escalation request: what `answer --to-event` needs, and its age."""
    what = r.get("reason") or (f"{r.get('from_route')} -> {r.get('to_route')}"
                               if r.get("type") == "escalation_requested" else None)
    return (f"- {r.get('event_id')} {r.get('batch_id')} {r.get('type')} open {age(r.get('age_seconds'))} "
            f"lane {_dash(r.get('lane'))} agent {_dash(r.get('agent_id'))}"
            + (f" {what}" if what else "") + (f": {r['message']}" if r.get("message") else ""))


def _scope_notes(payload: dict[str, Any]) -> tuple[str, list[str]]:
    """(the `scope:` line, the degraded notes without the scope's own). A section a
    scope does not read is the scope, not a fault: JSON keeps it in `degraded`
    (agent-coord's fields), text names it on one `scope` line."""
    scope = payload.get("scope") if isinstance(payload.get("scope"), dict) else {}
    kind = scope.get("kind")
    if kind == "target":
        label = f"target {_label(scope)}"
    elif kind == "batch":
        label = f"batch {scope.get('batch_id')}"
    else:
        return "", list(payload.get("degraded") or [])
    own = f"not checked in {kind} scope"
    unchecked = [section for section, text in (payload.get("section_notes") or {}).items()
                 if own in str(text).split("; ")]
    degraded = []
    for note in payload.get("degraded") or []:
        rest = "; ".join(part for part in str(note).split("; ") if part != own)
        if rest and rest not in degraded:
            degraded.append(rest)
    return (f"scope: {label} ({', '.join(unchecked)} not checked)" if unchecked else ""), degraded


VERSION_KEYS = ("schema_version", "lane_closed_schema_version", "archive_schema_version",
                "default_backend", "default_ref")


def version(payload: dict[str, Any]) -> str:
    lines = [f"agentcoordctl {payload.get('version')}"]
    for key in VERSION_KEYS:
        lines.append(f"{key}: {_none(payload.get(key))}")
    daemon = payload.get("daemon_version")
    lines.append(f"daemon_version: {daemon if daemon else 'not running'}")
    if payload.get("daemon_pid"):
        lines.append(f"daemon_pid: {payload['daemon_pid']}")
    lines.append(f"protocol_version: {payload.get('protocol_version')}")
    return "\n".join(lines)


def _none(value: Any) -> str:
    return "none" if value is None else str(value)


def config(payload: dict[str, Any]) -> str:
    return "\n".join([*_config_lines(payload), *_notification_lines(payload.get("notifications"))])


def _notification_lines(notes: Any) -> list[str]:
    """Only when configured (or misconfigured): otherwise agent-coord's text, unchanged."""
    if not isinstance(notes, dict) or not (notes.get("configured") or notes.get("errors")):
        return []
    targets = " and ".join(f"{k} {notes[k]}" for k in ("webhook", "command") if notes.get(k))
    lines = [f"notifications: {targets or 'off'}; signals: {','.join(notes.get('signals') or [])}"]
    return lines + [f"notifications_error: {error}" for error in notes.get("errors") or []]


def _config_lines(payload: dict[str, Any]) -> list[str]:
    retention = payload.get("retention_policy") or {}
    vocab = payload.get("heartbeat_status_vocabulary") or {}
    codes = payload.get("exit_codes") or {}
    return [
        "agent-coord config",
        f"version: {payload.get('version')}",
        f"default_backend: {_none(payload.get('default_backend'))}",
        f"default_claim_ttl_seconds: {payload.get('default_claim_ttl_seconds')}",
        f"default_heartbeat_ttl_seconds: {payload.get('default_heartbeat_ttl_seconds')}",
        f"heartbeat_dead_after_ttl_multiplier: {payload.get('heartbeat_dead_after_ttl_multiplier')}",
        f"retention_policy: hot={retention.get('hot_days')}d,archive={retention.get('archive_days')}d,"
        f"synthetic_hot={retention.get('synthetic_hot_days')}d",
        "dependency_terminal_statuses: " + ",".join(payload.get("dependency_terminal_statuses") or []),
        "heartbeat_working_statuses: " + ",".join(vocab.get("working") or []),
        "heartbeat_terminal_statuses: " + ",".join(vocab.get("terminal") or []),
        "exit_codes: " + ",".join(f"{k}={v}" for k, v in codes.items()),
    ]


def daemon_status(payload: dict[str, Any]) -> str:
    lines = [
        f"agentcoordd {payload.get('version')} running (pid {payload.get('pid')})",
        f"socket: {payload.get('socket')}",
        f"state_dir: {payload.get('state_dir')}",
        f"protocol: {payload.get('protocol')}",
        f"uptime_seconds: {payload.get('uptime_seconds')}",
        f"requests: {payload.get('requests')}",
        f"connections: {payload.get('connections')}",
    ]
    if payload.get("metrics_url"):
        token = payload.get("metrics_token_file")
        lines.append(f"metrics: {payload['metrics_url']}"
                     + (f" (Authorization: Bearer, token in {token})" if token else ""))
    for backend in payload.get("backends") or []:
        lines.append(f"backend: {backend.get('kind')} {backend.get('location')} "
                     f"(from {backend.get('source')})")
    return "\n".join(lines)
