"""`agentcoord-mcp`: an MCP server over stdio, a client of the machine's agentcoordd.

    agentcoord-mcp [--agent-id ID] [--watch parent|auto|none|PID]

The agent host starts it as its child and talks MCP on stdin/stdout (the SDK's
stdio transport and low-level Server do the protocol, behind a guard that
answers every request it cannot take: agentcoordmcp/transport.py). Each tool call is one
daemon request sent through agentcoordctl's client library, as ctl sends it:
the same socket, autostart, forwarded environment and exit codes
(agentcoordmcp/tools.py). The server holds no coordination state of its own.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Any

from agentcoordmcp import tools
from agentcoordd import protocol as p

INSTRUCTIONS = (
    "Coordination for fleets of coding agents (agentcoord). Claim an issue/PR before working "
    "on it (claim; a refusal has exit_class refused: someone else holds it), or take the next "
    "lane of a batch (claim_next; nothing ready: wait_ready, then claim_next again). Say what "
    "you are doing with heartbeat, and release when done (release with terminal closes the "
    "lane). A failed call is an error result whose JSON names exit_class: usage (fix the "
    "arguments), refused, timed_out (a wait ran out: call it again), or unknown (coordination "
    "state could not be determined). Each tool's description ends with a worked example."
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line and exit 1 (the project's usage exit), not argparse's usage block and 2."""
        self.exit(1, f"agentcoord-mcp: {message} (see 'agentcoord-mcp -h')\n")


def parse_args(argv: list[str] | None) -> tools.Config:
    parser = _Parser(
        prog="agentcoord-mcp",
        description="The agentcoord coordination protocol as MCP tools over stdio (agentcoordctl docs mcp).")
    parser.add_argument("--agent-id", default=os.environ.get("AGENT_COORD_AGENT_ID") or None,
                        help="This agent's id, used by every call (default: $AGENT_COORD_AGENT_ID; "
                        "unset: each call passes agent_id).")
    parser.add_argument("--watch", default="parent",
                        help="What keep-alive lanes watch by default: parent (the agent host that "
                        "started this server; default), auto (the nearest codex/claude "
                        "ancestor), none, or a pid.")
    parser.add_argument("--version", action="version", version=f"agentcoord-mcp {p.DAEMON_VERSION}")
    args = parser.parse_args(argv)
    if args.watch not in ("parent", "auto", "none") and not (args.watch.isdigit() and int(args.watch) > 1):
        parser.error(f"--watch must be parent, auto, none or a process id: {args.watch}")
    if args.agent_id is not None:
        from agentcoordd.model import ids
        from agentcoordd.model.errors import UsageError

        try:
            ids.agent_id(args.agent_id)
        except UsageError as exc:
            parser.error(f"--agent-id / AGENT_COORD_AGENT_ID: {exc.message}")
    return tools.Config(agent_id=args.agent_id, watch=args.watch, parent_pid=os.getppid())


def build_server(config: tools.Config) -> Any:
    import anyio
    import mcp.types as types
    from mcp.server import Server

    from agentcoordctl.options import dump_json

    listed = [types.Tool(name=tool.name, description=tools.description(tool, config),
                         input_schema=tools.input_schema(tool, config),
                         annotations=types.ToolAnnotations(read_only_hint=tool.read_only,
                                                           open_world_hint=False))
              for tool in tools.TOOLS]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = tools.BY_NAME.get(params.name)
        if tool is None:
            outcome = tools.Outcome(1, message=f"unknown tool: {params.name}", exit_class="usage")
        else:
            try:
                # The client library blocks (a socket, autostart's waits): off the event loop.
                outcome = await anyio.to_thread.run_sync(
                    functools.partial(tools.call, tool, params.arguments, config))
            except Exception as exc:  # noqa: BLE001 - the boundary: a result the agent reads, as ctl's
                detail = " ".join(str(exc).split())[:300]
                line = (f"agentcoord-mcp: internal error: {type(exc).__name__}: {detail}; "
                        "coordination state is UNKNOWN")
                print(line, file=sys.stderr, flush=True)
                outcome = tools.Outcome(2, message=line, lines=[line], exit_class="unknown")
        return result(outcome)

    def result(outcome: tools.Outcome) -> types.CallToolResult:
        if outcome.ok:
            content = [types.TextContent(type="text", text=dump_json(outcome.output))]
            content += [types.TextContent(type="text", text=line) for line in outcome.lines]
            structured = outcome.output if isinstance(outcome.output, dict) else None
            return types.CallToolResult(content=content, structured_content=structured)
        envelope = outcome.envelope()
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=dump_json(envelope))],
            structured_content=envelope, is_error=True)

    return Server("agentcoord", version=p.DAEMON_VERSION, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(config: tools.Config) -> None:
    from agentcoordmcp.transport import guarded_stdio

    server = build_server(config)
    async with guarded_stdio() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    try:
        import anyio
        import mcp  # noqa: F401 - the optional extra
    except ImportError as exc:
        print(f"agentcoord-mcp: the MCP SDK is not installed ({exc}): pip install "
              "'agentcoord[mcp]'", file=sys.stderr)
        return 2
    try:
        anyio.run(serve, config)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
