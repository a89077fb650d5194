"""The frame fuzzer: hypothesis-generated frames (nesting up to 10,000 deep in
every field, unknown fields, every msgpack type, truncation, sizes at and past
each limit) against one live daemon; after every example a good client is
served. CI size here; `bench/reliability.py` runs >= 100,000 frames."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, example, given, settings

from integration.helpers import Daemon

from . import framefuzz

FRAMES = int(os.environ.get("AGENT_COORD_FUZZ_FRAMES", "2000"))
DEEP_HELLO = (b"\x84" + framefuzz.mp_str("op") + framefuzz.mp_str("hello")
              + framefuzz.mp_str("protocol") + b"\x01" + framefuzz.mp_str("client")
              + framefuzz.mp_str("x") + framefuzz.mp_str("zz") + b"\x91" * 1000 + b"\xc0")


@settings(max_examples=FRAMES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(frame=framefuzz.frames())
@example(frame=framefuzz.Frame(False, len(DEEP_HELLO).to_bytes(4, "big"), DEEP_HELLO))
@example(frame=framefuzz.Frame(True, (2**21).to_bytes(4, "big"), b"\x00" * 1000))
@example(frame=framefuzz.Frame(False, (2**16 + 1).to_bytes(4, "big"), b""))
def test_no_frame_costs_more_than_its_connection(daemon: Daemon, frame: framefuzz.Frame) -> None:
    reply = framefuzz.send(str(daemon.socket), frame)
    if reply is not None:
        assert framefuzz.well_formed(reply), reply
    assert daemon.proc is not None and daemon.proc.poll() is None, "the daemon died"
    assert framefuzz.served(str(daemon.socket)), "a good client was not served"
