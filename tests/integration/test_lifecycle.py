"""Reaching the daemon: autostart, stale sockets, single instance, graceful stop."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from agentcoordd import protocol as p

from .helpers import PYTHON, Daemon, RawClient, local_request, wait_for_socket


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} still alive")


def test_autostart_starts_a_detached_daemon_with_a_clean_environment(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory()
    result = d.ctl("heartbeat", "--agent-id", "agent-a",
                   env={"AGENT_COORD_NO_AUTOSTART": "", "AGENT_COORD_SESSION_ID": "sess-secret-1",
                        "AGENT_COORD_API_TOKEN": "tok-should-not-leak", "CODEX_THREAD_ID": "t-1"})
    assert result.returncode == 0, result.stderr
    assert "started agentcoordd" in result.stderr.decode()
    status = RawClient(d.socket)
    status.hello()
    pid = status.call(p.DaemonStatus()).payload["pid"]
    status.close()
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        names = {item.split(b"=", 1)[0].decode() for item in environ if item}
        # XDG_CONFIG_HOME locates the machine's config (agentcoordd.toml, env files): no secret.
        assert names <= {"PATH", "HOME", "LANG", "LC_ALL", "XDG_RUNTIME_DIR", "XDG_STATE_HOME",
                         "XDG_CONFIG_HOME"}
        assert b"tok-should-not-leak" not in b"\0".join(environ)
        assert os.getsid(pid) == pid  # its own session
        record = json.loads((d.root / "heartbeats/agent-a.json").read_text())
        assert record["session_id"] == "sess-secret-1"  # identity travelled with the request
        again = d.ctl("heartbeat", "--agent-id", "agent-a", env={"AGENT_COORD_NO_AUTOSTART": ""})
        assert "started agentcoordd" not in again.stderr.decode()
    finally:
        os.kill(pid, signal.SIGTERM)
        _wait_gone(pid)


def test_no_autostart_exits_2_with_a_one_line_fix(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory()
    result = d.ctl("heartbeat", "--agent-id", "agent-a")
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "systemctl --user start agentcoordd.socket" in lines[0]
    assert not d.socket.exists()


def test_socket_dir_is_0700_and_socket_0600(daemon: Daemon) -> None:
    assert stat.S_IMODE(daemon.socket.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o600


def test_stale_socket_from_a_crashed_daemon_is_replaced(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory()
    d.start()
    assert d.proc is not None
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    assert d.socket.exists()  # the crash left it behind
    d.start()
    with d.raw() as client:
        client.hello()
        assert client.call(p.DaemonStatus()).payload["pid"] == d.proc.pid
    assert any(e.get("event") == "stale socket replaced" for e in d.log_events())


def test_a_live_daemon_is_never_replaced(daemon: Daemon) -> None:
    second = subprocess.run(
        [PYTHON, "-m", "agentcoordd.daemon.main", "--foreground", "--socket", str(daemon.socket),
         "--state-dir", str(daemon.state_dir)],
        capture_output=True, timeout=30, env=daemon.daemon_env())
    assert second.returncode == 1
    assert "already running" in second.stderr.decode()
    with daemon.raw() as client:
        client.hello()
        assert client.call(p.DaemonStatus()).payload["pid"] == daemon.proc.pid


def test_daemon_exits_when_its_socket_file_is_removed(daemon: Daemon) -> None:
    daemon.socket.unlink()
    assert daemon.proc.wait(10) == 0


def test_daemon_without_foreground_detaches_and_logs_to_its_state_dir(short_dir: Path) -> None:
    sock = short_dir / "bg.sock"
    state = short_dir / "bgstate"
    started = subprocess.run([PYTHON, "-m", "agentcoordd.daemon.main", "--socket", str(sock),
                              "--state-dir", str(state)], timeout=30, capture_output=True)
    assert started.returncode == 0, started.stderr
    wait_for_socket(sock)
    with RawClient(sock) as client:
        client.hello()
        pid = client.call(p.DaemonStop()).payload["pid"]
    _wait_gone(pid)
    assert "listening" in (state / "agentcoordd.log").read_text()


def test_sigterm_during_a_burst_of_writes_leaves_every_record_whole(daemon: Daemon) -> None:
    errors: list[str] = []
    stop = threading.Event()

    def writer(n: int) -> None:
        client = daemon.raw()
        try:
            client.hello()
            i = 0
            while not stop.is_set():
                reply = client.call(local_request(daemon, p.Heartbeat(
                    agent_id=f"agent-{n}", status="in_progress",
                    meta=p.Metadata(phase=f"p{i}", operator="x" * 2000))))
                assert reply.exit_code == 0, reply.error
                i += 1
        except (OSError, ConnectionError, ValueError):
            pass  # the daemon went away mid-burst: expected
        except AssertionError as exc:
            errors.append(str(exc))
        finally:
            client.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.6)
    daemon.proc.send_signal(signal.SIGTERM)
    code = daemon.proc.wait(20)
    stop.set()
    for t in threads:
        t.join(10)
    assert code == 0
    assert not errors
    records = list((daemon.root / "heartbeats").glob("*.json"))
    assert records
    for path in records:
        record = json.loads(path.read_text())  # whole JSON, never half a record
        assert record["agent_id"] == path.stem
    assert not [p_ for p_ in (daemon.root / "heartbeats").iterdir()
                if not p_.name.endswith((".json", ".json.lock"))]
    assert not daemon.socket.exists()
    assert any(e.get("event") == "stopped" for e in daemon.log_events())


def test_timeout_bounds_a_call_to_a_daemon_that_never_answers(short_dir: Path) -> None:
    sock_path = short_dir / "mute.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    server.listen(8)
    try:
        started = time.monotonic()
        result = subprocess.run(
            [PYTHON, "-m", "agentcoordctl.cli", "--timeout", "0.5", "heartbeat", "--agent-id", "a"],
            env={"PATH": os.environ["PATH"], "HOME": str(short_dir),
                 "AGENT_COORD_SOCKET": str(sock_path)}, capture_output=True, timeout=30)
        assert time.monotonic() - started < 5
        assert result.returncode == 2
        assert "did not answer within 0.5s" in result.stderr.decode()
    finally:
        server.close()


def test_version_mismatch_is_reported_with_the_restart_command(short_dir: Path) -> None:
    sock_path = short_dir / "old.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    server.listen(1)

    def fake_old_daemon() -> None:
        conn, _ = server.accept()
        with conn:
            decoder = p.server_decoder()
            decoder.decode(p.recv_frame(conn, p.MAX_REQUEST_FRAME))  # hello
            decoder.decode(p.recv_frame(conn, p.MAX_REQUEST_FRAME))  # request
            enc = p.encoder()
            conn.sendall(p.frame(enc.encode(p.Welcome(protocol=p.PROTOCOL_VERSION,
                                                      daemon_version="0.0.1", pid=4242))))
            conn.sendall(p.frame(enc.encode(p.Response(
                exit_code=0, payload={"heartbeat": {"agent_id": "a", "updated_at": "T"}},
                daemon_version="0.0.1"))))

    thread = threading.Thread(target=fake_old_daemon)
    thread.start()
    try:
        result = subprocess.run(
            [PYTHON, "-m", "agentcoordctl.cli", "heartbeat", "--agent-id", "a"],
            env={"PATH": os.environ["PATH"], "HOME": str(short_dir),
                 "AGENT_COORD_SOCKET": str(sock_path)}, capture_output=True, timeout=30)
    finally:
        thread.join(10)
        server.close()
    assert result.returncode == 0
    assert result.stdout.decode() == "heartbeat a T\n"
    notice = result.stderr.decode()
    assert "agentcoordd 0.0.1 (pid 4242) is older than agentcoordctl" in notice
    assert "agentcoordctl daemon stop" in notice


def test_a_client_resolving_another_socket_is_told_of_the_running_daemon(daemon: Daemon) -> None:
    """One daemon per user (issue 42): a shell whose XDG variables differ from the running
    daemon's (an MCP host passes few) is told which daemon runs instead of starting another."""
    home = daemon.base / "home"
    other_xdg = daemon.base / "elsewhere"
    env = {"HOME": str(home), "XDG_STATE_HOME": str(other_xdg / "state"),
           "XDG_RUNTIME_DIR": str(other_xdg / "run"), "AGENT_COORD_NO_AUTOSTART": ""}
    described = (f"pid {daemon.proc.pid}, socket {daemon.socket}, state dir {daemon.state_dir}, "
                 f"local state root ")
    claim = ("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "7")
    assert daemon.ctl(*claim).returncode == 0

    # Nothing chose the socket: the running daemon serves, and says so (one line).
    implicit = daemon.ctl("status", "--repo", "acme/widgets", "--target", "7", "--json",
                          env=env, unset=("AGENT_COORD_SOCKET",))
    assert implicit.returncode == 0, implicit.stderr.decode()
    notice = implicit.stderr.decode()
    assert notice.count("\n") == 1 and notice.startswith(f"notice: using the running agentcoordd ({described}")
    assert f"would have started a second one on {other_xdg}/run/agentcoord/agentcoordd.sock" in notice
    assert json.loads(implicit.stdout)["claims"][0]["agent_id"] == "agent-a"  # the same state
    assert not (other_xdg / "run").exists()  # no second daemon

    # AGENT_COORD_SOCKET names another socket: told, not overridden, nothing started.
    elsewhere = str(other_xdg / "x.sock")
    explicit = daemon.ctl(*claim, env={**env, "AGENT_COORD_SOCKET": elsewhere})
    text = explicit.stderr.decode()
    assert explicit.returncode == 2, text
    assert text.count("\n") == 1 and text.startswith(f"agentcoordd already runs for this user ({described}")
    assert f"AGENT_COORD_SOCKET names another socket, {elsewhere}: use that daemon with " \
           f"AGENT_COORD_SOCKET={daemon.socket}" in text
    assert not os.path.exists(elsewhere)

    # Once the daemon stops, its entry goes.
    daemon.stop()
    assert list((home / ".local/state/agentcoord/daemons").iterdir()) == []
