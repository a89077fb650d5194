"""Hostile input: generated CLI arguments, manifests and socket frames (invalid
UTF-8, deep nesting, 10 MB values). The daemon never dies; every rejection is
one error line with the documented exit code (1 usage, 2 operational)."""

from __future__ import annotations

import socket
import subprocess

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcoordd import protocol as p
from integration.helpers import PYTHON, Daemon, RawClient

from .scenarios import call

EXAMPLES = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DOCUMENTED = {0, 1, 2, 3}


def _alive(d: Daemon) -> None:
    assert d.proc is not None and d.proc.poll() is None, "the daemon died"
    assert call(d, p.Version()).exit_code == 0


def _error_lines(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode(errors="replace").splitlines()
            if line.strip() and not line.startswith("warning: ")]


def _send_raw(d: Daemon, body: bytes, *, hello: bool = True) -> p.Response | None:
    """Send one frame; the reply (a Response) or None when the daemon just hung up."""
    with RawClient(d.socket, timeout=15) as raw:
        if hello:
            raw.hello()
        try:
            raw.sock.sendall(p.frame(body))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused mid-send (an oversized frame): the reply is already waiting
        try:
            reply = raw.recv()
            while isinstance(reply, p.Progress):  # long commands (gc) report progress first
                reply = raw.recv()
        except (ConnectionError, socket.timeout, OSError):
            return None
    assert isinstance(reply, p.Response)
    return reply


# ---- socket frames ----------------------------------------------------------------------


@EXAMPLES
@given(body=st.binary(max_size=2048))
def test_random_frames_are_rejected_with_one_line_and_the_daemon_lives(daemon: Daemon,
                                                                       body: bytes) -> None:
    reply = _send_raw(daemon, body)
    if reply is not None:
        assert reply.exit_code in DOCUMENTED
        if reply.exit_code:
            assert reply.error and "\n" not in reply.error
    _alive(daemon)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=40)
    | st.binary(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children,
                                                                       max_size=4),
    max_leaves=20,
)


@EXAMPLES
@given(fields=st.dictionaries(st.sampled_from(["op", "agent_id", "repo", "target", "batch_id",
                                                "caller", "selection", "timeout", "meta", "ttl"]),
                              json_values, max_size=6),
       op=st.sampled_from([t.__struct_config__.tag for t in p.REQUEST_TYPES] + ["nope"]))
def test_generated_requests_never_kill_the_daemon(daemon: Daemon, fields: dict, op: str) -> None:
    if op in ("daemon_stop", "dashboard"):
        op = "version"
    fields = {**fields, "op": op}
    fields.pop("selection", None)  # a generated backend selection could point anywhere
    reply = _send_raw(daemon, msgspec.msgpack.encode(fields))
    if reply is not None:
        assert reply.exit_code in DOCUMENTED
        if reply.exit_code:
            assert reply.error and "\n" not in reply.error
    _alive(daemon)


def test_invalid_utf8_deep_nesting_and_huge_frames_are_refused(daemon: Daemon) -> None:
    # msgpack str (0xa5) carrying invalid UTF-8 as the agent id
    bad_utf8 = b"\x83\xa2op\xa5claim\xa8agent_id\xa5\xff\xfe\xfd\xfc\xfb\xa4repo\xa1r"
    deep = b"\x91" * 100_000 + b"\xc0"  # 100k nested arrays
    for body in (bad_utf8, deep):
        reply = _send_raw(daemon, body)
        assert reply is not None and reply.exit_code == 1 and "\n" not in (reply.error or "")
        _alive(daemon)
    huge = msgspec.msgpack.encode({"op": "claim", "agent_id": "a" * (10 * 1024 * 1024)})
    reply = _send_raw(daemon, huge)
    assert reply is not None and reply.exit_code == 1 and "exceeds" in (reply.error or "")
    _alive(daemon)
    # a 10 MB header with nothing behind it, and a frame before Hello
    assert _send_raw(daemon, b"\x00\xa0\x00\x00", hello=False) is not None
    _alive(daemon)


# ---- manifests --------------------------------------------------------------------------


@EXAMPLES
@given(manifest=st.binary(max_size=4096) | json_values.map(lambda v: msgspec.json.encode(v)))
def test_generated_manifests_are_refused_cleanly(daemon: Daemon, manifest: bytes) -> None:
    reply = call(daemon, p.RegisterBatch(manifest=manifest))
    assert reply.exit_code in DOCUMENTED
    if reply.exit_code:
        assert reply.error and "\n" not in reply.error
    _alive(daemon)


def test_deeply_nested_and_10mb_manifests_are_one_line_errors(daemon: Daemon) -> None:
    deep = daemon.base / "deep.json"
    deep.write_bytes(b"[" * 50_000 + b"]" * 50_000)
    huge = daemon.base / "huge.json"
    huge.write_bytes(b'{"batch_id": "b1", "x": "' + b"y" * (10 * 1024 * 1024) + b'"}')
    for path in (deep, huge):
        result = daemon.ctl("register-batch", "--file", str(path))
        assert result.returncode in (1, 2)
        assert len(_error_lines(result.stderr)) == 1, result.stderr
    _alive(daemon)


# ---- CLI arguments ----------------------------------------------------------------------

ARG = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(command=st.sampled_from(["claim", "release", "heartbeat", "record-event", "status",
                                "outbox", "lanes"]),
       args=st.lists(st.sampled_from(["--agent-id", "--repo", "--target", "--batch-id", "--type",
                                      "--ttl", "--status", "--json"]) | ARG, max_size=6))
def test_generated_cli_arguments_exit_with_a_documented_code(daemon: Daemon, command: str,
                                                             args: list[str]) -> None:
    result = subprocess.run([PYTHON, "-m", "agentcoordctl.cli", command, *args],
                            env=daemon.env(), capture_output=True, timeout=30, cwd=str(daemon.base))
    assert result.returncode in DOCUMENTED, result.stderr
    assert b"Traceback" not in result.stderr
    if result.returncode:
        assert _error_lines(result.stderr), "a rejection says why"
    _alive(daemon)


def test_invalid_utf8_arguments_are_a_usage_error(daemon: Daemon) -> None:
    result = subprocess.run([PYTHON.encode(), b"-m", b"agentcoordctl.cli", b"claim", b"--agent-id",
                             b"\xff\xfe", b"--repo", b"acme/widgets", b"--target", b"1"],
                            env=daemon.env(), capture_output=True, timeout=30, cwd=str(daemon.base))
    assert result.returncode == 1, result.stderr
    assert len(_error_lines(result.stderr)) == 1 and b"Traceback" not in result.stderr
    _alive(daemon)
