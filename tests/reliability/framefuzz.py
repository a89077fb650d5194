"""Hostile socket frames, generated: the frame fuzzer of tests/reliability and
bench/reliability.py (same strategies, CI size and full size).

Frames are built as raw msgpack bytes, so nesting can go 10,000 deep in any
field without recursion here: a real request skeleton (every request type, its
real field names) with one value replaced by something hostile — deep arrays
or maps, every msgpack type (nil, bools, ints of each width, floats incl.
NaN/inf, str, bin, ext, timestamps), unknown fields, long strings — then
optionally truncated, and framed with a header at, below or past each limit.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

import msgspec
from hypothesis import strategies as st

from agentcoordd import protocol as p

HELLO_LIMIT = 64 * 1024  # the daemon's default pre-hello frame limit (Limits.hello_frame)
MAX_DEPTH = 10_000


# ---- msgpack pieces, by hand -----------------------------------------------------


def mp_str(text: str) -> bytes:
    return msgspec.msgpack.encode(text)


def mp_map_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x80 | n])
    return b"\xde" + struct.pack(">H", n)


def nested(depth: int, kind: str, leaf: bytes) -> bytes:
    """`depth` levels of one-element arrays or maps around `leaf`."""
    if kind == "array":
        return b"\x91" * depth + leaf
    return (b"\x81" + mp_str("k")) * depth + leaf


scalars = st.one_of(
    st.just(b"\xc0"), st.just(b"\xc2"), st.just(b"\xc3"),  # nil, false, true
    st.integers(-(2**63), 2**64 - 1).map(msgspec.msgpack.encode),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308, -0.0, 5e-324])
    .map(msgspec.msgpack.encode),
    st.floats(allow_nan=True, allow_infinity=True).map(msgspec.msgpack.encode),
    st.text(max_size=64).map(mp_str),
    st.binary(max_size=64).map(lambda b: msgspec.msgpack.encode(b)),
    st.builds(lambda t, d: b"\xc7" + bytes([len(d)]) + struct.pack(">b", t) + d,
              st.integers(-128, 127), st.binary(max_size=40)),  # ext 8
    st.just(b"\xd6\xff" + struct.pack(">I", 2**32 - 1)),  # timestamp 32
    st.just(b"\xc7\x0c\xff" + b"\xff" * 12),  # timestamp 96, out of range
    st.binary(min_size=1, max_size=31).map(lambda b: bytes([0xA0 | len(b)]) + b),  # str, any bytes
    st.just(b"\xa4\xff\xfe\xed\xa0"),  # a str that is not UTF-8 (lone surrogate bytes too)
    st.binary(min_size=1, max_size=8),  # arbitrary (often invalid) bytes
)

hostile_values = st.one_of(
    scalars,
    st.builds(nested, st.integers(1, MAX_DEPTH), st.sampled_from(["array", "map"]), scalars),
    st.builds(lambda n, leaf: b"\xdd" + struct.pack(">I", n) + leaf * min(n, 4),
              st.integers(0, 2**32 - 1), scalars),  # an array that claims to be huge
    st.builds(lambda n: b"\xdb" + struct.pack(">I", n) + b"x" * min(n, 1000),
              st.integers(0, 2**32 - 1)),  # a str that claims to be huge
    st.integers(1000, 200_000).map(lambda n: mp_str("é" * n)),  # long, multi-byte
)

# Every request but `daemon_stop`: a well-formed one would (rightly) stop the daemon.
REQUEST_FIELDS = {t.__struct_config__.tag: list(t.__struct_fields__) for t in p.REQUEST_TYPES
                  if t is not p.DaemonStop}
NESTED_PARTS = {"caller": list(p.Caller.__struct_fields__),
                "selection": list(p.Selection.__struct_fields__),
                "meta": list(p.Metadata.__struct_fields__),
                "keep_alive": list(p.KeepAlive.__struct_fields__)}


def good_value(field: str) -> bytes:
    """A plausible value, so the hostile one is not rejected by a type check first."""
    if field in ("caller", "selection", "meta", "keep_alive"):
        return mp_map_header(0)
    if field in ("timeout", "wait_seconds", "poll_seconds"):
        return msgspec.msgpack.encode(0.5)  # waits end quickly
    if field in ("renew_every", "idle_timeout"):
        return msgspec.msgpack.encode(5.0)
    if field in ("ttl", "events", "hot_days", "archive_days", "synthetic_hot_days", "port",
                 "heartbeat_ttl", "watch_pid", "pid"):
        return msgspec.msgpack.encode(60)
    if field in ("prefixes",):
        return b"\x90"
    if field in ("typed",):
        return mp_map_header(0)
    if field in ("manifest",):
        return msgspec.msgpack.encode(b"{}")
    if field in ("execute", "include_archived", "all_events", "deep", "stack", "synthetic",
                 "queue_on_failure"):
        return b"\xc2"
    return mp_str("fuzz-" + field.replace("_", "-"))


@st.composite
def request_bodies(draw: st.DrawFn) -> bytes:
    """One request (or hello) map with a hostile value somewhere in it."""
    tag = draw(st.sampled_from(["hello", *REQUEST_FIELDS]))
    fields = ["protocol", "client", "client_version"] if tag == "hello" else REQUEST_FIELDS[tag]
    target = draw(st.sampled_from([*fields, "unknown_field", "op"]))
    parts: list[bytes] = [mp_str("op") + mp_str(tag)]
    for name in fields:
        if name == "op":
            continue
        if name == target:
            if name in NESTED_PARTS and draw(st.booleans()):
                inner = draw(st.sampled_from([*NESTED_PARTS[name], "unknown"]))
                value = mp_map_header(1) + mp_str(inner) + draw(hostile_values)
            else:
                value = draw(hostile_values)
        elif name == "protocol":
            value = msgspec.msgpack.encode(p.PROTOCOL_VERSION)
        else:
            value = good_value(name)
        parts.append(mp_str(name) + value)
    if target == "unknown_field":
        parts.append(mp_str(draw(st.text(max_size=12))) + draw(hostile_values))
    if target == "op":
        parts[0] = mp_str("op") + draw(hostile_values)
    return mp_map_header(len(parts)) + b"".join(parts)


@dataclass(frozen=True)
class Frame:
    """What one fuzz connection sends: maybe a real hello first, then header + body."""

    after_hello: bool
    header: bytes
    body: bytes


@st.composite
def frames(draw: st.DrawFn) -> Frame:
    body = draw(request_bodies())
    after_hello = draw(st.booleans())
    declared = len(body)
    shape = draw(st.sampled_from(["exact", "exact", "exact", "truncated", "declared"]))
    if shape == "truncated":
        body = body[: draw(st.integers(0, max(len(body) - 1, 0)))]
    elif shape == "declared":
        cap = p.MAX_REQUEST_FRAME if after_hello else HELLO_LIMIT
        declared = draw(st.sampled_from([cap - 1, cap, cap + 1, 2**32 - 1, 0, HELLO_LIMIT + 1]))
        body = body[:declared]
    return Frame(after_hello, declared.to_bytes(p.HEADER, "big"), body)


def send(path: str, frame: Frame, timeout: float = 10.0) -> p.Response | None:
    """Send one fuzz frame on its own connection; the daemon's answer, if any."""
    decoder = p.client_decoder()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        if frame.after_hello:
            sock.sendall(p.frame(msgspec.msgpack.encode(
                p.Hello(protocol=p.PROTOCOL_VERSION, client="fuzz"))))
            welcome = decoder.decode(p.recv_frame(sock))
            assert isinstance(welcome, p.Welcome), welcome
        try:
            sock.sendall(frame.header + frame.body)
            sock.shutdown(socket.SHUT_WR)  # a truncated frame ends here
        except OSError:
            pass  # refused mid-send: the reply (if any) is waiting
        try:
            while True:
                reply = decoder.decode(p.recv_frame(sock))
                if isinstance(reply, p.Response):
                    return reply
        except (OSError, ConnectionError, p.FrameError, msgspec.DecodeError):
            return None


def well_formed(reply: p.Response) -> bool:
    """A documented exit code (64: `doctor --stack-json` usage, its own contract); a
    failure says why in one line (or, for a wait that timed out, in its payload)."""
    if reply.exit_code not in (0, 1, 2, 3, p.EXIT_STACK_USAGE):
        return False
    if reply.error is not None and "\n" in reply.error:
        return False
    return reply.exit_code == 0 or bool(reply.error) or reply.payload is not None or reply.payload_json is not None


def served(path: str) -> bool:
    """A good client gets a good answer."""
    decoder = p.client_decoder()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10.0)
        sock.connect(path)
        sock.sendall(p.frame(msgspec.msgpack.encode(p.Hello(protocol=p.PROTOCOL_VERSION,
                                                            client="good")))
                     + p.frame(msgspec.msgpack.encode(p.Version())))
        while True:
            reply = decoder.decode(p.recv_frame(sock))
            if isinstance(reply, p.Response):
                return reply.exit_code == 0
