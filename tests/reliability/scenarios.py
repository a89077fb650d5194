"""Reliability workloads shared by tests/reliability (CI sizes) and
bench/reliability.py (full sizes). Each returns a dict of figures; the tests
assert on them, the bench prints them as a table.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentcoordd import protocol as p
from agentcoordd.daemon.outbox import Outbox
from integration.helpers import PYTHON, Daemon, RawClient, make_daemon

CONTENDER = Path(__file__).with_name("contender.py")
REPO = "acme/widgets"


def short_base(prefix: str = "acrel.") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def local_caller(d: Daemon) -> p.Caller:
    return p.Caller(env={"HOME": str(d.base / "home"), "XDG_CONFIG_HOME": str(d.base / "xdgconfig")},
                    cwd=str(d.base), pid=os.getpid())


def call(d: Daemon, request: Any, *, local: bool = True, timeout: float = 30.0) -> p.Response:
    """One request on a fresh raw connection (local requests target the daemon's root)."""
    if local:
        request.caller = local_caller(d)
        request.selection = p.Selection(state_root=str(d.root))
    request.timeout = timeout
    with RawClient(d.socket, timeout=timeout + 5) as raw:
        raw.hello()
        return raw.call(request)


# ---- contention -------------------------------------------------------------------------


def contention(nodes: list[tuple[Daemon, dict[str, str], str | None]], *, procs: int, rounds: int,
               targets: int, batch: str, exists: Callable[[str], bool]) -> dict[str, Any]:
    """`procs` contender processes spread over `nodes` (daemon, caller env, state root)
    claiming `targets` shared targets for `rounds` rounds each."""
    markers = Path(tempfile.mkdtemp(prefix="acmk.", dir="/tmp"))
    names = ",".join(str(i) for i in range(1, targets + 1))
    started = time.monotonic()
    children = []
    for i in range(procs):
        d, env, root = nodes[i % len(nodes)]
        argv = [PYTHON, str(CONTENDER), "--socket", str(d.socket), "--agent", f"agent-{i}",
                "--repo", REPO, "--targets", names, "--rounds", str(rounds), "--batch", batch,
                "--markers", str(markers), "--env-json", json.dumps(env)]
        if root:
            argv += ["--state-root", root]
        children.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         env={**os.environ, "PYTHONPATH": _pythonpath()}))
    totals: dict[str, Any] = {"grants": 0, "refused": 0, "errors": 0, "double_grants": 0,
                              "release_failures": 0, "error_samples": []}
    acked: list[str] = []
    for child in children:
        stdout, stderr = child.communicate(timeout=3600)
        if child.returncode != 0:
            raise AssertionError(f"contender failed ({child.returncode}): {stderr.decode()[-2000:]}")
        result = json.loads(stdout)
        for key in ("grants", "refused", "errors", "double_grants", "release_failures"):
            totals[key] += result[key]
        totals["error_samples"] += result["error_samples"]
        acked += result["acked"]
    elapsed = time.monotonic() - started
    lost = [path for path in acked if not exists(path)]
    totals.update(procs=procs, rounds=rounds, attempts=procs * rounds, acked_writes=len(acked),
                  lost_writes=len(lost), lost_samples=lost[:5], seconds=round(elapsed, 1),
                  leftover_markers=len(os.listdir(markers)))
    return totals


def http_get(worker: Any, path: str, machine: str = "ref-all") -> dict[str, Any] | None:
    """The Worker's entry for `path` ({path, data, version, …}) or None."""
    from urllib.parse import quote

    import httpx

    resp = httpx.get(f"{worker.url}/v1/state/{quote(path, safe='')}", timeout=10,
                     headers={"Authorization": f"Bearer {worker.tokens[machine]}"})
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    return resp.json()


def _pythonpath() -> str:
    tests = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])


# ---- crash ---------------------------------------------------------------------------------


class Writer(threading.Thread):
    """A write-heavy client that survives daemon deaths: every acknowledged write is noted."""

    def __init__(self, d: Daemon, batch: str) -> None:
        super().__init__(daemon=True)
        self.d = d
        self.batch = batch
        self.stop = threading.Event()
        self.acked_events: list[str] = []
        self.acked_beats = 0
        self.acked_claims = 0
        self.unanswered = 0

    def run(self) -> None:
        n = 0
        raw: RawClient | None = None
        while not self.stop.is_set():
            try:
                if raw is None:
                    raw = _connect(self.d)
                n += 1
                caller, sel = local_caller(self.d), p.Selection(state_root=str(self.d.root))
                kind = n % 3
                if kind == 0:
                    req: Any = p.RecordEvent(batch_id=self.batch, type="work", message=f"n{n}")
                elif kind == 1:
                    req = p.Heartbeat(agent_id="writer", status="in_progress", ttl=600)
                else:
                    req = p.Claim(agent_id="writer", repo=REPO, target=str(n % 7), batch_id=self.batch)
                req.caller, req.selection, req.timeout = caller, sel, 10.0
                reply = raw.call(req)
                if reply.exit_code == 0:
                    if kind == 0:
                        self.acked_events.append(reply.payload["path"])
                    elif kind == 1:
                        self.acked_beats += 1
                    else:
                        self.acked_claims += 1
            except (OSError, ConnectionError, ValueError, AssertionError):
                self.unanswered += 1
                if raw is not None:
                    raw.close()
                raw = None
                time.sleep(0.02)
        if raw is not None:
            raw.close()


def _connect(d: Daemon) -> RawClient:
    """A raw client, or an error with nothing left open (the daemon may be dead)."""
    raw = RawClient.__new__(RawClient)
    raw.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.sock.settimeout(10)
    raw.decoder = p.client_decoder()
    try:
        raw.sock.connect(str(d.socket))
        raw.hello()
    except BaseException:
        raw.close()
        raise
    return raw


def local_descriptor(d: Daemon) -> dict[str, Any]:
    return {"key": f"local:{d.root}", "kind": "local", "location": str(d.root), "source": "test"}


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


def crash(base: Path, *, kills: int, seed: int = 7, min_gap: float = 0.05,
          max_gap: float = 0.5) -> dict[str, Any]:
    """SIGKILL the daemon `kills` times at random moments under a write-heavy workload."""
    rng = random.Random(seed)
    d = make_daemon(base)
    d.start()
    batch = "crash-b1"
    try:
        lane = call(d, p.Claim(agent_id="ka-agent", repo=REPO, target="lane", batch_id=batch,
                               keep_alive=p.KeepAlive(renew_every=0.5, heartbeat_ttl=30,
                                                      idle_timeout=86400)))
        assert lane.exit_code == 0, lane.error
        time.sleep(SAVE_SETTLE)  # the lanes file is saved within 0.25 s of a registration
        writer = Writer(d, batch)
        writer.start()
        injected: list[str] = []
        started = time.monotonic()
        for k in range(kills):
            time.sleep(rng.uniform(min_gap, max_gap))
            assert d.proc is not None
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait()
            # An event a previous life could not deliver, waiting in the outbox.
            path = f"events/{batch}/e-outbox-{k:04d}.json"
            Outbox(d.state_dir).append(path, {"schema_version": 1, "event_id": f"e-outbox-{k:04d}",
                                              "batch_id": batch, "type": "outbox.test",
                                              "at": "2024-01-01T00:00:00Z"}, local_descriptor(d))
            injected.append(path)
            d.start()
        time.sleep(0.3)
        writer.stop.set()
        writer.join(30)
        crash_seconds = time.monotonic() - started

        # ---- afterwards ----
        unparsable, temps, records = [], [], 0
        for current, _dirs, files in os.walk(d.root):
            for name in files:
                full = os.path.join(current, name)
                if name.startswith(".") and ".tmp-" in name:
                    temps.append(full)
                elif name.endswith(".json"):
                    records += 1
                    try:
                        json.loads(Path(full).read_bytes())
                    except ValueError:
                        unparsable.append(full)
        missing = [path for path in writer.acked_events if not (d.root / path).exists()]
        # Progress is not blocked: the same records are written again right away.
        progress = [
            call(d, p.Heartbeat(agent_id="writer", status="in_progress", ttl=600)).exit_code,
            call(d, p.Claim(agent_id="writer", repo=REPO, target="1", batch_id=batch)).exit_code,
            call(d, p.RecordEvent(batch_id=batch, type="after-crash")).exit_code,
        ]
        drained = wait_until(lambda: Outbox(d.state_dir).depth() == 0, 20.0)
        delivered = sum(1 for path in injected if (d.root / path).exists())
        beat_path = d.root / "heartbeats" / "ka-agent.json"
        before = json.loads(beat_path.read_text())["updated_at"]
        renewed = wait_until(lambda: json.loads(beat_path.read_text())["updated_at"] != before, 5.0)
        lanes = call(d, p.Lanes(agent_id="ka-agent")).payload["lanes"]
        lane_state = lanes[0]["state"] if lanes else None
        return {
            "kills": kills, "seconds": round(crash_seconds, 1), "records": records,
            "unparsable": len(unparsable), "unparsable_samples": unparsable[:5],
            "leftover_temp_files": len(temps), "acked_events": len(writer.acked_events),
            "acked_heartbeats": writer.acked_beats, "acked_claims": writer.acked_claims,
            "unanswered": writer.unanswered, "lost_writes": len(missing),
            "lost_samples": missing[:5], "progress_exit_codes": progress,
            "outbox_injected": len(injected), "outbox_delivered": delivered,
            "outbox_drained": drained, "lane_state": lane_state, "lane_renewing": renewed,
        }
    finally:
        d.stop()


SAVE_SETTLE = 1.0


# ---- backend outage ------------------------------------------------------------------------


def http_list(worker: Any, prefix: str) -> list[str]:
    """Every record path below `prefix` on the Worker (all pages)."""
    import asyncio

    async def collect() -> list[str]:
        store = worker.store()
        paths: list[str] = []
        cursor = None
        try:
            while True:
                page = await store.list(prefix, cursor=cursor)
                paths += [entry.path for entry in page.entries]
                cursor = page.next_cursor
                if not cursor:
                    return paths
        finally:
            await store.aclose()

    return asyncio.run(collect())


def outage(d: Daemon, worker: Any, *, seconds: float, timeout: float = 2.0,
           drain_within: float = 120.0) -> dict[str, Any]:
    """Stop the Worker for `seconds` during a workload; afterwards the outbox drains."""
    import uuid

    env = {"AGENT_COORD_API_URL": worker.url, "AGENT_COORD_API_TOKEN": worker.tokens["ref-all"]}
    caller = p.Caller(env=env, cwd=str(d.base), pid=os.getpid())
    batch = f"out-{uuid.uuid4().hex[:8]}"

    def run(request: Any, limit: float = timeout) -> tuple[p.Response, float]:
        request.caller, request.timeout = caller, limit
        started = time.monotonic()
        with RawClient(d.socket, timeout=limit + 5) as raw:
            raw.hello()
            reply = raw.call(request)
        return reply, time.monotonic() - started

    before, _ = run(p.RecordEvent(batch_id=batch, type="before"), 30.0)
    assert before.exit_code == 0, before.error
    acked = [before.payload["path"]]
    worker.stop()
    down_at = time.monotonic()
    failures: list[tuple[int, float]] = []
    queued: list[str] = []
    n = 0
    while time.monotonic() - down_at < seconds:
        n += 1
        reply, took = run(p.Claim(agent_id="out-agent", repo=REPO, target=str(n % 3), batch_id=batch))
        failures.append((reply.exit_code, took))
        event, _ = run(p.RecordEvent(batch_id=batch, type="during", message=f"n{n}",
                                     queue_on_failure=True))
        if event.exit_code == 0 and (event.payload or {}).get("action") == "queued":
            queued.append(event.payload["path"])
        time.sleep(0.2)
    worker.restart()
    up_at = time.monotonic()
    drained = wait_until(lambda: Outbox(d.state_dir).depth() == 0, drain_within, interval=0.25)
    drain_seconds = time.monotonic() - up_at
    after, _ = run(p.RecordEvent(batch_id=batch, type="after"), 30.0)
    stored = http_list(worker, f"events/{batch}")
    counts: dict[str, int] = {}
    for path in stored:
        counts[path] = counts.get(path, 0) + 1
    return {
        "outage_seconds": seconds, "commands_during": len(failures),
        "exit_codes": sorted({code for code, _ in failures}),
        "max_command_seconds": round(max((t for _, t in failures), default=0.0), 2),
        "timeout": timeout, "queued": len(queued), "drained": drained,
        "drain_seconds": round(drain_seconds, 1),
        "delivered": sum(1 for path in queued if counts.get(path)),
        "duplicates": sum(c - 1 for c in counts.values() if c > 1),
        "events_stored": len(stored), "events_expected": len(acked) + len(queued) + 1,
        "after_exit_code": after.exit_code,
    }
