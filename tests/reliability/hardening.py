"""Hardening workloads (issue 17) shared by tests/reliability (CI sizes) and
bench/reliability.py (full sizes): a flood of partial frames, idle pre-hello
connections, a foreign lock holder, a restart with a caller-only token, two
daemons on one state dir, and the frame fuzzer at size. Each returns figures.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from agentcoordd import protocol as p
from agentcoordd.daemon.outbox import Outbox
from integration.helpers import PYTHON, Daemon, RawClient

from . import framefuzz
from .scenarios import call, http_list, wait_until


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def raise_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


def _connected(d: Daemon) -> socket.socket:
    from agentcoordctl.client import _connect  # waits out a full listen backlog, as ctl does

    return _connect(str(d.socket), 10.0)


def _timed_served(d: Daemon) -> tuple[bool, float]:
    started = time.monotonic()
    ok = framefuzz.served(str(d.socket))
    return ok, time.monotonic() - started


# ---- memory: a flood of partial frames -------------------------------------------------


def flood(d: Daemon, *, clients: int = 300, frame_bytes: int = p.MAX_REQUEST_FRAME) -> dict[str, Any]:
    """`clients` connections each send a hello and then all but 2 bytes of a frame of
    `frame_bytes`; the daemon must stay small and keep serving a good client."""
    assert d.proc is not None
    raise_fd_limit(clients + 256)
    rss_before = rss_kib(d.proc.pid)
    hello = p.frame(msgspec.msgpack.encode(p.Hello(protocol=p.PROTOCOL_VERSION, client="flood")))
    partial = frame_bytes.to_bytes(p.HEADER, "big") + b"\x00" * (frame_bytes - 2)
    held: list[socket.socket] = []
    refused: list[str] = []
    served_during: list[bool] = []
    decoder = p.client_decoder()
    for n in range(clients):
        sock = _connected(d)
        sock.sendall(hello)
        decoder.decode(p.recv_frame(sock))  # welcome
        try:
            sock.sendall(partial)
        except OSError:
            pass  # refused while we sent: its reason is waiting
        sock.settimeout(0.05)
        try:
            reply = decoder.decode(p.recv_frame(sock))
            refused.append(reply.error or "")
            sock.close()
        except (OSError, ConnectionError):
            held.append(sock)  # still being read: it holds its part of the budget
        if n % 50 == 49:
            served_during.append(_timed_served(d)[0])
    peak = rss_kib(d.proc.pid, "VmHWM")
    after = rss_kib(d.proc.pid)
    ok, latency = _timed_served(d)
    for sock in held:
        sock.close()
    reasons = sorted({" ".join(r.split()[:4]) for r in refused})
    return {"clients": clients, "frame_bytes": frame_bytes, "held": len(held),
            "refused": len(refused), "refusal_reasons": reasons,
            "refusals_one_line": all(r and "\n" not in r for r in refused),
            "rss_before_mb": round(rss_before / 1024, 1), "rss_peak_mb": round(peak / 1024, 1),
            "rss_growth_mb": round((peak - rss_before) / 1024, 1),
            "rss_after_mb": round(after / 1024, 1),
            "served_throughout": all(served_during) and ok, "good_client_ms": round(latency * 1000, 1),
            "alive": d.proc.poll() is None}


def idle_connections(d: Daemon, *, count: int, hello_timeout: float) -> dict[str, Any]:
    """`count` connections that never say hello: past the limit each is refused at once
    with one line; once the hello deadline frees the slots, good clients are served."""
    assert d.proc is not None
    raise_fd_limit(count + 256)
    opened: list[socket.socket] = []
    refusals: list[str] = []
    started = time.monotonic()
    for _ in range(count):
        opened.append(_connected(d))
    decoder = p.client_decoder()
    deadline = time.monotonic() + 2.0
    for sock in opened:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            reply = decoder.decode(p.recv_frame(sock))
            refusals.append(reply.error or "")
        except (OSError, ConnectionError):
            pass  # accepted and waiting for its hello
    accepted = count - len(refusals)
    time.sleep(hello_timeout + 0.5)
    ok, latency = _timed_served(d)
    for sock in opened:
        sock.close()
    return {"connections": count, "accepted": accepted, "refused": len(refusals),
            "refusal": refusals[0] if refusals else None,
            "refusals_one_line": all(r and "\n" not in r for r in refusals),
            "served_after_deadline": ok, "good_client_ms": round(latency * 1000, 1),
            "seconds": round(time.monotonic() - started, 1), "alive": d.proc.poll() is None}


# ---- a foreign lock holder ------------------------------------------------------------------

LOCK_HOLDER = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDONLY)  # a read-only fd is enough to flock
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
""")


def lock_holder(d: Daemon, *, seconds: float, locked_calls: int = 45, other_calls: int = 60,
                timeout: float = 2.0) -> dict[str, Any]:
    """Another process holds one heartbeat's lock for `seconds`: the calls on that record
    fail (exit 2 naming the lock) within their timeout; every other record's calls succeed."""
    victim = f"locked-{uuid.uuid4().hex[:6]}"
    assert call(d, p.Heartbeat(agent_id=victim)).exit_code == 0
    lock = d.root / "heartbeats" / f"{victim}.json.lock"
    holder = subprocess.Popen([PYTHON, "-c", LOCK_HOLDER, str(lock), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    started = time.monotonic()
    locked: list[tuple[int, float, str]] = []
    others: list[tuple[int, float, str]] = []
    guard = threading.Lock()

    def one(request: Any, into: list[tuple[int, float, str]]) -> None:
        t0 = time.monotonic()
        try:
            reply = call(d, request, timeout=timeout)
            result = (reply.exit_code, time.monotonic() - t0, reply.error or "")
        except OSError as exc:
            result = (-1, time.monotonic() - t0, str(exc))
        with guard:
            into.append(result)

    threads = [threading.Thread(target=one, args=(p.Heartbeat(agent_id=victim), locked))
               for _ in range(locked_calls)]
    for t in threads:
        t.start()
    time.sleep(0.2)  # the locked calls are now waiting
    n = 0
    while n < other_calls or time.monotonic() - started < min(seconds - 0.5, timeout + 1.0):
        n += 1
        kind = n % 3
        request = (p.Heartbeat(agent_id=f"free-{n % 7}") if kind == 0 else
                   p.Claim(agent_id=f"free-{n % 7}", repo="acme/widgets", target=str(n % 11))
                   if kind == 1 else p.Status(repo="acme/widgets", target=str(n % 11)))
        one(request, others)
    for t in threads:
        t.join(timeout + 10)
    elapsed = time.monotonic() - started
    holder.kill()
    holder.wait()
    holder.stdout.close()
    after = call(d, p.Heartbeat(agent_id=victim)).exit_code
    return {"hold_seconds": seconds, "locked_calls": len(locked),
            "locked_exit_codes": sorted({c for c, _, _ in locked}),
            "locked_errors_name_lock": all(f"{victim}.json.lock" in e for _, _, e in locked),
            "slowest_locked_call": round(max(t for _, t, _ in locked), 2),
            "timeout": timeout, "other_calls": len(others),
            "other_exit_codes": sorted({c for c, _, _ in others}),
            "other_failures": [e for c, _, e in others if c not in (0, 3)][:3],
            "slowest_other_call": round(max(t for _, t, _ in others), 2),
            "after_release_exit_code": after, "seconds": round(elapsed, 1)}


# ---- a restart with a caller-only token ---------------------------------------------------


def caller_token_restart(d: Daemon, worker: Any, *, events: int = 7) -> dict[str, Any]:
    """The token travels only with callers. Worker down → events queued; daemon SIGKILLed
    and started again (no token of its own); Worker back. Entries wait for a token; the
    next call that brings one delivers every event exactly once."""
    assert d.proc is not None
    env = {"AGENT_COORD_API_URL": worker.url, "AGENT_COORD_API_TOKEN": worker.tokens["ref-all"]}
    caller = p.Caller(env=env, cwd=str(d.base), pid=os.getpid())
    batch = f"tok-{uuid.uuid4().hex[:8]}"

    def run(request: Any, limit: float = 5.0) -> p.Response:
        request.caller, request.timeout = caller, limit
        with RawClient(d.socket, timeout=limit + 5) as raw:
            raw.hello()
            return raw.call(request)

    worker.stop()
    queued = []
    for n in range(events):
        reply = run(p.RecordEvent(batch_id=batch, type="tok.queued", message=f"n{n}",
                                  queue_on_failure=True), 2.0)
        if reply.exit_code == 0 and (reply.payload or {}).get("action") == "queued":
            queued.append(reply.payload["path"])
    d.proc.kill()
    d.proc.wait()
    d.start()
    worker.restart()
    time.sleep(3.0)  # the delivery loop runs: without a token nothing can be delivered
    before = call(d, p.OutboxList(), local=False)
    waiting = (before.payload or {}).get("waiting_for_token", 0)
    stranded_before = len(queued) - len([e for e in http_list(worker, f"events/{batch}")])
    started = time.monotonic()
    status = run(p.Status(batch_id=batch), 15.0)  # any call that brings the token
    drained = wait_until(lambda: Outbox(d.state_dir).depth() == 0, 30.0, interval=0.1)
    drain_seconds = time.monotonic() - started
    stored = http_list(worker, f"events/{batch}")
    counts: dict[str, int] = {}
    for path in stored:
        counts[path] = counts.get(path, 0) + 1
    return {"events": events, "queued": len(queued), "waiting_for_token": waiting,
            "undelivered_before_token": stranded_before, "call_exit_code": status.exit_code,
            "drained": drained, "drain_seconds": round(drain_seconds, 2),
            "delivered": sum(1 for path in queued if counts.get(path)),
            "duplicates": sum(c - 1 for c in counts.values() if c > 1)}


# ---- one state dir, two daemons -------------------------------------------------------------

OUTBOX_WRITER = textwrap.dedent("""
    import sys
    from agentcoordd.daemon.outbox import Outbox
    box = Outbox(sys.argv[1])
    me, n = sys.argv[2], int(sys.argv[3])
    async def keep_none(entry):
        raise RuntimeError("backend down")
    import anyio
    for i in range(n):
        box.append(f"events/b/{me}-{i}.json", {"i": i}, {"key": "local:/x", "kind": "local"})
        if i % 5 == 0:
            anyio.run(box.flush, keep_none)  # a rewrite while the other process appends
    print("done", flush=True)
""")


def shared_state_dir(make: Callable[[str], Daemon], *, appends: int = 60) -> dict[str, Any]:
    """Two daemons pointed at one state dir (different sockets, as a caller without
    XDG_RUNTIME_DIR would compute): the second refuses to start, a ctl call on the other
    socket path reaches the first, and two processes sharing the outbox lose nothing."""
    first = make("s1")
    first.start()
    second = make("s2")
    second.state_dir = first.state_dir
    refused = subprocess.run(
        [PYTHON, "-m", "agentcoordd.daemon.main", "--foreground", "--socket", str(second.socket),
         "--state-dir", str(first.state_dir)],
        capture_output=True, timeout=30, env=second.daemon_env())
    writers = [subprocess.Popen([PYTHON, "-c", OUTBOX_WRITER, str(first.base / "shared-outbox"),
                                 name, str(appends)], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
               for name in ("w1", "w2")]
    for w in writers:
        w.communicate(timeout=120)
    kept = {e.path for e in Outbox(first.base / "shared-outbox").entries()}
    expected = {f"events/b/{name}-{i}.json" for name in ("w1", "w2") for i in range(appends)}
    return {"second_daemon_exit": refused.returncode,
            "second_daemon_message": refused.stderr.decode().strip().splitlines()[-1],
            "outbox_appends": len(expected), "outbox_lost": len(expected - kept),
            "first_alive": first.proc is not None and first.proc.poll() is None}


# ---- the frame fuzzer at size ----------------------------------------------------------------


def frame_fuzz(d: Daemon, *, frames: int, seed: int = 17) -> dict[str, Any]:
    """`frames` generated frames against a live daemon, a good client after each;
    a death is counted (and the daemon restarted) instead of stopping the run."""
    from hypothesis import HealthCheck, Phase, given, seed as hyp_seed, settings

    figures: dict[str, Any] = {"frames": 0, "deaths": 0, "replies": 0, "bad_replies": 0,
                               "good_failures": 0, "samples": []}
    started = time.monotonic()

    @hyp_seed(seed)
    @settings(max_examples=frames, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(frame=framefuzz.frames())
    def one(frame: framefuzz.Frame) -> None:
        figures["frames"] += 1
        try:
            reply = framefuzz.send(str(d.socket), frame)
        except OSError:
            reply = None
        if reply is not None:
            figures["replies"] += 1
            if not framefuzz.well_formed(reply):
                figures["bad_replies"] += 1
                figures["samples"].append((frame.body[:120], reply.exit_code, reply.error))
        if d.proc is not None and d.proc.poll() is not None:
            figures["deaths"] += 1
            d.start()
        try:
            if not framefuzz.served(str(d.socket)):
                figures["good_failures"] += 1
        except OSError:
            figures["good_failures"] += 1

    one()
    figures["seconds"] = round(time.monotonic() - started, 1)
    return figures
