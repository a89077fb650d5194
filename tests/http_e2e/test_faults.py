"""Faults on the HTTP backend: the Worker stopped mid-run, and a server too
slow to answer. No ctl call may outlive its --timeout."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worker_fixture import launch_worker

from .conftest import FAMILIES, err, out, record

TIMEOUT = 3.0
SLACK = 2.0  # interpreter start-up + reply printing on a loaded 2-core CI box


@pytest.fixture
def own_worker(tmp_path: Path) -> Iterator[Any]:
    """A Worker this test may stop and restart (same port, same database)."""
    with launch_worker(tmp_path, {"m-a": (FAMILIES, FAMILIES), "ops": None}) as server:
        yield server


def timed(node: Any, *args: str) -> tuple[Any, float]:
    started = time.monotonic()
    result = node.ctl("--timeout", str(TIMEOUT), *args)
    return result, time.monotonic() - started


def _lane(node: Any, agent: str) -> dict[str, Any]:
    result = node.ctl("lanes", "--agent-id", agent, "--json")
    assert result.returncode == 0, err(result)
    rows = json.loads(out(result))["lanes"]
    assert len(rows) == 1, rows
    return rows[0]


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_worker_stopped_mid_run_fails_within_the_timeout_and_recovers(
        own_worker: Any, node_factory: Any, repo: str) -> None:
    a = node_factory("a", own_worker, "m-a")
    assert a.ctl("claim", "--agent-id", "a-codex", "--repo", repo, "--target", "1").returncode == 0
    lane = a.ctl("heartbeat", "--agent-id", "a-codex", "--repo", repo, "--target", "1",
                 "--ttl", "6", "--keep-alive")
    assert lane.returncode == 0, err(lane)

    own_worker.stop()
    for args in (("claim", "--agent-id", "a-codex", "--repo", repo, "--target", "2"),
                 ("heartbeat", "--agent-id", "a-codex", "--repo", repo, "--target", "1"),
                 ("status", "--repo", repo, "--target", "1"),
                 ("release", "--agent-id", "a-codex", "--repo", repo, "--target", "1")):
        result, took = timed(a, *args)
        assert result.returncode == 2, (args, err(result))
        assert took < TIMEOUT + SLACK, (args, took)
        assert own_worker.url in err(result) and "Traceback" not in err(result)
    # the keep-alive lane backs off instead of giving up
    backing_off = _wait(lambda: (row := _lane(a, "a-codex"))["state"] == "backoff" and row, 10,
                        "the lane to back off")
    assert backing_off["last_error"]

    own_worker.restart()
    before = record(own_worker, "heartbeats/a-codex.json")["version"]
    _wait(lambda: _lane(a, "a-codex")["state"] == "active", 15, "the lane to recover")
    _wait(lambda: record(own_worker, "heartbeats/a-codex.json")["version"] > before, 10,
          "a renewal after the Worker came back")
    result, _ = timed(a, "claim", "--agent-id", "a-codex", "--repo", repo, "--target", "2")
    assert result.returncode == 0, err(result)


class SilentServer:
    """Accepts connections and reads requests, then answers only after `delay` seconds."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stopping = threading.Event()
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            threading.Thread(target=self._answer_late, args=(conn,), daemon=True).start()

    def _answer_late(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(1.0)
            try:
                conn.recv(65536)
            except OSError:
                return
            if self.stopping.wait(self.delay):
                return
            body = b'{"status":"ok"}'
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            except OSError:
                pass

    def close(self) -> None:
        self.stopping.set()
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def slow_server() -> Iterator[SilentServer]:
    server = SilentServer(delay=30.0)
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("args", [
    ("claim", "--agent-id", "s-codex", "--repo", "acme/widgets", "--target", "1"),
    ("heartbeat", "--agent-id", "s-codex"),
    ("status", "--repo", "acme/widgets", "--target", "1"),
    ("status",),
    ("batch-audit", "--batch-id", "b1"),
    ("release", "--agent-id", "s-codex", "--repo", "acme/widgets", "--target", "1"),
])
def test_a_server_slower_than_the_timeout_never_hangs_a_ctl_call(
        slow_server: SilentServer, e2e_worker: Any, node_factory: Any, args: tuple[str, ...]) -> None:
    node = node_factory("s", e2e_worker, "m-a")
    node.url = slow_server.url
    result, took = timed(node, *args)
    assert result.returncode == 2, err(result)
    assert took < TIMEOUT + SLACK, took
    assert "UNKNOWN" in err(result) or "timed out" in err(result)
    assert slow_server.accepted >= 1  # the request did reach the slow server
    # the daemon is still responsive afterwards
    node.url = e2e_worker.url
    assert node.ctl("status", "--repo", "acme/widgets", "--target", "zz").returncode == 0
    assert node.ctl("version").returncode == 0
