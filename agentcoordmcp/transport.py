"""stdio with a guard in front of the SDK: every request gets a JSON-RPC reply.

The SDK's stdio transport hands each line to pydantic; a line that does not
validate — a string holding a lone UTF-16 surrogate, nesting deeper than
pydantic's recursion bound, a JSON-RPC batch array (MCP dropped batches in
2025-06-18), not JSON at all — becomes an exception the session logs and
drops, and its caller waits forever. Here each line is checked first, at the
boundary, once:

* at most `MAX_LINE_BYTES` (the rest of a longer line is skipped unread);
* nesting at most `MAX_DEPTH` levels (counted by a scan that never recurses);
* strict JSON (UTF-8, no lone surrogates, no NaN);
* one JSON-RPC message (a batch gets an error per request in it);

and a line that fails gets a JSON-RPC error (-32700 parse error, -32600
invalid request) with the request's id when one can be found at the top
level (else `null`), written through the SDK's own stdout writer. Good lines
go on to the SDK unchanged; the server keeps serving either way.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from agentcoordd.model import jsonscan

MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32  # an MCP request nests 4-6 deep (tool arguments included)
PARSE_ERROR = -32700
INVALID_REQUEST = -32600

class Refusal(Exception):
    def __init__(self, code: int, message: str, request_ids: list[Any]) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_ids = request_ids  # one error per id (None: the id could not be found)


def _request_id(value: Any) -> Any:
    """A request id as JSON-RPC allows it (string or integer), else None."""
    return value if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)) else None


def _scan(raw: bytes) -> tuple[int, Any]:
    """(deepest nesting, the top-level "id"): from the tokens alone (model.jsonscan),
    so neither depth nor a bad string elsewhere hides the id."""
    deepest, found = jsonscan.scan(raw, ("id",))
    return deepest, _request_id(found.get("id"))


def check(raw: bytes) -> None:
    """Raise Refusal unless `raw` is one message the SDK can take."""
    deepest, request_id = _scan(raw)
    if deepest > MAX_DEPTH:
        raise Refusal(INVALID_REQUEST, f"invalid request: nested deeper than {MAX_DEPTH} levels",
                      [request_id])
    try:
        message = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        try:
            json.loads(raw)
        except (ValueError, RecursionError):
            raise Refusal(PARSE_ERROR, f"parse error: not JSON ({exc})", [request_id]) from None
        raise Refusal(PARSE_ERROR, "parse error: not strict JSON (a lone UTF-16 surrogate, NaN "
                      "or Infinity)", [request_id]) from None
    if isinstance(message, list):
        ids = [_request_id(item.get("id")) for item in message if isinstance(item, dict) and "id" in item]
        raise Refusal(INVALID_REQUEST, "invalid request: JSON-RPC batches are not supported "
                      "(send one message per line)", ids or [None])
    import mcp_types

    try:
        mcp_types.jsonrpc_message_adapter.validate_python(message, by_name=False)
    except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError, whatever its shape
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        ids = [request_id] if isinstance(message, dict) and "method" in message and "id" in message else []
        raise Refusal(INVALID_REQUEST, f"invalid request: {first}", ids) from None


class GuardedLines:
    """What the SDK's stdio transport reads as its stdin: the good lines of the
    wire; bad ones are answered through `replies` (set once the transport runs)."""

    def __init__(self, wire_fd: int) -> None:
        self._file = os.fdopen(wire_fd, "rb", closefd=False)
        self.replies: Any = None
        self._ready = anyio.Event()
        self.refused = 0

    def attach(self, write_stream: Any) -> None:
        self.replies = write_stream
        self._ready.set()

    async def _readline(self, limit: int) -> bytes:
        return await anyio.to_thread.run_sync(self._file.readline, limit)

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            line = await self._readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                head = line
                while line and not line.endswith(b"\n"):
                    line = await self._readline(1024 * 1024)
                _depth, request_id = _scan(head)
                await self._refuse(Refusal(INVALID_REQUEST, f"invalid request: a message larger "
                                           f"than {MAX_LINE_BYTES} bytes", [request_id]))
                continue
            if not line.strip():
                continue
            try:
                check(line)
            except Refusal as refusal:
                await self._refuse(refusal)
                continue
            yield line.decode("utf-8")

    async def _refuse(self, refusal: Refusal) -> None:
        from mcp.shared.message import SessionMessage
        from mcp_types import ErrorData, JSONRPCError

        self.refused += 1
        await self._ready.wait()
        for request_id in refusal.request_ids:
            await self.replies.send(SessionMessage(JSONRPCError(
                jsonrpc="2.0", id=request_id, error=ErrorData(code=refusal.code, message=refusal.message))))


@contextlib.asynccontextmanager
async def guarded_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio_server reading through GuardedLines. As the SDK does for its
    own reader, fd 0 points at the null device meanwhile (a handler or child that
    reads stdin gets EOF, not the wire), and is restored on exit."""
    from mcp.server.stdio import stdio_server

    wire = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    lines = GuardedLines(wire)
    try:
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            lines.attach(write_stream)
            yield read_stream, write_stream
    finally:
        # `wire` stays open: the reader's worker thread may still block on it (as the
        # SDK does with its own duplicate, it is never closed and recycled under it).
        os.dup2(wire, 0)
