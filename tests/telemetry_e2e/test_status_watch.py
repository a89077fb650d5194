"""status --watch: snapshots when not a TTY, a redrawn coloured view on one; Ctrl-C exits 0.

Every wait ends as soon as the frame it waits for is there, bounded by OUTPUT_WAIT
(generous for a loaded machine); every watch is reaped however its test ends."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess

from integration.helpers import OUTPUT_WAIT, PYTHON, Daemon, interrupt, read_until, reaped

HEADER = b"--- agentcoord status "


def watch(daemon: Daemon, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "agentcoordctl.cli", "status", "--watch", "--interval", "0.3",
                             *args], env=daemon.env(**kwargs.pop("env", {})), cwd=str(daemon.base),
                            **kwargs)


def test_not_a_tty_prints_plain_snapshots_and_sigint_exits_0(daemon: Daemon, batch: dict) -> None:
    with reaped(watch(daemon, stdout=subprocess.PIPE, stderr=subprocess.PIPE)) as proc:
        data = read_until(proc.stdout.fileno(), lambda d: d.count(HEADER) >= 2)
        rest, errors = interrupt(proc)
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
    with reaped(watch(daemon, "--batch-id", "b1", stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE)) as proc:
        data = read_until(proc.stdout.fileno(), lambda d: d.count(HEADER) >= 1 and b"heartbeats" in d)
        interrupt(proc)
    assert b"STOP REQUESTED" in data
    assert proc.returncode == 0


def test_json_watch_prints_one_overview_per_line(daemon: Daemon, batch: dict) -> None:
    with reaped(watch(daemon, "--json", stdout=subprocess.PIPE, stderr=subprocess.PIPE)) as proc:
        data = read_until(proc.stdout.fileno(), lambda d: d.count(b"\n") >= 2)
        interrupt(proc)
    first = json.loads(data.splitlines()[0])
    assert first["batches"][0]["batch_id"] == "b1" and "at" in first
    assert proc.returncode == 0


def test_an_unreachable_daemon_is_shown_and_retried_not_fatal(daemon: Daemon) -> None:
    daemon.stop()
    with reaped(watch(daemon, stdout=subprocess.PIPE, stderr=subprocess.PIPE)) as proc:
        data = read_until(proc.stdout.fileno(), lambda d: d.count(HEADER) >= 2)
        interrupt(proc)
    assert b"agentcoordd is not running" in data
    assert proc.returncode == 0


def test_on_a_tty_the_view_is_redrawn_in_place_with_liveness_colours(daemon: Daemon, batch: dict) -> None:
    master, slave = pty.openpty()
    try:
        with reaped(watch(daemon, stdin=slave, stdout=slave, stderr=slave,
                          env={"TERM": "xterm", "LINES": "60", "COLUMNS": "160"})) as proc:
            os.close(slave)
            slave = -1
            data = read_until(master, lambda d: d.count(b"\x1b[H\x1b[2J") >= 2 and d.rstrip().endswith(b"Z"))
            proc.send_signal(signal.SIGINT)
            data = read_until(master, lambda d: b"\x1b[?25h" in d, data=data)
            proc.wait(OUTPUT_WAIT)
    finally:
        os.close(master)
        if slave != -1:
            os.close(slave)
    assert proc.returncode == 0
    assert b"\x1b[?25l" in data  # cursor hidden while watching, shown again after
    assert b"\x1b[32mlive" in data  # liveness in colour
    assert b"--- agentcoord status" not in data
