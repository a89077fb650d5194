"""Hostile clients: each costs one log line and its connection, never the daemon."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import struct
import time
from collections.abc import Iterator

import msgspec
import pytest

from agentcoordd import protocol as p

from .helpers import Daemon, RawClient, local_request


def bad_client_lines(d: Daemon) -> list[dict]:
    return [e for e in d.log_events() if e.get("event") == "bad client"]


def wait_for_log(d: Daemon, count: int, timeout: float = 5.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = bad_client_lines(d)
        if len(lines) >= count:
            return lines
        time.sleep(0.02)
    return bad_client_lines(d)


def still_serves(d: Daemon) -> None:
    with d.raw() as client:
        client.hello()
        reply = client.call(local_request(d, p.Heartbeat(agent_id="good-client")))
        assert reply.exit_code == 0, reply.error


def raw_socket(d: Daemon) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(5)
    sock.connect(str(d.socket))
    return sock


def read_reply(sock: socket.socket) -> p.Response | None:
    try:
        return p.client_decoder().decode(p.recv_frame(sock))
    except (ConnectionError, OSError):
        return None


def hello_frame() -> bytes:
    return p.frame(msgspec.msgpack.encode(p.Hello(protocol=p.PROTOCOL_VERSION, client="hostile")))


@pytest.mark.parametrize("payload, reason", [
    (b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1", "undecodable"),
    (b"\x00\x00\x00\x07garbage", "invalid request"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "exceeds"),
    (struct.pack(">I", 2 * 1024**3) + b"x" * 16, "exceeds"),
    (struct.pack(">I", 100) + b"short", "truncated frame"),
    (b"\x00\x00", "truncated frame header"),
])
def test_malformed_frames_get_one_log_line_and_the_daemon_survives(
        daemon: Daemon, payload: bytes, reason: str) -> None:
    with raw_socket(daemon) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        read_reply(sock)
    lines = wait_for_log(daemon, 1)
    assert len(lines) == 1 and reason in lines[0]["reason"]
    still_serves(daemon)
    assert len(bad_client_lines(daemon)) == 1


def test_two_gigabyte_length_prefix_is_refused_without_allocating(daemon: Daemon) -> None:
    with raw_socket(daemon) as sock:
        sock.sendall(hello_frame())
        p.recv_frame(sock)
        sock.sendall(struct.pack(">I", 2 * 1024**3 - 1))
        reply = read_reply(sock)
    assert isinstance(reply, p.Response) and "cap" in (reply.error or "")
    still_serves(daemon)


def test_unknown_tag_is_a_usage_error_reply(daemon: Daemon) -> None:
    with raw_socket(daemon) as sock:
        sock.sendall(hello_frame())
        p.recv_frame(sock)
        sock.sendall(p.frame(msgspec.msgpack.encode({"op": "launch_missiles"})))
        reply = read_reply(sock)
    assert isinstance(reply, p.Response) and reply.exit_code == p.EXIT_USAGE
    assert "invalid request" in (reply.error or "")
    still_serves(daemon)


def test_wrong_field_types_are_a_usage_error_reply(daemon: Daemon) -> None:
    with raw_socket(daemon) as sock:
        sock.sendall(hello_frame())
        p.recv_frame(sock)
        sock.sendall(p.frame(msgspec.msgpack.encode(
            {"op": "claim", "agent_id": 7, "repo": ["x"], "target": None})))
        reply = read_reply(sock)
    assert isinstance(reply, p.Response) and reply.exit_code == p.EXIT_USAGE
    still_serves(daemon)


def test_a_request_before_hello_is_refused(daemon: Daemon) -> None:
    with raw_socket(daemon) as sock:
        sock.sendall(p.frame(msgspec.msgpack.encode(p.DaemonStatus())))
        reply = read_reply(sock)
    assert isinstance(reply, p.Response) and "Hello" in (reply.error or "")
    still_serves(daemon)


def test_other_protocol_version_gets_the_restart_command(daemon: Daemon) -> None:
    with raw_socket(daemon) as sock:
        sock.sendall(p.frame(msgspec.msgpack.encode(p.Hello(protocol=999, client="future"))))
        reply = read_reply(sock)
    assert isinstance(reply, p.Response) and reply.exit_code == p.EXIT_OPERATIONAL
    assert "restart" in (reply.error or "")


def test_abrupt_disconnect_after_sending_a_write_still_completes_it(daemon: Daemon) -> None:
    with raw_socket(daemon) as sock:
        sock.sendall(hello_frame() + p.frame(msgspec.msgpack.encode(
            local_request(daemon, p.Heartbeat(agent_id="gone-client")))))
    deadline = time.monotonic() + 5
    while not (daemon.root / "heartbeats/gone-client.json").exists():
        assert time.monotonic() < deadline, "the write of a vanished client was lost"
        time.sleep(0.02)
    still_serves(daemon)


def test_two_hundred_idle_connections_do_not_block_a_good_client(daemon: Daemon) -> None:
    idle = [raw_socket(daemon) for _ in range(200)]
    try:
        for sock in idle[:100]:
            sock.sendall(hello_frame())  # half of them even finish the handshake
        started = time.monotonic()
        still_serves(daemon)
        assert time.monotonic() - started < 2.0
    finally:
        for sock in idle:
            sock.close()
    still_serves(daemon)
    assert daemon.proc.poll() is None


def test_pipelined_requests_on_one_connection_are_answered_in_order(daemon: Daemon) -> None:
    with RawClient(daemon.socket) as client:
        client.hello()
        for n in range(20):
            client.send_frame(local_request(daemon, p.Heartbeat(agent_id=f"pipe-{n}")))
        replies = [client.recv() for _ in range(20)]
    assert [r.payload["heartbeat"]["agent_id"] for r in replies] == [f"pipe-{n}" for n in range(20)]


@contextlib.contextmanager
def record_locked(d: Daemon, path: str) -> Iterator[None]:
    """Hold a record's lock as another writer (agent-coord) would."""
    lock = d.root / f"{path}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def no_reply_yet(client: RawClient) -> bool:
    client.sock.settimeout(0.05)
    try:
        client.sock.recv(1, socket.MSG_PEEK)
        return False  # a byte waits (or b"": the connection closed): not silent
    except (BlockingIOError, TimeoutError):
        return True
    finally:
        client.sock.settimeout(10)


def test_pipelined_heartbeats_of_other_lanes_run_while_one_waits(daemon: Daemon) -> None:
    """One connection's heartbeats of different lanes run together; replies stay in order."""
    with RawClient(daemon.socket) as client:
        with record_locked(daemon, "heartbeats/pipe-0.json"):
            client.hello()
            for n in range(5):
                client.send_frame(local_request(daemon, p.Heartbeat(agent_id=f"pipe-{n}")))
            wait_until(lambda: all((daemon.root / f"heartbeats/pipe-{n}.json").exists() for n in range(1, 5)))
            assert not (daemon.root / "heartbeats/pipe-0.json").exists()
            assert no_reply_yet(client)  # pipe-1..4 are done, but pipe-0's reply comes first
        replies = [client.recv() for _ in range(5)]
    assert [(r.exit_code, r.payload["heartbeat"]["agent_id"]) for r in replies] == \
        [(0, f"pipe-{n}") for n in range(5)]


def test_a_pipelined_request_that_is_not_independent_waits_for_those_before(daemon: Daemon) -> None:
    """A claim after a waiting heartbeat runs only once that is answered, though a
    heartbeat of another lane next to it ran; a heartbeat of the same lane again
    runs after the first."""
    pipeline = [p.Heartbeat(agent_id="lane-a", status="first"), p.Heartbeat(agent_id="lane-b"),
                p.Claim(agent_id="lane-c", repo="acme/widgets", target="7"),
                p.Heartbeat(agent_id="lane-a", status="second"), p.Heartbeat(agent_id="lane-d")]
    with RawClient(daemon.socket) as client:
        with record_locked(daemon, "heartbeats/lane-a.json"):
            client.hello()
            for request in pipeline:
                client.send_frame(local_request(daemon, request))
            wait_until(lambda: (daemon.root / "heartbeats/lane-b.json").exists())
            time.sleep(0.5)  # what could start has started
            assert not (daemon.root / "heartbeats/lane-a.json").exists()
            assert not (daemon.root / "claims/acme/widgets/7.json").exists()
            assert not (daemon.root / "heartbeats/lane-d.json").exists()
        replies = [client.recv() for _ in pipeline]
    assert [r.exit_code for r in replies] == [0] * 5, [r.error for r in replies]
    assert [r.payload["heartbeat"]["agent_id"] for r in replies if "heartbeat" in r.payload] == \
        ["lane-a", "lane-b", "lane-a", "lane-d"]
    assert "claim" in replies[2].payload, replies[2].payload
    assert json.loads((daemon.root / "heartbeats/lane-a.json").read_text())["status"] == "second"
    assert (daemon.root / "claims/acme/widgets/7.json").exists()


def test_pipelined_heartbeats_naming_one_claim_run_one_after_the_other(daemon: Daemon) -> None:
    pipeline = [p.Heartbeat(agent_id="lane-y", repo="acme/widgets", target="8"),
                p.Heartbeat(agent_id="lane-z", repo="acme/widgets", target="8")]
    with RawClient(daemon.socket) as client:
        with record_locked(daemon, "heartbeats/lane-y.json"):
            client.hello()
            for request in pipeline:
                client.send_frame(local_request(daemon, request))
            time.sleep(1.0)  # lane-z's own record is free: only the shared claim holds it back
            assert not (daemon.root / "heartbeats/lane-z.json").exists()
        replies = [client.recv() for _ in pipeline]
    assert [(r.exit_code, r.payload["heartbeat"]["agent_id"]) for r in replies] == [(0, "lane-y"), (0, "lane-z")]


def test_pipelined_requests_of_a_client_that_left_all_complete(daemon: Daemon) -> None:
    with RawClient(daemon.socket) as client:
        client.send_frame(p.Hello(protocol=p.PROTOCOL_VERSION, client="raw-test"))
        client.sock.recv(1, socket.MSG_PEEK)  # the welcome arrived; left unread, so the close resets
        for request in (p.Heartbeat(agent_id="left-0"), p.Claim(agent_id="left-1", repo="acme/widgets",
                                                                 target="9"), p.Heartbeat(agent_id="left-2")):
            client.send_frame(local_request(daemon, request))
    for path in ("heartbeats/left-0.json", "claims/acme/widgets/9.json", "heartbeats/left-2.json"):
        wait_until(lambda path=path: (daemon.root / path).exists())
    # Its end is one line, whichever way the kernel told it (EPIPE on a reply, or
    # ECONNRESET on the next read after the unread welcome), never a traceback.
    wait_until(lambda: bad_client_lines(daemon))
    assert not [e for e in daemon.log_events() if e.get("event") == "connection failed; dropped it"]
    still_serves(daemon)


def test_a_bad_frame_after_pipelined_requests_is_answered_after_their_replies(daemon: Daemon) -> None:
    with RawClient(daemon.socket) as client:
        client.hello()
        for n in range(3):
            client.send_frame(local_request(daemon, p.Heartbeat(agent_id=f"before-bad-{n}")))
        client.sock.sendall(b"\x00\x00\x00\x07garbage")
        replies = [client.recv() for _ in range(4)]
    assert [r.payload["heartbeat"]["agent_id"] for r in replies[:3]] == [f"before-bad-{n}" for n in range(3)]
    assert replies[3].exit_code != 0 and "invalid request" in replies[3].error
    still_serves(daemon)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to setuid to nobody")
def test_another_uid_is_refused_by_the_daemon_itself(daemon: Daemon) -> None:
    import pwd

    nobody = pwd.getpwnam("nobody")
    # Let the kernel allow the connect, so the daemon's own check is what refuses.
    for path in (daemon.base.parent, daemon.base, daemon.socket.parent):
        os.chmod(path, 0o755)
    os.chmod(daemon.socket, 0o777)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: become nobody, connect, report what happened
        code = 1
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            sock = socket.socket(socket.AF_UNIX)
            sock.settimeout(30)  # generous: a loaded CI machine is slow, not wrong
            sock.connect(str(daemon.socket))
            try:
                sock.sendall(hello_frame())
            except BrokenPipeError:
                pass  # refused before the hello was written; the reason waits below, as for agentcoordctl
            reply = read_reply(sock)
            os.write(write_fd, ((reply.error or "") if reply else "no reply").encode())
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, never raised in a fork
            os.write(write_fd, f"child failed: {exc!r}".encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        message = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, message
    assert f"peer uid {nobody.pw_uid} is not the daemon's user" in message
    deadline = time.monotonic() + 20
    while not [e for e in daemon.log_events() if e.get("event") == "peer refused"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    refusal = [e for e in daemon.log_events() if e.get("event") == "peer refused"]
    assert len(refusal) == 1 and refusal[0]["peer_uid"] == nobody.pw_uid
    still_serves(daemon)


def test_a_json_payload_reply_carries_the_same_payload_encoded(daemon: Daemon) -> None:
    """`json_payload` (what ctl --json asks for) changes the encoding, never the answer;
    a client that does not ask gets the payload decoded as before."""
    daemon.ctl("heartbeat", "--agent-id", "json-a", "--status", "working")
    with RawClient(daemon.socket) as client:
        client.hello()
        client.send_frame(local_request(daemon, p.Status()))
        plain = client.recv()
        client.send_frame(local_request(daemon, p.Status(json_payload=True)))
        encoded = client.recv()
    assert plain.payload_json is None and plain.payload["heartbeats"][0]["agent_id"] == "json-a"
    assert encoded.payload is None and encoded.exit_code == plain.exit_code == 0
    assert msgspec.json.decode(encoded.payload_json) == plain.payload
    shown = daemon.ctl("status", "--json")
    assert shown.returncode == 0
    assert msgspec.json.decode(shown.stdout) == plain.payload
    assert shown.stdout.decode().startswith('{\n  "version"')  # still indented by two
    assert p.payload_as_json(p.Response(exit_code=0, payload="x" * p.MAX_RESPONSE_FRAME)).payload_json is None
