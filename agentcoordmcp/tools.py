"""The MCP tools, as data: one entry per tool, each one daemon request.

An entry names the protocol Struct it sends, how the tool's arguments become
that Struct (the Struct's own fields, minus the transport fields and what the
server sets itself), the ctl command whose option help describes the
arguments, and the ctl function that renders `--json`. The input schema is
the Struct's (msgspec.json.schema), so the wire protocol stays the one
definition; ids are validated by the daemon exactly as for ctl.

A new request's tool is one `Tool(...)` entry in TOOLS.

Nothing here speaks MCP: `call` returns a plain `Outcome` the server turns
into a CallToolResult (agentcoordmcp/server.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from agentcoordctl import (
    answer, batches, claims, client, doctor, events, feed, heartbeat, options, ready, status,
    wait,
)
from agentcoordctl.render import printable
from agentcoordctl.spec import Command, Group, Opt
from agentcoordd import protocol as p

# Set per call by the server (who asks, on which backend, how long it waits), never by the agent.
TRANSPORT_FIELDS = ("caller", "selection", "timeout", "json_payload")
# What an agent reads in `exit_class` for each exit code (docs/mcp.md).
EXIT_CLASSES = {p.EXIT_USAGE: "usage", p.EXIT_OPERATIONAL: "unknown",
                p.EXIT_CLAIM_REFUSED: "refused"}
# A wait tool waits this long without wait_seconds, and never longer than WAIT_CAP
# (an MCP host's own call timeout is minutes, not hours); the call's timeout adds WAIT_SLACK.
WAIT_DEFAULT = 60.0
WAIT_CAP = 600.0
WAIT_SLACK = 2.0
# Definitions only the transport fields use.
SCHEMA_DEFS_DROPPED = ("Caller", "Selection")


class UsageError(Exception):
    """The tool call is not one the request takes: exit_class usage, nothing sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _payload_json(request: Any, response: p.Response) -> Any:
    return options.json_output(response)


def _doctor_json(request: Any, response: p.Response) -> Any:
    payload = response.payload
    return doctor.json_report(payload) if isinstance(payload, dict) else None


def _wait_answer_json(request: Any, response: p.Response) -> Any:
    """What `wait --until-answered --json` prints: the condition, whether it was met, and the
    answer (or `timed_out`)."""
    payload = response.payload if isinstance(response.payload, dict) else {}
    met = response.exit_code == p.EXIT_OK
    outcome = {"condition": "until-answered", "met": met, "detail": payload.get("detail"),
               "batch_id": request.batch_id, "event_id": request.event_id}
    if met:
        return {**outcome, "answer": payload.get("answer"), "request": payload.get("request"),
                "answers": payload.get("answers")}
    return {**outcome, "timed_out": True} if payload.get("timed_out") else outcome


def _error_line(response: p.Response) -> str | None:
    return printable(response.error) if response.error else None


class Tool(msgspec.Struct, frozen=True):
    name: str
    request: type  # the protocol Struct this tool sends
    description: str
    command: Command | None = None  # the ctl command whose option help describes the arguments
    # What the matching `agentcoordctl … --json` prints on stdout, and its stderr error line.
    render: Callable[[Any, p.Response], Any] = _payload_json
    message: Callable[[p.Response], str | None] = _error_line
    # Fields the server sets (not offered to the agent), with their values.
    fixed: Mapping[str, Any] = {}
    # exit code -> exit_class where the command's codes mean something else (batch-audit's 1).
    exit_classes: Mapping[int, str] = {}
    read_only: bool = False
    # Argument help where the ctl option's dest is not the field's name.
    notes: Mapping[str, str] = {}
    # A wait: the call's timeout follows its wait_seconds (default WAIT_DEFAULT, capped).
    waits: bool = False


def _command(module: Any, name: str) -> Command:
    return next(c for c in module.COMMANDS if c.path == (name,))


TOOLS: tuple[Tool, ...] = (
    Tool("claim", p.Claim,
         "Acquire or renew the lease on an issue/PR (repo + target). Refused (exit_class "
         "refused) while another agent's claim is live or stale. keep_alive: {} has agentcoordd "
         "renew the lane's heartbeat until this agent host exits.",
         _command(claims, "claim")),
    Tool("claim_next", p.ClaimNext,
         "Claim the first ready lane of a batch this agent may take (its own lanes and pool "
         "lanes; priority, then manifest order) with the ordinary claim; refused (exit_class "
         "refused) when nothing is ready, with the counts of blocked, held and closed lanes.",
         _command(claims, "claim")),
    Tool("ready", p.Ready,
         "The lanes of a batch that can start now, and for every other lane why not "
         "(blocked_on, held by whom with liveness, closed with its terminal).",
         _command(ready, "ready"), read_only=True),
    Tool("heartbeat", p.Heartbeat,
         "Say you are alive and what you are doing (status, phase, target). keep_alive: {} has "
         "agentcoordd renew it until this agent host exits.",
         _command(heartbeat, "heartbeat")),
    Tool("release", p.Release,
         "Release your claim: plain, a structured handoff (handoff_to, handoff_note), or a "
         "terminal closeout (terminal: done|abandoned|superseded, pr_state, evidence_url).",
         _command(claims, "release")),
    Tool("status", p.Status,
         "Coordination state. Scope it: repo + target for one issue/PR, or batch_id for one "
         "batch (unscoped reads everything).",
         _command(status, "status"), read_only=True),
    Tool("record_event", p.RecordEvent,
         "Append an immutable event to a batch (type, lane, status, message; typed signals in "
         "`typed`: help_requested reason, escalation_requested from_route/to_route/evidence, "
         "error severity/category, human_intervention kind).",
         _command(events, "record-event")),
    Tool("batch_audit", p.BatchAudit,
         "Telemetry-completeness gate of a batch: verdict complete, incomplete (exit_class "
         "incomplete) or unknown.",
         _command(batches, "batch-audit"), exit_classes={p.EXIT_USAGE: "incomplete"},
         read_only=True),
    Tool("doctor", p.Doctor,
         "Can coordination be trusted here: backend access and layout (deep: every record), "
         "this machine's identity.",
         _command(doctor, "doctor"), render=_doctor_json, message=doctor.error_line,
         fixed={"client_version": client.CLIENT_VERSION, "stack": False}, read_only=True,
         notes={"prefixes": "Probe these prefixes instead of the default (a directory is "
                "listed, a record path read): doctor's --doctor-prefix."}),
    Tool("answer", p.Answer,
         "Answer a help_requested or escalation_requested event of a batch (to_event = its "
         "event_id): records help_answered / escalation_answered with reply_to.",
         _command(answer, "answer")),
    Tool("wait_answer", p.WaitAnswered,
         "Wait until a help/escalation request (event_id) has an answer: met with the "
         "earliest answer, or timed_out (exit_class unknown: decide without it or wait again). "
         f"wait_seconds defaults to {WAIT_DEFAULT:g}, at most {WAIT_CAP:g}.",
         _command(wait, "wait"), render=_wait_answer_json, fixed={"poll_seconds": 1.0},
         waits=True, read_only=True,
         notes={"wait_seconds": "Seconds to wait for the answer."}),
    Tool("events", p.Events,
         "A batch's events in (at, event_id) order, each with its cursor; pass the last "
         "cursor you handled as `after` to get only what happened since (nothing lost or "
         "repeated).",
         _command(feed, "events"),
         fixed={"follow": False, "until_type": None, "wait_seconds": None, "poll_seconds": 1.0},
         read_only=True, notes={"types": "Only events of these types (--type)."}),
)
BY_NAME = {tool.name: tool for tool in TOOLS}


# ---- configuration -------------------------------------------------------------------


class Config(msgspec.Struct, frozen=True):
    """The server's identity and liveness binding (its arguments / environment)."""

    agent_id: str | None = None  # AGENT_COORD_AGENT_ID / --agent-id: every call's agent_id
    watch: str = "parent"  # keep-alive lanes watch: parent | auto | none | a pid
    parent_pid: int = 0  # the agent host (the server's parent at start)


def watch_default(config: Config) -> dict[str, Any]:
    """The keep-alive fields a lane registered through this server gets by default."""
    if config.watch == "parent":
        return {"watch_pid": config.parent_pid} if config.parent_pid > 1 else {}
    if config.watch == "auto":
        return {"watch_auto": True}
    if config.watch == "none":
        return {}
    return {"watch_pid": int(config.watch)}


# ---- schemas -------------------------------------------------------------------------


def _help(command: Command | None) -> dict[str, str]:
    """dest -> the ctl option's help (the CLI's words for the same field)."""
    found: dict[str, str] = {}
    if command is None:
        return found
    for param in command.params:
        opts = param.options if isinstance(param, Group) else (param,)
        for opt in opts:
            if isinstance(opt, Opt) and opt.help:
                found.setdefault(opt.dest, opt.help)
    return found


def input_schema(tool: Tool, config: Config) -> dict[str, Any]:
    """The request Struct's JSON Schema without the transport fields, the tag and what
    the server sets; agent_id optional (and fixed) when the server is configured with one."""
    full = msgspec.json.schema(tool.request)
    defs = dict(full["$defs"])
    root = dict(defs.pop(tool.request.__name__))
    for name in SCHEMA_DEFS_DROPPED:
        defs.pop(name, None)
    hidden = {"op", *TRANSPORT_FIELDS, *tool.fixed}
    properties = {k: dict(v) for k, v in root["properties"].items() if k not in hidden}
    required = [k for k in root.get("required", []) if k not in hidden]
    helps = {**_help(tool.command), **tool.notes}
    for name, prop in properties.items():
        if name in helps:
            prop["description"] = helps[name]
    if "agent_id" in properties and config.agent_id:
        required = [k for k in required if k != "agent_id"]
        properties["agent_id"]["default"] = config.agent_id
        properties["agent_id"]["description"] = (
            f"This server's agent id ({config.agent_id}); another value is refused.")
    if "keep_alive" in properties:
        properties["keep_alive"]["description"] = (
            "Register the lane for renewal by agentcoordd ({} for the defaults). By default it "
            "ends when this MCP server's agent host exits.")
    schema: dict[str, Any] = {"type": "object", "properties": properties,
                              "required": required, "additionalProperties": False}
    if defs:
        schema["$defs"] = defs
    return schema


# ---- a call --------------------------------------------------------------------------


class Outcome(msgspec.Struct):
    """A tool's answer: `output` is what `--json` prints (None: nothing), `lines` what
    ctl prints on stderr; a failure carries its exit_class and one-line message."""

    exit_code: int
    output: Any = None
    lines: list[str] = []
    message: str | None = None
    exit_class: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == p.EXIT_OK

    def envelope(self) -> dict[str, Any]:
        """A failure as the agent reads it."""
        return {"exit_class": self.exit_class, "exit_code": self.exit_code,
                "message": self.message, "output": self.output, "stderr": self.lines}


def build(tool: Tool, arguments: Mapping[str, Any] | None, config: Config) -> Any:
    """The request the tool call sends; UsageError when the arguments are not its fields."""
    args = dict(arguments or {})
    fields = set(tool.request.__struct_fields__) - set(TRANSPORT_FIELDS) - set(tool.fixed)
    unknown = sorted(k for k in args if k not in fields)
    if unknown:
        raise UsageError(f"unknown argument for {tool.name}: {_short(unknown[0])} (takes: "
                         f"{', '.join(sorted(fields))})")
    if "agent_id" in fields and config.agent_id:
        given = args.get("agent_id")
        if given is not None and given != config.agent_id:
            raise UsageError(
                f"agent_id {_short(given)!r} is not this server's agent id {config.agent_id!r} "
                "(set by AGENT_COORD_AGENT_ID / --agent-id); omit agent_id")
        args["agent_id"] = config.agent_id
    if isinstance(args.get("keep_alive"), dict):
        keep_alive = args["keep_alive"]
        if keep_alive.get("watch_pid") is None and not keep_alive.get("watch_auto"):
            args["keep_alive"] = {**keep_alive, **watch_default(config)}
    args.update(tool.fixed)
    try:
        return msgspec.convert(args, tool.request)
    except msgspec.ValidationError as exc:
        reason, _, where = str(exc).partition(" - at `$.")
        field = where.rstrip("`") or tool.name
        raise UsageError(f"invalid argument {field}: {reason}") from None


def _short(value: Any) -> str:
    text = p.one_line(str(value))
    return text if len(text) <= 80 else text[:77] + "..."


def classify(tool: Tool, exit_code: int) -> str:
    return tool.exit_classes.get(exit_code) or EXIT_CLASSES.get(exit_code, "unknown")


def call(tool: Tool, arguments: Mapping[str, Any] | None, config: Config,
         env: Mapping[str, str] | None = None) -> Outcome:
    """One tool call: build the request, send it as ctl does (autostart included), and
    answer with what `agentcoordctl … --json` would print. Blocking (run it in a thread)."""
    env = os.environ if env is None else env
    try:
        message = build(tool, arguments, config)
    except UsageError as exc:
        return Outcome(p.EXIT_USAGE, message=exc.message, lines=[exc.message], exit_class="usage")
    message.caller = client.caller(env)
    timeout = None
    if tool.waits:
        seconds = message.wait_seconds
        message.wait_seconds = min(WAIT_DEFAULT if seconds is None else max(seconds, 0.0), WAIT_CAP)
        timeout = message.wait_seconds + WAIT_SLACK
    notices: list[str] = []
    try:
        response, _welcome = client.request(message, timeout=timeout, env=env,
                                            notify=notices.append)
    except client.ClientError as exc:
        return Outcome(exc.exit_code, message=exc.message, lines=[*notices, exc.message],
                       exit_class=classify(tool, exc.exit_code))
    lines = [*notices, *options.diagnostics(response)]
    output = tool.render(message, response)
    if response.exit_code == p.EXIT_OK:
        return Outcome(p.EXIT_OK, output=output, lines=lines)
    return Outcome(response.exit_code, output=output, lines=lines,
                   message=tool.message(response), exit_class=classify(tool, response.exit_code))
