"""Issue 41, finding 5: every request to agentcoord-mcp gets a JSON-RPC reply.

The console script runs as the host runs it, on a pipe; raw lines are written
to it (the SDK's client would refuse to send most of these), and after each bad
one a good request must be answered too: the server keeps serving."""

from __future__ import annotations

import json
import select
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from integration.conftest import daemon, daemon_factory, short_dir  # noqa: F401 - fixtures
from integration.helpers import Daemon

from test_mcp_server import SERVER, TOOLS

INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "raw", "version": "1"}}}


class RawHost:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.buffer = b""

    def send(self, raw: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def reply(self, timeout: float = 20.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "no reply within the timeout: the caller would hang"
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = self.proc.stdout.read1(65536)  # type: ignore[attr-defined]
                assert chunk, "the server closed its stdout"
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


@pytest.fixture
def host(daemon: Daemon) -> Iterator[RawHost]:
    proc = subprocess.Popen([SERVER, "--agent-id", "agent-a"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=daemon.env(), cwd=str(daemon.base))
    raw = RawHost(proc)
    try:
        raw.send(json.dumps(INITIALIZE).encode())
        assert raw.reply()["id"] == 0
        raw.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        yield raw
    finally:
        proc.kill()
        proc.communicate()


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


BAD = {
    "lone-surrogate": (b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"status",'
                       b'"arguments":{"repo":"o/r\\ud800"}}}', 11, -32700, "lone UTF-16 surrogate"),
    "arguments-900-deep": (b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"status",'
                           b'"arguments":{"x":' + _deep(900) + b'}}}', 12, -32600, "nested deeper"),
    "params-100000-deep": (b'{"jsonrpc":"2.0","id":"deep","method":"tools/list","params":{"x":'
                           + _deep(100_000) + b'}}', "deep", -32600, "nested deeper"),
    "batch-array": (b'[{"jsonrpc":"2.0","id":14,"method":"tools/list"}]', 14, -32600, "batches"),
    "not-json": (b'{"jsonrpc":"2.0","id":15,"method":', 15, -32700, "parse error"),
    "not-a-message": (b'{"jsonrpc":"2.0","id":16,"method":7}', 16, -32600, "invalid request"),
    "invalid-utf8": (b'{"jsonrpc":"2.0","id":17,"method":"tools/list","params":{"x":"\xff"}}', 17,
                     -32700, "parse error"),
    "too-large": (b'{"jsonrpc":"2.0","id":18,"method":"tools/list","params":{"x":"'
                  + b"a" * (5 * 1024 * 1024) + b'"}}', 18, -32600, "larger than"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_request_gets_an_error_reply_and_the_server_keeps_serving(host: RawHost, name: str) -> None:
    raw, request_id, code, words = BAD[name]
    host.send(raw)
    error = host.reply()
    assert error["id"] == request_id, error
    assert error["error"]["code"] == code and words in error["error"]["message"], error
    host.send(b'{"jsonrpc":"2.0","id":99,"method":"tools/list"}')
    listed = host.reply()
    assert listed["id"] == 99 and len(listed["result"]["tools"]) == len(TOOLS)


def test_an_id_that_cannot_be_found_is_answered_with_a_null_id(host: RawHost) -> None:
    host.send(b'{"jsonrpc":"2.0","method":"tools/list","id":' + _deep(50) + b"}")
    error = host.reply()
    assert error["id"] is None and error["error"]["code"] == -32600


def test_a_batch_gets_one_error_per_request_in_it(host: RawHost) -> None:
    host.send(b'[{"jsonrpc":"2.0","id":21,"method":"tools/list"},'
              b'{"jsonrpc":"2.0","method":"notifications/initialized"},'
              b'{"jsonrpc":"2.0","id":"b","method":"tools/list"}]')
    assert [host.reply()["id"], host.reply()["id"]] == [21, "b"]
