"""doctor: is coordination trustworthy on this machine right now?

    agentcoordctl doctor [--json|--stack-json] [--deep] [--doctor-prefix P]...
                         [--daemon] [--state-root PATH|--api-url URL|
                          --etcd-endpoints URLS|--backend OWNER/REPO]

The daemon runs the checks (agentcoordd/coord/doctor.py) and returns three
renderings' worth of data; this module prints one of them: the spec's text
lines, the spec's `--json` report, or the stack component contract v1
(`--stack-json`). `--daemon` adds our daemon section to text and `--json`
(kept out of the default output so the spec's key sets stay exact).

Under --stack-json every usage error exits 64 and prints no JSON, and exactly
one direct backend selector is required (environment defaults do not count).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from agentcoordctl.compat import AGENT_COORD
from agentcoordctl import client, spec
from agentcoordctl.options import BACKEND, JSON, Globals, dump_json, eprint, say_notices
from agentcoordctl.render import printable
from agentcoordctl.spec import Exit, Opt
from agentcoordd import protocol as p

STACK_SELECTOR_ERROR = (
    "doctor --stack-json requires exactly one of --state-root, --api-url, --etcd-endpoints, "
    "or --backend"
)


def doctor(*, json: bool, stack_json: bool, deep: bool, doctor_prefix: list[str] | None,
           daemon: bool, selection: p.Selection) -> None:
    state_root, api_url = selection.state_root, selection.api_url
    etcd_endpoints, backend = selection.etcd_endpoints, selection.backend
    if stack_json:
        if json or daemon:
            eprint(f"doctor --{'json' if json else 'daemon'} and --stack-json are mutually exclusive")
            raise Exit(p.EXIT_STACK_USAGE)
        if sum(1 for v in (state_root, api_url, etcd_endpoints, backend) if v) != 1:
            eprint(STACK_SELECTOR_ERROR)
            raise Exit(p.EXIT_STACK_USAGE)
    message = p.Doctor(deep=deep, stack=stack_json, prefixes=list(doctor_prefix or []),
                       client_version=client.CLIENT_VERSION, selection=selection)
    message.caller = client.caller()
    try:
        response, _welcome = client.request(message, timeout=Globals.timeout)
    except client.ClientError as exc:
        eprint(exc.message)
        if stack_json:
            print(dump_json(unreachable_stack(exc.message, state_root, api_url, etcd_endpoints,
                                              backend, deep)))
        raise Exit(exc.exit_code) from None
    say_notices(response)
    for warning in response.warnings:
        eprint(f"warning: {warning}")
    payload = response.payload
    line = error_line(response, stack_json)
    if line:
        eprint(line)
    if not isinstance(payload, dict):
        raise Exit(response.exit_code)
    if stack_json:
        print(dump_json(payload["stack"]))
    elif json:
        print(dump_json(json_report(payload, daemon)))
    else:
        print(text(printable(payload["report"]), printable(payload.get("daemon")) if daemon else None))
    raise Exit(response.exit_code)


def error_line(response: p.Response, stack_json: bool = False) -> str | None:
    """The one stderr line of a failed doctor: the daemon's error, else (not under
    --stack-json) the report's, as agent-coord prints it."""
    payload = response.payload
    if not isinstance(payload, dict):
        return response.error or None
    error = (payload.get("report") or {}).get("error")
    if not stack_json and response.exit_code != p.EXIT_OK and error:
        return printable(error)  # the report names it too; agent-coord's stderr line
    return None


def json_report(payload: dict[str, Any], daemon: bool = False) -> dict[str, Any]:
    """What `doctor --json [--daemon]` prints: the spec's report (and our daemon section)."""
    report = dict(payload["report"])
    if daemon:
        report["daemon"] = payload.get("daemon")
    return report


# ---- text ------------------------------------------------------------------------


def _dash(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def text(report: dict[str, Any], daemon: dict[str, Any] | None = None) -> str:
    """The spec's line shapes first (doctor-deep-text.txt), then what carries news."""
    kind = report.get("backend")
    lines = [
        "agent-coord doctor",
        f"version: {report.get('version')}",
        f"backend: {kind}",
        f"backend_repo: {report.get('backend_repo') or ''}",
    ]
    if kind == "local":
        lines.append(f"state_root: {report.get('state_root') or ''}")
    elif kind in ("http", "etcd"):
        lines.append(f"backend_url: {report.get('backend_url') or ''}")
    lines.append(f"mode: {'deep' if report.get('deep') else 'lightweight'}")
    lines.append(f"status: {report.get('status')}")
    identity = report.get("environment_identity")
    if identity is not None:
        lines += [
            f"machine_id: {_dash(identity.get('machine_id'))}",
            f"session_id: {_dash(identity.get('session_id'))}",
            f"session_source: {identity.get('session_source')}",
        ]
        if kind == "http":
            lines.append(f"token_machine: {_dash(identity.get('token_machine'))}")
        lines.append(f"machine_match: {identity.get('machine_match')}")
    if report.get("split_brain_env_file"):
        lines.append(f"split_brain_env_file: {report['split_brain_env_file']}")
    if report.get("error"):
        lines.append(f"error: {report['error']}")
    if report.get("failing_path"):
        lines.append(f"failing_path: {report['failing_path']}")
    if report.get("rotation_command"):
        lines.append(f"rotate_token: {report['rotation_command']}")
    for item in report.get("env_file_errors") or []:
        lines.append(f"env_file_error: {item.get('path')}: {item.get('error')}")
    if report.get("authenticated_machine") is not None:
        scopes = report.get("scopes") or {}
        lines.append(f"authenticated_machine: {report['authenticated_machine']}")
        lines.append("read_scopes: " + _scopes(scopes.get("read")))
        lines.append("write_scopes: " + _scopes(scopes.get("write")))
    for probe in report.get("probes") or []:
        line = f"probe {probe.get('prefix')} ({probe.get('method')}): {probe.get('status')}"
        if probe.get("error"):
            line += f" — {probe['error']}"
        lines.append(line)
    for family in report.get("families") or []:
        line = f"{family.get('prefix')}: {family.get('status')} ({family.get('records')} records"
        if family.get("invalid_count"):
            line += f", {family['invalid_count']} invalid"
        line += ")"
        if family.get("failing_path"):
            line += f" {family['failing_path']}"
        if family.get("error"):
            line += f" — {family['error']}"
        lines.append(line)
        for bad in (family.get("invalid") or [])[1:]:
            lines.append(f"  invalid: {bad.get('path')}")
    if daemon is not None:
        lines += daemon_text(daemon)
    return "\n".join(lines)


def _scopes(values: Any) -> str:
    if not values:
        return "-"
    return ",".join("(all state)" if v == "" else str(v) for v in values)


def daemon_text(daemon: dict[str, Any]) -> list[str]:
    lanes = daemon.get("lanes") or {}
    outbox = daemon.get("outbox") or {}
    service = daemon.get("service") or {}
    configured = daemon.get("configured_backend") or {}
    version = f"daemon_version: {daemon.get('daemon_version')}"
    if daemon.get("version_mismatch"):
        version += (f" (client {daemon.get('client_version')}: MISMATCH — restart the daemon: "
                    "agentcoordctl daemon stop)")
    lines = [
        "daemon",
        f"socket: {daemon.get('socket')}",
        f"pid: {daemon.get('pid')}",
        version,
        f"client_version: {daemon.get('client_version')}",
        f"uptime_seconds: {daemon.get('uptime_seconds')}",
        "keep_alive_lanes: " + (f"{lanes.get('count')} ({lanes.get('failing')} failing)"
                                if lanes.get("available") else "not available"),
        f"outbox_depth: {_dash(outbox.get('depth'))}"
        + (f" (oldest {outbox['oldest_age_seconds']:.0f}s)"
           if isinstance(outbox.get("oldest_age_seconds"), (int, float)) else "")
        + (f" ({outbox['error']})" if outbox.get("error") else "")
        + (f"; {outbox['waiting_for_token']} {outbox.get('hint', 'waiting for a token')}"
           if outbox.get("waiting_for_token") else ""),
    ]
    if service.get("installed"):
        lines.append(f"service: {service.get('manager')} installed, state "
                     f"{_dash(service.get('state'))}, started by {service.get('started_by')}")
    else:
        lines.append(f"service: not installed (started by {service.get('started_by')})")
    if configured.get("error"):
        lines.append(f"configured_backend: error — {configured['error']}")
    else:
        lines.append(f"configured_backend: {configured.get('kind')} {configured.get('location')} "
                     f"(from {configured.get('source')})")
    notes = daemon.get("notifications") or {}
    if notes:
        targets = [f"{k} {notes[k]}" for k in ("webhook", "command") if notes.get(k)]
        lines.append("notifications: " + (
            f"{' and '.join(targets)}, signals {','.join(notes.get('signals') or [])}, "
            f"{_dash(notes.get('depth'))} pending ({_dash(notes.get('failing'))} failing)"
            if targets else "not configured"))
        lines += [f"notifications_error: {error}" for error in notes.get("errors") or []]
    for item in daemon.get("env_files") or []:
        if item.get("status") == "absent":
            continue
        detail = item.get("error") if item.get("status") == "error" else (
            f"selects {_dash(item.get('selects'))}, machine {_dash(item.get('machine_id'))}")
        lines.append(f"env_file: {item.get('path')}: {item.get('status')} ({detail})")
    return lines


# ---- daemon unreachable under --stack-json ----------------------------------------


def unreachable_stack(error: str, state_root: str | None, api_url: str | None,
                      etcd_endpoints: str | None, backend: str | None, deep: bool) -> dict[str, Any]:
    """A failed component when agentcoordd cannot answer (aggregators still get JSON)."""
    kind = ("local" if state_root else "http" if api_url else "etcd" if etcd_endpoints
            else "github")
    machine = (os.environ.get("AGENT_COORD_MACHINE_ID") or "").strip() or None
    session, source = None, "unset"
    for name, label in (("AGENT_COORD_SESSION_ID", "agent_coord_session_id"),
                        ("CODEX_THREAD_ID", "codex_thread_id")):
        value = (os.environ.get(name) or "").strip()
        if value:
            session, source = value, label
            break
    resources = ({"id": "resources.deep", "status": "skipped",
                  "summary": "Resource evidence was not collected because the backend is unavailable",
                  "details": {"mode": "deep", "reason": "backend_unavailable"}, "guidance": None}
                 if deep else
                 {"id": "resources.deep", "status": "skipped",
                  "summary": "Deep resource evidence was not requested",
                  "details": {"mode": "shallow"}, "guidance": None})
    return {
        "schema_version": 1,
        "component": "agent-coordination",
        "status": "failed",
        "checks": [
            {"id": "cli.version", "status": "healthy", "summary": "agent-coord CLI is ready",
             "details": {"version": client.CLIENT_VERSION}, "guidance": None},
            {"id": "backend.readability", "status": "failed",
             "summary": "Coordination backend is not readable",
             "details": {"backend": kind, "backend_repo": backend,
                         "backend_url": api_url or etcd_endpoints, "state_root": state_root,
                         "error": error},
             "guidance": "Start agentcoordd (systemctl --user start agentcoordd.socket, or run "
                         "agentcoordd), then rerun the doctor."},
            resources,
            {"id": "identity.machine", "status": "skipped",
             "summary": "Machine identity was not verified against an authenticated backend "
                        "token machine",
             "details": {"client_version": client.CLIENT_VERSION, "machine_id": machine,
                         "session_id": session, "session_source": source,
                         "token_machine": None, "machine_match": "unverified"},
             "guidance": None},
        ],
    }


def _usage_exit(argv: Sequence[str]) -> int:
    """Usage errors under --stack-json are exit 64 (the stack contract), not 1."""
    stack_json = any(len(w) >= 7 and "--stack-json".startswith(w.partition("=")[0]) for w in argv)
    return p.EXIT_STACK_USAGE if stack_json else p.EXIT_USAGE  # --stack (a unique prefix) too


COMMANDS = (spec.Command(
    ("doctor",), "Check backend access and layout (--deep: every record) and this machine's "
    "identity.",
    (JSON,
     Opt("--stack-json", "stack_json", "flag",
         help="Component contract v1 for stack aggregators (exit 0/1/2, 64 usage)."),
     Opt("--deep", "deep", "flag",
         help="Read and validate every record; on HTTP also the token's machine and scopes."),
     Opt("--doctor-prefix", "doctor_prefix", "many", metavar="PREFIX",
         help="Probe this prefix instead of the default (directory: listed; record path: read)."),
     Opt("--daemon", "daemon", "flag",
         help="Also report agentcoordd: versions, uptime, lanes, outbox, service, configured "
         "backend."),
     BACKEND),
    doctor, usage_exit=_usage_exit, **AGENT_COORD),)
