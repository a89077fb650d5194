"""The tool table as data: schemas are the protocol Structs', arguments become the
request without a daemon, and a new request is one more entry."""

from __future__ import annotations

import msgspec
import pytest

from agentcoordd import protocol as p
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
    lanes = tools.Tool("lanes", p.Lanes, "The daemon's keep-alive lanes.")
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
    assert tools.build(claim, args, CONFIGURED).keep_alive is None


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
