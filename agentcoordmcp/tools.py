"""The MCP tools, as data: one entry per tool, each one daemon request.

An entry names the protocol Struct it sends, what the tool is for (written for
a model: what it does, when to use it) with one worked example of its
arguments, the ctl command whose option help describes the arguments, and the
ctl function that renders `--json`. The input schema is the Struct's
(msgspec.json.schema), so the wire protocol stays the one definition; allowed
values (enums) come from the model's own tables; ids are validated by the
daemon exactly as for ctl.

The daemon and ctl speak in command-line words (`missing required --reason`);
an agent calling a tool knows arguments. Every text a tool returns and every
description it lists passes `in_tool_words` once, at this boundary: `--flag`
becomes the argument it stands for (`typed.reason`).

A new request's tool is one `Tool(...)` entry in TOOLS.

Nothing here speaks MCP: `call` returns a plain `Outcome` the server turns
into a CallToolResult (agentcoordmcp/server.py).
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from agentcoordctl import (
    answer, batches, claims, client, doctor, events, feed, heartbeat, limits, options, ready,
    status, wait,
)
from agentcoordctl.render import printable
from agentcoordctl.spec import Command, Group, Opt
from agentcoordd import protocol as p
from agentcoordd.model import ids, records
from agentcoordd.model.status import LANE_TERMINALS
from agentcoordd.model.typed_events import ANSWER_TYPES, TYPED_EVENTS, TYPED_FIELDS

# Set per call by the server (who asks, on which backend, how long it waits), never by the agent.
TRANSPORT_FIELDS = ("caller", "selection", "timeout", "json_payload")
# What an agent reads in `exit_class` for each exit code (docs/mcp.md).
EXIT_CLASSES = {p.EXIT_USAGE: "usage", p.EXIT_OPERATIONAL: "unknown",
                p.EXIT_CLAIM_REFUSED: "refused"}
# A wait whose condition did not hold within wait_seconds (not an error: call again).
TIMED_OUT = "timed_out"
# A wait tool waits this long without wait_seconds, and never longer than WAIT_CAP
# (an MCP host's own call timeout is minutes, not hours); the call's timeout adds WAIT_SLACK.
WAIT_DEFAULT = 60.0
WAIT_CAP = 600.0
WAIT_SLACK = 2.0
# Claims through these tools are keep-alive lanes watching the agent host unless the call
# passes keep_alive: null: a host that dies frees its claims in seconds (docs/mcp.md).
BOUND_TO_HOST = ("claim", "claim_next")
# Definitions only the transport fields use.
SCHEMA_DEFS_DROPPED = ("Caller", "Selection")
# The agent id an example shows when the server has none configured.
EXAMPLE_AGENT_ID = "worker-parser"


class UsageError(Exception):
    """The tool call is not one the request takes: exit_class usage, nothing sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ---- arguments offered in another shape than their wire field ---------------------------


class Shape(msgspec.Struct, frozen=True):
    """An argument's schema where the Struct's is not what an agent should see, and how
    its value becomes the wire field's (None: as it is)."""

    schema: Mapping[str, Any]
    convert: Callable[[Any], Any] | None = None


def _optional(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"anyOf": [dict(schema), {"type": "null"}], "default": None}


def _typed_schema() -> dict[str, Any]:
    """record-event's typed fields, each with its allowed values where the model's table
    (model.typed_events.TYPED_EVENTS) has them for every type that takes it."""
    properties: dict[str, Any] = {}
    for name in TYPED_FIELDS:
        sets = [rules[name] for rules in TYPED_EVENTS.values() if name in rules]
        prop: dict[str, Any] = {"type": "string"}
        if sets and all(sets):
            prop["enum"] = list(dict.fromkeys(value for values in sets for value in values or ()))
        properties[name] = prop
    return {"type": "object", "properties": properties, "additionalProperties": False,
            "default": {}}


def _manifest_schema() -> dict[str, Any]:
    """A batch manifest as an author writes it: the model's Batch and Lane fields a
    registration takes (the daemon stamps the rest); unknown fields are kept."""
    def picked(struct: type, names: tuple[str, ...]) -> dict[str, Any]:
        props = msgspec.json.schema(struct)["$defs"][struct.__name__]["properties"]
        return {name: props[name] for name in names}

    lane = {"type": "object", "properties": picked(records.Lane, (
        "name", "owner", "pool", "priority", "targets", "depends_on"))}
    batch = picked(records.Batch, ("batch_id", "repo", "objective"))
    batch["lanes"] = {"type": "array", "items": lane, "minItems": 1}
    return {"anyOf": [{"type": "object", "properties": batch, "required": ["lanes"]},
                      {"type": "string", "description": "The manifest as JSON text."}]}


def _capped(name: str, data: bytes, cap: int) -> None:
    if len(data) > cap:
        raise UsageError(f"{name} is larger than {cap} bytes")


def _manifest_bytes(value: Any) -> Any:
    """The manifest as register-batch sends a file's: JSON text within MANIFEST_CAP (an
    object is encoded, a string is taken as its JSON text; the daemon checks the rest)."""
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else \
        msgspec.json.encode(value)
    _capped("manifest", data, p.MANIFEST_CAP)
    return data


def _launch_prompt(value: Any) -> Any:
    if isinstance(value, str):
        _capped("launch_prompt", value.encode("utf-8", "surrogatepass"), p.LAUNCH_PROMPT_CAP)
    return value


# Shapes every tool with that argument offers.
SHAPES: dict[str, Shape] = {
    "typed": Shape(_typed_schema()),
    "terminal": Shape(_optional({"type": "string", "enum": list(LANE_TERMINALS)})),
}
WAIT_SECONDS = Shape(_optional({"type": "number", "minimum": 0, "maximum": WAIT_CAP}))


# ---- rendering ----------------------------------------------------------------------


def _payload_json(request: Any, response: p.Response) -> Any:
    return options.json_output(response)


def _doctor_json(request: Any, response: p.Response) -> Any:
    payload = response.payload
    return doctor.json_report(payload) if isinstance(payload, dict) else None


def _wait_json(condition: str, response: p.Response, found: Callable[[dict[str, Any]], dict],
               **about: Any) -> dict[str, Any]:
    """What `wait --<condition> --json` prints: the condition, whether it was met, what was
    found (or `timed_out`)."""
    payload = response.payload if isinstance(response.payload, dict) else {}
    met = response.exit_code == p.EXIT_OK
    outcome = {"condition": condition, "met": met, "detail": payload.get("detail"), **about}
    if met:
        return {**outcome, **found(payload)}
    return {**outcome, "timed_out": True} if payload.get("timed_out") else outcome


def _wait_answer_json(request: Any, response: p.Response) -> Any:
    return _wait_json("until-answered", response,
                      lambda got: {k: got.get(k) for k in ("answer", "request", "answers")},
                      batch_id=request.batch_id, event_id=request.event_id)


def _wait_ready_json(request: Any, response: p.Response) -> Any:
    return _wait_json("until-ready", response, lambda got: {"ready": {
        k: v for k, v in got.items() if k not in ("exit_code", "detail", "timed_out")}})


def _error_line(response: p.Response) -> str | None:
    return printable(response.error) if response.error else None


class Tool(msgspec.Struct, frozen=True):
    name: str
    request: type  # the protocol Struct this tool sends
    # What the tool does and when to use it, for a model (no command-line words).
    description: str
    # One worked call: its arguments (agent_id left out: the server's).
    example: Mapping[str, Any]
    command: Command | None = None  # the ctl command whose option help describes the arguments
    # What the matching `agentcoordctl … --json` prints on stdout, and its stderr error line.
    render: Callable[[Any, p.Response], Any] = _payload_json
    message: Callable[[p.Response], str | None] = _error_line
    # Fields the server sets (not offered to the agent), with their values.
    fixed: Mapping[str, Any] = {}
    # exit code -> exit_class where the command's codes mean something else (batch-audit's 1).
    exit_classes: Mapping[int, str] = {}
    read_only: bool = False
    # Argument descriptions where the ctl option's help does not fit the tool.
    notes: Mapping[str, str] = {}
    # ctl option dest -> the argument it is, where the names differ.
    renames: Mapping[str, str] = {}
    # This tool's arguments offered in another shape than their wire field (over SHAPES).
    shapes: Mapping[str, Shape] = {}
    # A wait: the call's timeout follows its wait_seconds (default WAIT_DEFAULT, capped).
    waits: bool = False


def ctl_command(module: Any, name: str) -> Command:
    """The ctl command `name` ("limit report" for a group's) of a ctl module (its option
    help describes the arguments)."""
    return next(c for c in module.COMMANDS if c.path == tuple(name.split()))


def _typed_summary() -> str:
    """Which typed fields each typed signal needs (model.typed_events)."""
    answers = set(ANSWER_TYPES.values())
    return "; ".join(
        f"{kind}: {', '.join(name if name == 'message' else f'typed.{name}' for name in rules)}"
        for kind, rules in TYPED_EVENTS.items() if kind not in answers)


_TERMINALS = ", ".join(LANE_TERMINALS)
_WAIT_BOUND = f"wait_seconds defaults to {WAIT_DEFAULT:g} and is at most {WAIT_CAP:g}"
_WAIT_NOTES = {"wait_seconds": f"Seconds to wait ({_WAIT_BOUND}).",
               "batch_id": "Batch id."}

TOOLS: tuple[Tool, ...] = (
    Tool("claim", p.Claim,
         "Take the lease on one issue or PR (repo + target) before working on it, or renew the "
         "lease you hold. Use it when you were given a specific issue/PR; to pick the next lane "
         "of a batch, use claim_next. While another agent's claim is live or stale the call "
         "fails with exit_class refused: report it and do not work on that target. The claim "
         "stays yours while this agent host runs (agentcoordd renews it) and is released for "
         "the next agent when the host exits; release it yourself when you are done.",
         command=ctl_command(claims, "claim"),
         example={"repo": "acme/widgets", "target": "311", "batch_id": "wave-9"},
         notes={"repo": "Repository, owner/name.",
                "target": "The issue or PR number (or another target id) in repo."}),
    Tool("claim_next", p.ClaimNext,
         "Claim the next lane of a batch you may work on: a lane you own or a pool lane, "
         "ready (dependencies done, nobody live holding it), by priority then manifest order. "
         "The result names the lane, its repo and target, and the claim. Use it in a work "
         "loop over a registered batch. Nothing ready: exit_class refused with the counts of "
         "blocked, held and closed lanes; call wait_ready, then claim_next again. Calling it "
         "again while you hold a lane of the batch gives that lane back (already_held).",
         command=ctl_command(claims, "claim"), example={"batch_id": "wave-10"}),
    Tool("ready", p.Ready,
         "List a batch's lanes in start order: which can start now, and for every other lane "
         "why not (blocked_on its unfinished dependencies, held by whom with that holder's "
         "liveness, closed with its terminal state); with agent_id, may_take marks the lanes "
         "you may take. Read-only. Use it to plan, or to explain why claim_next found nothing.",
         command=ctl_command(ready, "ready"), example={"batch_id": "wave-10"}, read_only=True),
    Tool("wait_ready", p.WaitReady,
         "Wait until a lane of a batch is ready for you (one you own or a pool lane whose "
         "dependencies are done and that nobody live holds), then call claim_next. Answers at "
         "once when one is ready now: met, with `ready.lane`. Also met, with `ready.closed: "
         "true`, when no lane is left open for you: stop, there is nothing to wait for. Not "
         f"ready within wait_seconds: exit_class {TIMED_OUT} (call again). {_WAIT_BOUND} "
         "seconds. A batch that is not registered fails at once with a message naming it.",
         command=ctl_command(wait, "wait"), example={"batch_id": "wave-10", "wait_seconds": 300},
         render=_wait_ready_json, fixed={"poll_seconds": 1.0}, waits=True, read_only=True,
         notes={**_WAIT_NOTES, "agent_id": "Wait for a lane this agent may take."},
         shapes={"wait_seconds": WAIT_SECONDS}),
    Tool("heartbeat", p.Heartbeat,
         "Tell the fleet you are alive and what you are doing: status (working ones such as "
         "in_progress, blocked_user_input, waiting_on_checks_or_review; a terminal one such as "
         "done ends the lane's renewal) and meta.phase. Call it when your status or phase "
         "changes; claims taken through these tools are renewed by agentcoordd, so you need "
         "not call it just to stay alive.",
         command=ctl_command(heartbeat, "heartbeat"),
         example={"repo": "acme/widgets", "target": "311", "status": "waiting_on_checks_or_review",
                  "meta": {"phase": "review"}}),
    Tool("release", p.Release,
         "Give up your claim on an issue/PR, in one of three ways: plain (the next agent may "
         "take it), a handoff to a named agent (handoff_to, handoff_note), or a closeout that "
         f"finishes the batch lane (terminal: {_TERMINALS}; with pr_state and evidence_url) so "
         "lanes that depend on it can start. Use a closeout when the work is finished.",
         command=ctl_command(claims, "release"),
         example={"repo": "acme/widgets", "target": "311", "terminal": "done",
                  "pr_state": "merged", "evidence_url": "https://github.com/acme/widgets/pull/312"},
         notes={"lane": "The batch lane a closeout closes (default: the lane of repo/target)."}),
    Tool("status", p.Status,
         "Read coordination state: claims with their holders, heartbeats with liveness, "
         "batches with their lanes and recent events. Scope it: repo + target for one issue/PR, "
         "or batch_id for one batch (unscoped reads everything, which can be large). Read-only.",
         command=ctl_command(status, "status"), example={"batch_id": "wave-9"}, read_only=True),
    Tool("record_event", p.RecordEvent,
         "Append an event to a batch's log. Typed signals need their typed fields: "
         f"{_typed_summary()}. Record help_requested when you need a human or another agent, "
         "then wait_answer with the event_id in the result; any other type is a free-form note "
         "(type, lane, status, message).",
         command=ctl_command(events, "record-event"),
         example={"batch_id": "wave-9", "type": "help_requested", "lane": "parser",
                  "typed": {"reason": "question"},
                  "message": "Which grammar version should the parser target?"},
         notes={"typed": "The typed signal's fields (see the description for which type needs "
                "which)."}),
    Tool("batch_audit", p.BatchAudit,
         "Check that a batch's telemetry is complete before calling the batch finished: "
         "verdict complete, or exit_class incomplete with the report in output (which lane "
         "lacks what), or unknown. Read-only.",
         command=ctl_command(batches, "batch-audit"), example={"batch_id": "wave-9"},
         exit_classes={p.EXIT_USAGE: "incomplete"}, read_only=True),
    Tool("doctor", p.Doctor,
         "Check whether coordination can be trusted here: the backend is reachable and its "
         "layout sound (deep: read every record), and this machine's identity. Use it when "
         "calls fail with exit_class unknown, before reporting coordination as broken.",
         command=ctl_command(doctor, "doctor"), example={"deep": True}, render=_doctor_json,
         message=doctor.error_line,
         fixed={"client_version": client.CLIENT_VERSION, "stack": False}, read_only=True,
         renames={"doctor_prefix": "prefixes"},
         notes={"prefixes": "Probe these prefixes instead of the default (a directory is "
                "listed, a record path read)."}),
    Tool("answer", p.Answer,
         "Answer a help_requested or escalation_requested event of a batch (to_event: its "
         "event_id, as events or the asker's record_event result show it). Records "
         "help_answered or escalation_answered; the asker's wait_answer returns it.",
         command=ctl_command(answer, "answer"),
         example={"batch_id": "wave-9", "to_event": "20261202T101500Z-3f2a9c",
                  "message": "Target grammar v2.", "decision": "proceed"}),
    Tool("wait_answer", p.WaitAnswered,
         "Wait until a help/escalation request you recorded (event_id) has an answer: met, "
         f"with the earliest answer. None within wait_seconds: exit_class {TIMED_OUT}; "
         f"decide without it or call again. {_WAIT_BOUND} seconds.",
         command=ctl_command(wait, "wait"),
         example={"batch_id": "wave-9", "event_id": "20261202T101500Z-3f2a9c",
                  "wait_seconds": 300},
         render=_wait_answer_json, fixed={"poll_seconds": 1.0}, waits=True, read_only=True,
         notes={**_WAIT_NOTES, "event_id": "The request's event_id."},
         shapes={"wait_seconds": WAIT_SECONDS}),
    Tool("events", p.Events,
         "Read a batch's events in order (at, event_id), each with its cursor. Pass the last "
         "cursor you handled as `after` to get only what happened since: nothing lost or "
         "repeated. Use it to follow a batch without reading its whole status.",
         command=ctl_command(feed, "events"),
         example={"batch_id": "wave-9", "after": "c1.WyIyMDI2LTEyLTAyVDEwOjE1OjAwWiJd",
                  "types": ["help_answered"]},
         fixed={"follow": False, "until_type": None, "wait_seconds": None, "poll_seconds": 1.0},
         read_only=True, renames={"type": "types"},
         notes={"types": "Only events of these types."}),
    Tool("register_batch", p.RegisterBatch,
         "Register a batch, or update one: its lanes, who owns each (an agent id, or pool: "
         "true for a lane any agent may take with claim_next), their targets in repo, "
         "dependencies (depends_on: 'batch_id:lane', also for a lane of the same batch) and "
         "priority (lower starts first). Checked as agentcoord checks a manifest file: a bad "
         "manifest is exit_class usage naming the problem, and nothing is written. Use it as "
         "the coordinator, before agents call claim_next.",
         command=ctl_command(batches, "register-batch"),
         example={"manifest": {"batch_id": "wave-10", "repo": "acme/widgets", "lanes": [
             {"name": "api", "owner": "pool", "pool": True, "targets": ["41"]},
             {"name": "ui", "owner": "pool", "pool": True, "targets": ["42"],
              "depends_on": "wave-10:api"}]}},
         fixed={"source": "register_batch"},
         notes={"manifest": "The batch manifest: batch_id, repo, lanes (each: name, owner, "
                "targets; optional pool, priority, depends_on).",
                "launch_prompt": "The exact prompt the batch's agents are started with, kept "
                "with the batch."},
         shapes={"manifest": Shape(_manifest_schema(), _manifest_bytes),
                 "launch_prompt": Shape(_optional({"type": "string"}), _launch_prompt)}),
    Tool("limit_report", p.LimitReport,
         "Record that your provider's usage limit hit a quota pool on this machine (you are "
         "pausing with status token_limit_pause): lanes naming that quota_host in their "
         "manifest are then skipped by ready, claim_next and wait_ready on this machine until "
         "resets_at (leave it out when the reset time is unknown: then until someone clears "
         "it). Report only what the provider told you.",
         command=ctl_command(limits, "limit report"),
         example={"quota_host": "claude-max", "scope": "5h", "resets_at": "2026-12-02T15:00:00Z",
                  "source": "host-message"},
         notes={"resets_at": "When the limit resets (RFC 3339 with a zone); leave it out when "
                "unknown.", "workspace": "Tenant/workspace (default: default)."}),
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


# ---- schemas and words ---------------------------------------------------------------


def _help(tool: Tool) -> dict[str, str]:
    """argument -> the ctl option's help (the CLI's words for the same field); a group's
    options as `group.field` (meta.phase, typed.reason)."""
    found: dict[str, str] = {}
    if tool.command is None:
        return found
    for param in tool.command.params:
        if isinstance(param, Group):
            for opt in param.options:
                key = param.dest if opt.dest == param.dest else f"{param.dest}.{opt.dest}"
                if opt.help:
                    found.setdefault(key, opt.help)
        elif isinstance(param, Opt) and param.help:
            found.setdefault(tool.renames.get(param.dest, param.dest), param.help)
    return found


def _fields_of(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of an object-valued argument (inline, or a definition, or that or null)."""
    for candidate in (prop, *prop.get("anyOf", ())):
        if "properties" in candidate:
            return candidate["properties"]
        if "$ref" in candidate:
            return defs[candidate["$ref"].rsplit("/", 1)[1]].get("properties", {})
    return {}


def _schema(tool: Tool, config: Config) -> dict[str, Any]:
    """The request Struct's JSON Schema without the transport fields, the tag and what
    the server sets, in the shapes SHAPES and the tool name; descriptions from ctl's help
    and the tool's notes (still in ctl's words)."""
    full = msgspec.json.schema(tool.request)
    defs = copy.deepcopy(full["$defs"])
    root = defs.pop(tool.request.__name__)
    for name in SCHEMA_DEFS_DROPPED:
        defs.pop(name, None)
    hidden = {"op", *TRANSPORT_FIELDS, *tool.fixed}
    shapes = {**SHAPES, **tool.shapes}
    properties = {k: copy.deepcopy(dict(shapes[k].schema)) if k in shapes else v
                  for k, v in root["properties"].items() if k not in hidden}
    required = [k for k in root.get("required", []) if k not in hidden]
    helps = {**_help(tool), **tool.notes}
    for name, prop in properties.items():
        if name in helps:
            prop["description"] = helps[name]
        for field, sub in _fields_of(prop, defs).items():
            if f"{name}.{field}" in helps:
                sub["description"] = helps[f"{name}.{field}"]
    if "agent_id" in properties and config.agent_id:
        required = [k for k in required if k != "agent_id"]
        properties["agent_id"]["default"] = config.agent_id
        properties["agent_id"]["description"] = (
            f"This server's agent id ({config.agent_id}); another value is refused.")
    if "keep_alive" in properties:
        properties["keep_alive"]["description"] = (
            "Register the lane for renewal by agentcoordd ({} for the defaults). It ends when "
            "this MCP server's agent host exits, and then the claim is released for the next "
            "agent." + (" A claim is such a lane unless keep_alive is null." if tool.name in
                        BOUND_TO_HOST else ""))
    schema: dict[str, Any] = {"type": "object", "properties": properties,
                              "required": required, "additionalProperties": False}
    if defs:
        schema["$defs"] = defs
    return schema


def argument_words(tool: Tool) -> dict[str, str]:
    """A ctl option's dest -> the argument it stands for in this tool: the tool's own
    arguments, the fields of its object-valued ones (`phase` -> meta.phase, `reason` ->
    typed.reason), and its renames."""
    schema = _schema(tool, Config())
    defs = schema.get("$defs", {})
    words = {name: name for name in schema["properties"]}
    for name, prop in schema["properties"].items():
        for field in _fields_of(prop, defs):
            words.setdefault(field, f"{name}.{field}")
    words.update(tool.renames)
    return words


_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?![\w-])")


def in_tool_words(text: str, words: Mapping[str, str]) -> str:
    """`--flag` -> the argument it stands for (`missing required --reason` -> `missing
    required typed.reason`). A flag the tool has no argument for, and a command line quoted
    in backticks (advice to run `agentcoordctl …`), stay as they are."""

    def swap(found: re.Match[str]) -> str:
        return words.get(found.group(1).replace("-", "_"), found.group(0))

    parts = text.split("`")
    return "`".join(_FLAG.sub(swap, part) if i % 2 == 0 or _FLAG.fullmatch(part) else part
                    for i, part in enumerate(parts))


def _worded(schema: Any, words: Mapping[str, str]) -> Any:
    if isinstance(schema, dict):
        return {k: in_tool_words(v, words) if k == "description" and isinstance(v, str)
                else _worded(v, words) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_worded(item, words) for item in schema]
    return schema


def input_schema(tool: Tool, config: Config) -> dict[str, Any]:
    """The tool's input schema as listed: `_schema` in the tool's words; agent_id optional
    (and fixed) when the server is configured with one."""
    return _worded(_schema(tool, config), argument_words(tool))


def example(tool: Tool, config: Config) -> dict[str, Any]:
    """The tool's worked example; with agent_id when the server has none and the tool
    needs one."""
    needs_agent = any(f.name == "agent_id" and f.required
                      for f in msgspec.structs.fields(tool.request))
    if config.agent_id is None and needs_agent:
        return {"agent_id": EXAMPLE_AGENT_ID, **tool.example}
    return dict(tool.example)


def description(tool: Tool, config: Config) -> str:
    """What the tool does, when to use it, and one worked example of its arguments."""
    return f"{tool.description}\n\nExample arguments: {json.dumps(example(tool, config))}"


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
                "(the server was started with it); omit agent_id")
        args["agent_id"] = config.agent_id
    if tool.name in BOUND_TO_HOST and "keep_alive" not in args and config.watch != "none":
        args["keep_alive"] = {}  # a claim lives as long as the agent host (keep_alive: null opts out)
    if isinstance(args.get("keep_alive"), dict):
        keep_alive = args["keep_alive"]
        if keep_alive.get("watch_pid") is None and not keep_alive.get("watch_auto"):
            args["keep_alive"] = {**keep_alive, **watch_default(config)}
    for name, shape in {**SHAPES, **tool.shapes}.items():
        if shape.convert is not None and args.get(name) is not None:
            args[name] = shape.convert(args[name])
    args.update(tool.fixed)
    try:
        return msgspec.convert(args, tool.request)
    except msgspec.ValidationError as exc:
        reason, _, where = str(exc).partition(" - at `$.")
        if not where:
            raise UsageError(f"invalid arguments for {tool.name}: {reason}") from None
        raise UsageError(f"invalid argument {where.rstrip('`')}: {reason}") from None


def _short(value: Any) -> str:
    return ids.shown(str(value))


def wait_budget(seconds: float | None) -> float:
    """How long a wait tool waits: WAIT_DEFAULT unless told, never below 0 or above WAIT_CAP
    (the MCP call must end while its host still listens)."""
    return min(WAIT_DEFAULT if seconds is None else max(seconds, 0.0), WAIT_CAP)


def classify(tool: Tool, exit_code: int, payload: Any = None) -> str:
    if tool.waits and isinstance(payload, dict) and payload.get("timed_out"):
        return TIMED_OUT
    return tool.exit_classes.get(exit_code) or EXIT_CLASSES.get(exit_code, "unknown")


def call(tool: Tool, arguments: Mapping[str, Any] | None, config: Config,
         env: Mapping[str, str] | None = None) -> Outcome:
    """One tool call: build the request, send it as ctl does (autostart included), and
    answer with what `agentcoordctl … --json` would print, its texts in the tool's words.
    Blocking (run it in a thread)."""
    outcome = _send(tool, arguments, config, os.environ if env is None else env)
    words = argument_words(tool)
    return msgspec.structs.replace(
        outcome, lines=[in_tool_words(line, words) for line in outcome.lines],
        message=None if outcome.message is None else in_tool_words(outcome.message, words))


def _send(tool: Tool, arguments: Mapping[str, Any] | None, config: Config,
          env: Mapping[str, str]) -> Outcome:
    try:
        message = build(tool, arguments, config)
    except UsageError as exc:
        return Outcome(p.EXIT_USAGE, message=exc.message, lines=[exc.message], exit_class="usage")
    message.caller = client.caller(env)
    timeout = None
    if tool.waits:
        message.wait_seconds = wait_budget(message.wait_seconds)
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
    exit_class = classify(tool, response.exit_code, response.payload)
    line = tool.message(response)
    if line is None and exit_class == TIMED_OUT:  # what ctl's wait says on stderr
        why = response.payload.get("detail") or "condition not met"
        line = f"wait: timed out after {message.wait_seconds:g}s ({printable(str(why))})"
        lines.append(line)
    return Outcome(response.exit_code, output=output, lines=lines, message=line,
                   exit_class=exit_class)
