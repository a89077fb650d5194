"""The tool table as data: schemas are the protocol Structs', arguments become the
request without a daemon, and a new request is one more entry."""

from __future__ import annotations

import json
import re

import jsonschema
import msgspec
import pytest

from agentcoordd import protocol as p
from agentcoordd.model.status import LANE_TERMINALS
from agentcoordd.model.typed_events import TYPED_EVENTS, TYPED_FIELDS
from agentcoordmcp import tools

CONFIGURED = tools.Config(agent_id="agent-a", watch="parent", parent_pid=4242)


@pytest.mark.parametrize("tool", tools.TOOLS, ids=lambda t: t.name)
def test_each_schema_is_its_request_struct_without_the_transport_fields(tool: tools.Tool) -> None:
    schema = tools.input_schema(tool, tools.Config())
    offered = set(tool.request.__struct_fields__) - set(tools.TRANSPORT_FIELDS) - set(tool.fixed)
    assert set(schema["properties"]) == offered
    required = {f for f, default in zip(tool.request.__struct_fields__,
                                        msgspec.structs.fields(tool.request))
                if default.required} - {"op"}
    assert set(schema["required"]) == required - set(tools.TRANSPORT_FIELDS)


def test_a_new_request_is_one_entry() -> None:
    lanes = tools.Tool("lanes", p.Lanes, "The daemon's keep-alive lanes.", {})
    assert set(tools.input_schema(lanes, CONFIGURED)["properties"]) == {"agent_id"}
    assert tools.build(lanes, {}, CONFIGURED) == p.Lanes(agent_id="agent-a")


def test_the_configured_agent_id_fills_every_call_and_refuses_another() -> None:
    claim = tools.BY_NAME["claim"]
    assert tools.build(claim, {"repo": "o/r", "target": "1"}, CONFIGURED).agent_id == "agent-a"
    with pytest.raises(tools.UsageError, match="not this server's agent id"):
        tools.build(claim, {"repo": "o/r", "target": "1", "agent_id": "agent-b"}, CONFIGURED)


def test_keep_alive_watches_the_agent_host_unless_told_otherwise() -> None:
    claim = tools.BY_NAME["claim"]
    args = {"repo": "o/r", "target": "1"}
    assert tools.build(claim, {**args, "keep_alive": {}}, CONFIGURED).keep_alive == \
        p.KeepAlive(watch_pid=4242)
    explicit = tools.build(claim, {**args, "keep_alive": {"watch_pid": 77}}, CONFIGURED)
    assert explicit.keep_alive == p.KeepAlive(watch_pid=77)
    auto = tools.Config(agent_id="agent-a", watch="auto")
    assert tools.build(claim, {**args, "keep_alive": {}}, auto).keep_alive == \
        p.KeepAlive(watch_auto=True)


@pytest.mark.parametrize("name", ["claim", "claim_next"])
def test_a_claim_is_bound_to_the_agent_host_unless_the_call_opts_out(name: str) -> None:
    """Issue 40: a claim made through the server by a host that then dies was held 4 h."""
    tool = tools.BY_NAME[name]
    args = {"repo": "o/r", "target": "1"} if name == "claim" else {"batch_id": "b1"}
    assert tools.build(tool, args, CONFIGURED).keep_alive == p.KeepAlive(watch_pid=4242)
    assert tools.build(tool, {**args, "keep_alive": None}, CONFIGURED).keep_alive is None
    unwatched = tools.Config(agent_id="agent-a", watch="none", parent_pid=4242)
    assert tools.build(tool, args, unwatched).keep_alive is None
    assert "unless keep_alive is null" in tools.input_schema(tool, CONFIGURED)[
        "properties"]["keep_alive"]["description"]


@pytest.mark.parametrize("arguments, words", [
    ({"repo": "o/r", "target": 7}, "invalid argument target"),
    ({"repo": "o/r", "target": "1", "ttl": 2**60}, "invalid argument ttl"),
    ({"repo": "o/r", "target": "1", "selection": {"state_root": "/"}}, "unknown argument"),
    ({"repo": "o/r", "target": "1", "meta": {"phase": ["x"]}}, "invalid argument meta.phase"),
])
def test_arguments_outside_the_struct_are_usage_errors(arguments: dict, words: str) -> None:
    with pytest.raises(tools.UsageError, match=words):
        tools.build(tools.BY_NAME["claim"], arguments, CONFIGURED)


def test_fixed_fields_are_the_servers() -> None:
    doctor = tools.BY_NAME["doctor"]
    built = tools.build(doctor, {"deep": True}, CONFIGURED)
    assert built.stack is False and built.client_version == p.DAEMON_VERSION
    with pytest.raises(tools.UsageError, match="unknown argument"):
        tools.build(doctor, {"stack": True}, CONFIGURED)


def test_exit_classes() -> None:
    assert [tools.classify(tools.BY_NAME["claim"], code) for code in (1, 2, 3, 4)] == \
        ["usage", "unknown", "refused", "unknown"]
    assert tools.classify(tools.BY_NAME["batch_audit"], 1) == "incomplete"


# ---- issue 44: tools written for a model -----------------------------------------------

CONFIGS = {"configured": CONFIGURED, "unconfigured": tools.Config()}
# A command-line flag as ctl spells one (`--reason`, `--until-ready`).
FLAG = re.compile(r"(?<![\w-])--[a-z]")


def _listed(tool: tools.Tool, config: tools.Config) -> dict:
    return {"description": tools.description(tool, config),
            "input_schema": tools.input_schema(tool, config)}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=list(CONFIGS))
@pytest.mark.parametrize("tool", tools.TOOLS, ids=lambda t: t.name)
def test_each_description_carries_a_worked_example_that_the_tool_takes(
        tool: tools.Tool, config: tools.Config) -> None:
    text, _, shown = tools.description(tool, config).partition("\n\nExample arguments: ")
    assert len(text) > 120, "what the tool does and when to use it"
    example = json.loads(shown)
    assert example == tools.example(tool, config)
    jsonschema.validate(example, tools.input_schema(tool, config))
    tools.build(tool, example, config)  # the request the example sends


@pytest.mark.parametrize("config", CONFIGS.values(), ids=list(CONFIGS))
@pytest.mark.parametrize("tool", tools.TOOLS, ids=lambda t: t.name)
def test_nothing_a_tool_lists_speaks_in_command_line_flags(tool: tools.Tool,
                                                           config: tools.Config) -> None:
    listed = json.dumps(_listed(tool, config))
    assert not FLAG.findall(listed), FLAG.findall(listed)


def _enum(schema: dict, name: str) -> list | None:
    prop = schema["properties"][name]
    for branch in (prop, *prop.get("anyOf", ())):
        if "enum" in branch:
            return branch["enum"]
    return None


@pytest.mark.parametrize("name", ["release", "record_event"])
def test_terminal_offers_the_models_lane_terminals(name: str) -> None:
    schema = tools.input_schema(tools.BY_NAME[name], CONFIGURED)
    assert _enum(schema, "terminal") == list(LANE_TERMINALS)


def test_typed_offers_each_signals_allowed_values_from_the_models_table() -> None:
    typed = tools.input_schema(tools.BY_NAME["record_event"], CONFIGURED)["properties"]["typed"]
    assert set(typed["properties"]) == set(TYPED_FIELDS) and typed["additionalProperties"] is False
    assert _enum(typed, "reason") == list(TYPED_EVENTS["help_requested"]["reason"])
    assert _enum(typed, "severity") == list(TYPED_EVENTS["error"]["severity"])
    assert _enum(typed, "kind") == list(TYPED_EVENTS["human_intervention"]["kind"])
    free = [name for name in TYPED_FIELDS if _enum(typed, name) is None]
    assert free == ["from_route", "to_route", "evidence", "category", "reply_to", "decision"]


@pytest.mark.parametrize("tool, daemon_says, agent_reads", [
    ("record_event", "missing required --reason", "missing required typed.reason"),
    ("record_event", "--reason is not valid for --type help_answered",
     "typed.reason is not valid for type help_answered"),
    ("record_event", "terminal-only options require --type lane_closed",
     "terminal-only options require type lane_closed"),
    ("release", "--terminal must be one of: done, abandoned, superseded",
     "terminal must be one of: done, abandoned, superseded"),
    ("release", "--terminal cannot be combined with --handoff-to or --handoff-note",
     "terminal cannot be combined with handoff_to or handoff_note"),
    ("claim", "--renew-every (5s) must be shorter than the --heartbeat-ttl",
     "keep_alive.renew_every (5s) must be shorter than the keep_alive.heartbeat_ttl"),
    ("claim", "`--pr-url` must be an HTTP(S) URL", "`meta.pr_url` must be an HTTP(S) URL"),
    ("events", "invalid --after cursor; --type x", "invalid after cursor; types x"),
    ("doctor", "a --doctor-prefix: a prefix", "a prefixes: a prefix"),
    ("register_batch", "--batch-id does not match batch manifest batch_id",
     "batch_id does not match batch manifest batch_id"),
    # a command line quoted for the operator, and flags the tool has no argument for, stay
    ("answer", "--type help_answered is written by `agentcoordctl answer --batch-id B`",
     "--type help_answered is written by `agentcoordctl answer --batch-id B`"),
    ("claim_next", "claim --next cannot name a claim (use claim --repo --target)",
     "claim --next cannot name a claim (use claim --repo --target)"),
    ("status", "value --batch-idx and x--repo", "value --batch-idx and x--repo"),
])
def test_texts_name_the_tools_argument_where_ctl_names_its_flag(tool: str, daemon_says: str,
                                                                agent_reads: str) -> None:
    words = tools.argument_words(tools.BY_NAME[tool])
    assert tools.in_tool_words(daemon_says, words) == agent_reads


def test_register_batch_takes_the_manifest_as_an_object_or_its_json_text() -> None:
    tool = tools.BY_NAME["register_batch"]
    manifest = {"batch_id": "b1", "lanes": [{"name": "a", "owner": "w1", "targets": ["1"]}]}
    built = tools.build(tool, {"manifest": manifest}, CONFIGURED)
    assert msgspec.json.decode(built.manifest) == manifest and built.source == "register_batch"
    assert tools.build(tool, {"manifest": '{"batch_id": "b1"}'}, CONFIGURED).manifest == \
        b'{"batch_id": "b1"}'


@pytest.mark.parametrize("arguments, words", [
    ({"manifest": {"batch_id": "b", "objective": "x" * p.MANIFEST_CAP}},
     f"manifest is larger than {p.MANIFEST_CAP} bytes"),
    ({"manifest": {}, "launch_prompt": "y" * (p.LAUNCH_PROMPT_CAP + 1)},
     f"launch_prompt is larger than {p.LAUNCH_PROMPT_CAP} bytes"),
    ({"manifest": {}, "source": "/etc/passwd"}, "unknown argument for register_batch: source "
     "(takes: batch_id, launch_prompt, manifest, synthetic, synthetic_kind)"),
    ({}, "invalid arguments for register_batch: Object missing required field `manifest`"),
])
def test_register_batch_refuses_what_register_batch_refuses_before_sending(
        arguments: dict, words: str) -> None:
    with pytest.raises(tools.UsageError) as refused:
        tools.build(tools.BY_NAME["register_batch"], arguments, CONFIGURED)
    assert refused.value.message == words


@pytest.mark.parametrize("name", ["wait_ready", "wait_answer"])
def test_a_wait_is_bounded_and_says_so(name: str) -> None:
    tool = tools.BY_NAME[name]
    seconds = tools.input_schema(tool, CONFIGURED)["properties"]["wait_seconds"]["anyOf"][0]
    assert (seconds["minimum"], seconds["maximum"]) == (0, tools.WAIT_CAP)
    assert f"defaults to {tools.WAIT_DEFAULT:g} and is at most {tools.WAIT_CAP:g}" in \
        tools.description(tool, CONFIGURED)
    assert [tools.wait_budget(s) for s in (None, 5, -3, 10**9)] == \
        [tools.WAIT_DEFAULT, 5, 0, tools.WAIT_CAP]
    assert tools.classify(tool, 2, {"timed_out": True}) == tools.TIMED_OUT
    assert tools.classify(tool, 2, {"detail": "batch b not found"}) == "unknown"
