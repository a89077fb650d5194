"""A stand-in agent host for tests/mcp: starts agentcoord-mcp (argv[1]) with the SDK's
stdio client, takes a claim through it (argv[2]: the claim tool's arguments as JSON,
default a keep-alive claim of o/r#9), prints the tool result as one JSON line, then
waits to be killed (the lane must end, and the claim be released, when it is gone)."""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client, StdioServerParameters


async def main() -> None:
    params = StdioServerParameters(command=sys.argv[1], env=dict(os.environ))
    async with Client(params) as client:
        arguments = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {
            "repo": "o/r", "target": "9", "keep_alive": {}}
        result = await client.call_tool("claim", arguments)
        print(json.dumps({"is_error": result.is_error, "structured": result.structured_content}),
              flush=True)
        await anyio.sleep_forever()


anyio.run(main)
