"""docs/mcp.md runs as written (issue 44): every Python, JSON and TOML block on the page,
against a real agentcoordd and the real agentcoord-mcp, with the SDK the project installs.

* a Python block is a complete script: it runs with exit 0, and prints what the
  `text` block after it says;
* a server configuration (the `mcpServers` JSON, Codex's TOML) starts the server
  as a host would, and its tools answer;
* the failure envelope is what a refused claim returns, to the byte.

A block none of these covers fails the test: the page has no example that is not run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters, stdio_client

from agentcoordmcp import tools
from integration.conftest import daemon, daemon_factory, short_dir  # noqa: F401 - fixtures
from integration.helpers import Daemon
from test_mcp_server import result, server

DOC = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S)
BIN = str(Path(sys.executable).parent)  # where agentcoord-mcp is installed


class Block:
    def __init__(self, lang: str, body: str, line: int, printed: str | None) -> None:
        self.lang, self.body, self.line, self.printed = lang, body, line, printed

    @property
    def kind(self) -> str | None:
        """What running this block means (None: nothing this test knows)."""
        if self.lang == "python":
            return "script"
        if self.lang == "toml" and "mcp_servers" in tomllib.loads(self.body):
            return "config"
        if self.lang == "json":
            data = json.loads(self.body)
            if "mcpServers" in data:
                return "config"
            if "exit_class" in data:
                return "envelope"
        return None

    def server_config(self) -> dict[str, Any]:
        if self.lang == "toml":
            return tomllib.loads(self.body)["mcp_servers"]["agentcoord"]
        return json.loads(self.body)["mcpServers"]["agentcoord"]


def _blocks() -> list[Block]:
    text = DOC.read_text()
    found = [(m["lang"], textwrap.dedent(m["body"]), text.count("\n", 0, m.start()) + 1)
             for m in FENCE.finditer(text)]
    return [Block(lang, body, line,
                  found[i + 1][1] if i + 1 < len(found) and found[i + 1][0] == "text" else None)
            for i, (lang, body, line) in enumerate(found) if lang in ("python", "json", "toml")]


BLOCKS = _blocks()


def _of(kind: str) -> list[Any]:
    return [pytest.param(b, id=f"{b.lang}-line-{b.line}") for b in BLOCKS if b.kind == kind]


def _path() -> str:
    return os.pathsep.join([BIN, os.environ.get("PATH", os.defpath)])


def test_every_example_block_on_the_page_is_run_by_this_test() -> None:
    assert [(b.lang, b.line) for b in BLOCKS if b.kind is None] == []
    assert {b.kind for b in BLOCKS} == {"script", "config", "envelope"}
    assert len(_of("script")) >= 3 and len(_of("config")) == 2


@pytest.mark.parametrize("block", _of("script"))
def test_each_python_example_runs_and_prints_what_the_page_shows(daemon: Daemon,
                                                                 block: Block) -> None:
    script = daemon.base / f"example_{block.line}.py"
    script.write_text(block.body)
    ran = subprocess.run([sys.executable, str(script)], env=daemon.env(PATH=_path()),
                         cwd=str(daemon.base), capture_output=True, timeout=180)
    assert ran.returncode == 0, ran.stderr.decode()[-3000:]
    if block.printed is not None:
        assert ran.stdout.decode() == block.printed


def test_the_first_example_from_a_shell_with_other_xdg_variables_uses_the_running_daemon(
        daemon: Daemon) -> None:
    """Issue 42: a shell whose XDG variables differ from the running daemon's (no
    AGENT_COORD_SOCKET) runs the page's first example against that daemon, no second one."""
    block = _of("script")[0].values[0]
    script = daemon.base / "example_other_shell.py"
    script.write_text(block.body)
    shell = daemon.base / "other-shell"
    env = daemon.env(PATH=_path(), XDG_RUNTIME_DIR=str(shell / "run"),
                     XDG_STATE_HOME=str(shell / "state"), AGENT_COORD_NO_AUTOSTART="")
    del env["AGENT_COORD_SOCKET"]
    ran = subprocess.run([sys.executable, str(script)], env=env, cwd=str(daemon.base),
                         capture_output=True, timeout=180)
    assert ran.returncode == 0, ran.stderr.decode()[-3000:]
    assert ran.stdout.decode() == block.printed
    assert not (shell / "run" / "agentcoord").exists()  # no second daemon, no second socket


@pytest.mark.parametrize("block", _of("config"))
async def test_each_server_configuration_starts_a_server_whose_tools_answer(
        daemon: Daemon, block: Block) -> None:
    config = block.server_config()
    command = shutil.which(config["command"], path=_path())
    assert command, config["command"]
    # The host hands the server the configuration's env over its own.
    params = StdioServerParameters(command=command, args=config.get("args", []),
                                   env={**daemon.env(), **config.get("env", {})},
                                   cwd=str(daemon.base))
    with open(daemon.base / "configured.log", "a") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            listed = (await client.list_tools()).tools
            claimed = result(await client.call_tool("claim", {"repo": "acme/widgets",
                                                              "target": "311"}))
    assert {tool.name for tool in listed} == set(tools.BY_NAME)
    assert not claimed["is_error"], claimed
    agent_id = config["args"][config["args"].index("--agent-id") + 1]
    assert claimed["json"]["claim"]["agent_id"] == agent_id
    assert claimed["json"]["claim"]["machine_id"] == config["env"]["AGENT_COORD_MACHINE_ID"]


@pytest.mark.parametrize("block", _of("envelope"))
async def test_the_failure_envelope_is_what_a_refused_claim_returns(daemon: Daemon,
                                                                    block: Block) -> None:
    lexer = ("--agent-id", "worker-lexer", "--repo", "acme/widgets", "--target", "311")
    for command in ("claim", "heartbeat"):  # held, and its holder alive
        done = daemon.ctl(command, *lexer)
        assert done.returncode == 0, done.stderr
    async with server(daemon, "worker-parser") as agent:
        refused = result(await agent.call_tool("claim", {"repo": "acme/widgets",
                                                         "target": "311"}))
    assert refused["is_error"]
    assert refused["json"] == json.loads(block.body)


def test_the_tool_table_shows_each_tools_own_example() -> None:
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        name = re.fullmatch(r"`(\w+)`", cells[0])
        example = re.match(r"`(\{[^`]*\})`", cells[-1])
        if len(cells) == 3 and name and example:
            rows[name[1]] = json.loads(example[1])
    assert set(rows) == set(tools.BY_NAME)
    for name, example in rows.items():
        assert example == dict(tools.BY_NAME[name].example), name
