"""Keep-alive options (claim/heartbeat/run) and `lanes [--json]` / `lanes stop --agent-id ID`."""

from __future__ import annotations

from typing import Any

from agentcoordctl import spec
from agentcoordctl.options import JSON, OPT_AGENT_ID, fail, positive_seconds, run
from agentcoordctl.spec import Arg, Group, Opt
from agentcoordd import protocol as p

KEEP_ALIVE_FLAG = Opt("--keep-alive", "keep_alive", "flag", panel="Keep-alive",
                      help="Have agentcoordd renew this lane's heartbeat until the lane ends.")
RENEW_EVERY = Opt("--renew-every", "renew_every", "custom", parse=positive_seconds,
                  metavar="SECONDS", panel="Keep-alive",
                  help="Renewal interval (default: heartbeat TTL / 3).")
WATCH_PID = Opt("--watch-pid", "watch_pid", metavar="PID|auto", panel="Keep-alive",
                help="End renewal when this process exits; auto: the nearest codex/claude "
                "ancestor (hosts from $AGENT_COORD_AGENT_HOSTS).")
IDLE_TIMEOUT = Opt("--idle-timeout", "idle_timeout", "custom", parse=positive_seconds,
                   metavar="SECONDS", panel="Keep-alive",
                   help="End renewal when no ctl call for this agent came for this long "
                   "(default 7200; none while a watched process lives).")
ON_EXIT = Opt("--on-exit", "on_exit", metavar="release|keep", panel="Keep-alive",
              help="When the watched process exits: release the claim for the next agent "
              "(default) or keep it until its heartbeat dies.")
HEARTBEAT_TTL = Opt("--heartbeat-ttl", "heartbeat_ttl", "int", metavar="SECONDS",
                    panel="Keep-alive",
                    help="TTL of the lane's heartbeat (claim --keep-alive / run; default 900).")


def keep_alive(values: dict[str, Any]) -> p.KeepAlive | None:
    """The wire form of the keep-alive options (the group's build)."""
    return keep_alive_request(values["keep_alive"], renew_every=values.get("renew_every"),
                              watch_pid=values.get("watch_pid"),
                              idle_timeout=values.get("idle_timeout"),
                              heartbeat_ttl=values.get("heartbeat_ttl"),
                              on_exit=values.get("on_exit"))


# claim --keep-alive sets its lane heartbeat's TTL; heartbeat --keep-alive has --ttl for that.
KEEP_ALIVE = Group("keep_alive", (KEEP_ALIVE_FLAG, RENEW_EVERY, WATCH_PID, IDLE_TIMEOUT,
                                  HEARTBEAT_TTL, ON_EXIT), keep_alive)
KEEP_ALIVE_HEARTBEAT = Group("keep_alive", (KEEP_ALIVE_FLAG, RENEW_EVERY, WATCH_PID, IDLE_TIMEOUT,
                                            ON_EXIT), keep_alive)


def keep_alive_request(enabled: bool, *, renew_every: float | None, watch_pid: str | None,
                       idle_timeout: float | None, heartbeat_ttl: int | None = None,
                       on_exit: str | None = None) -> p.KeepAlive | None:
    """The wire form of the keep-alive flags; the flags without --keep-alive are a usage error."""
    given = [name for name, value in (("--renew-every", renew_every), ("--watch-pid", watch_pid),
                                      ("--idle-timeout", idle_timeout),
                                      ("--heartbeat-ttl", heartbeat_ttl),
                                      ("--on-exit", on_exit)) if value is not None]
    if not enabled:
        if given:
            raise fail(f"{given[0]} needs --keep-alive", p.EXIT_USAGE)
        return None
    pid: int | None = None
    auto = False
    if watch_pid is not None:
        if watch_pid.strip().lower() == "auto":
            auto = True
        elif watch_pid.strip().isdigit() and int(watch_pid) > 0:
            pid = int(watch_pid)
        else:
            raise fail(f"--watch-pid must be a process id or auto: {watch_pid}", p.EXIT_USAGE)
    if on_exit is not None and on_exit not in ("release", "keep"):
        raise fail(f"--on-exit must be release or keep: {on_exit}", p.EXIT_USAGE)
    return p.KeepAlive(renew_every=renew_every, watch_pid=pid, watch_auto=auto,
                       idle_timeout=idle_timeout, heartbeat_ttl=heartbeat_ttl, on_exit=on_exit)


def lanes(action: str | None, agent_id: str | None, json: bool, force: bool = False) -> None:
    if action is None:
        if force:
            raise fail("--force is for `lanes stop`", p.EXIT_USAGE)
        run(p.Lanes(agent_id=agent_id), as_json=json, text=render_lanes)
    if action != "stop":
        raise fail(f"unknown lanes action: {action} (expected: stop)", p.EXIT_USAGE)
    if not agent_id:
        raise fail("lanes stop needs --agent-id ID", p.EXIT_USAGE)
    run(p.LanesStop(agent_id=agent_id, force=force), as_json=json, text=render_stopped)


COMMANDS = (spec.Command(
    ("lanes",), "Keep-alive lanes agentcoordd renews (agent, target, batch, last success/error, "
    "next due, lag, watched pid, state); `lanes stop --agent-id ID` ends one.",
    (Arg("action", "[stop]", "stop: end one agent's lane.", default=None), OPT_AGENT_ID, JSON,
     Opt("--force", "force", "flag", help="stop: lanes another machine or session registered "
         "(recorded as forced_by in the lane's end event; agentcoordctl docs security).")),
    lanes),)


def _age(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}s"


def render_lanes(payload: dict[str, Any]) -> str:
    rows = payload.get("lanes") or []
    if not rows:
        return "no keep-alive lanes" + _outbox_line(payload.get("summary") or {})
    header = ("AGENT", "TARGET", "BATCH", "STATE", "STOP", "LAST SUCCESS", "LAST ERROR", "NEXT DUE",
              "LAG", "WATCH PID")
    table = [header]
    for row in rows:
        state = row.get("state") or "?"
        if state == "fenced" and row.get("new_holder"):
            state = f"fenced (by {row['new_holder']})"
        elif state == "ended" and row.get("end_reason"):
            claim = f"; claim {row['claim']}" if row.get("claim") else ""  # after an exit
            state = f"ended ({row['end_reason']}{claim})"
        target = f"{row['repo']}#{row['target']}" if row.get("repo") and row.get("target") else "-"
        table.append((
            str(row.get("agent_id")), target, row.get("batch_id") or "-", state,
            "requested" if row.get("stop_requested") else "-", row.get("last_success") or "-", (row.get("last_error") or "-")[:60],
            _age(row.get("next_due_in")), _age(row.get("lag")),
            str(row.get("watch_pid") or "-"),
        ))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in table]
    summary = payload.get("summary") or {}
    if summary.get("status"):
        lines.append(summary["status"])
    return "\n".join(lines)


def _outbox_line(summary: dict[str, Any]) -> str:
    """Only when events wait in the outbox (the status line says it otherwise)."""
    depth = summary.get("outbox_depth")
    if not depth:
        return ""
    return f"\noutbox: {depth} queued, oldest {_age(summary.get('outbox_oldest_age'))}"


def render_stopped(payload: dict[str, Any]) -> str:
    return "\n".join(f"stopped keep-alive lane {row.get('agent_id')} ({row.get('backend')})"
                     for row in payload.get("stopped") or [])


def lane_state(agent_id: str) -> dict[str, Any] | None:
    """This agent's lane as the daemon lists it (for `run`), or None."""
    from agentcoordctl import client

    message = p.Lanes(agent_id=agent_id)
    message.caller = client.caller()
    response, _ = client.request(message, timeout=10.0)
    rows = (response.payload or {}).get("lanes") if isinstance(response.payload, dict) else None
    return rows[0] if rows else None
