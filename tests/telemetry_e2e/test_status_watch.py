"""status --watch: snapshots when not a TTY, a redrawn coloured view on one; Ctrl-C exits 0."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time

from integration.helpers import PYTHON, Daemon

HEADER = b"--- agentcoord status "


def read_until(fd: int, predicate, timeout: float = 20.0) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout
    while not predicate(data):
        left = deadline - time.monotonic()
        assert left > 0, f"timed out; got {data[-2000:]!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # pty closed
                break
            if not chunk:
                break
            data += chunk
    return data


def watch(daemon: Daemon, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "agentcoordctl.cli", "status", "--watch", "--interval", "0.3",
                             *args], env=daemon.env(**kwargs.pop("env", {})), cwd=str(daemon.base),
                            **kwargs)


def test_not_a_tty_prints_plain_snapshots_and_sigint_exits_0(daemon: Daemon, batch: dict) -> None:
    proc = watch(daemon, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        data = read_until(proc.stdout.fileno(), lambda d: d.count(HEADER) >= 2)
    finally:
        proc.send_signal(signal.SIGINT)
        rest, errors = proc.communicate(timeout=20)
    assert proc.returncode == 0, errors
    text = (data + rest).decode()
    assert b"\x1b[" not in data + rest  # no escape codes in a pipe
    snapshot = text.split("--- agentcoord status ")[1]
    assert "batches (1)" in snapshot
    assert "backend  agent-a" in snapshot and "live" in snapshot and "missing" in snapshot
    assert "claims (1)" in snapshot and "acme/widgets#1" in snapshot
    assert "aborted" not in errors.decode()


def test_a_batch_with_a_stop_request_is_flagged(daemon: Daemon, batch: dict) -> None:
    daemon.ctl("batch", "stop", "--batch-id", "b1")
    proc = watch(daemon, "--batch-id", "b1", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        data = read_until(proc.stdout.fileno(), lambda d: d.count(HEADER) >= 1 and b"heartbeats" in d)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    assert b"STOP REQUESTED" in data
    assert proc.returncode == 0


def test_json_watch_prints_one_overview_per_line(daemon: Daemon, batch: dict) -> None:
    proc = watch(daemon, "--json", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        data = read_until(proc.stdout.fileno(), lambda d: d.count(b"\n") >= 2)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    first = json.loads(data.splitlines()[0])
    assert first["batches"][0]["batch_id"] == "b1" and "at" in first
    assert proc.returncode == 0


def test_an_unreachable_daemon_is_shown_and_retried_not_fatal(daemon: Daemon) -> None:
    daemon.stop()
    proc = watch(daemon, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        data = read_until(proc.stdout.fileno(), lambda d: d.count(HEADER) >= 2)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    assert b"agentcoordd is not running" in data
    assert proc.returncode == 0


def test_on_a_tty_the_view_is_redrawn_in_place_with_liveness_colours(daemon: Daemon, batch: dict) -> None:
    master, slave = pty.openpty()
    proc = watch(daemon, stdin=slave, stdout=slave, stderr=slave,
                 env={"TERM": "xterm", "LINES": "60", "COLUMNS": "160"})
    os.close(slave)
    try:
        data = read_until(master, lambda d: d.count(b"\x1b[H\x1b[2J") >= 2 and d.rstrip().endswith(b"Z"))
        proc.send_signal(signal.SIGINT)
        data += read_until(master, lambda d: b"\x1b[?25h" in d)
        proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 0
    assert b"\x1b[?25l" in data  # cursor hidden while watching, shown again after
    assert b"\x1b[32mlive" in data  # liveness in colour
    assert b"--- agentcoord status" not in data
