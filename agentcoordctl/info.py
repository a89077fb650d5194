"""version and config show."""

from __future__ import annotations

from agentcoordctl.compat import AGENT_COORD
from agentcoordctl import client, render, spec
from agentcoordctl.options import JSON, Globals, dump_json, fail, run
from agentcoordctl.spec import Arg
from agentcoordd import protocol as p
from agentcoordd.model import records


def client_version_info() -> dict:
    return {
        "version": client.CLIENT_VERSION,
        "schema_version": records.SCHEMA_VERSION,
        "lane_closed_schema_version": records.LANE_CLOSED_SCHEMA_VERSION,
        "archive_schema_version": records.ARCHIVE_SCHEMA_VERSION,
        "default_backend": None,
        "default_ref": "state",
    }


def version(*, json: bool) -> None:
    payload = client_version_info()
    payload.update(client_version=client.CLIENT_VERSION, protocol_version=p.PROTOCOL_VERSION,
                   daemon_version=None, daemon_pid=None)
    message = p.Version(caller=client.caller())
    try:
        response, welcome = client.request(message, timeout=Globals.timeout or 5.0,
                                           autostart=False)
    except client.ClientError:
        response, welcome = None, None
    if response is not None and response.exit_code == 0 and isinstance(response.payload, dict):
        payload["daemon_version"] = response.payload.get("daemon_version", response.daemon_version)
        payload["daemon_pid"] = welcome.pid if welcome is not None else None
        payload["daemon_protocol_version"] = response.payload.get("protocol_version")
    sys_out = dump_json(payload) if json else render.version(payload)
    print(sys_out)


def config(*, action: str, json: bool) -> None:
    if action != "show":
        raise fail(f"unknown config action: {action} (expected: show)", p.EXIT_USAGE)
    run(p.ConfigShow(), as_json=json, text=render.config)


COMMANDS = (
    spec.Command(("version",), "Client and daemon versions (a daemon that is not running is not "
                 "started).", (JSON,), version, **AGENT_COORD),
    spec.Command(("config",), "Runtime defaults, status vocabulary and machine-readable exit codes.",
                 (Arg("action", "[show]", "Only `show`.", default="show"), JSON), config, **AGENT_COORD),
)
