"""`events --follow`: write-to-print latency on local, etcd and HTTP (issue 21).

    .venv/bin/python bench/event_feed.py [--backends local,etcd,http] [--events 100]
                                         [--rate 10] [--followers 1]

For each backend: a real agentcoordd (subprocess), FOLLOWERS `agentcoordctl
events --follow --json` processes, and a writer that records EVENTS events
at RATE per second through the daemon protocol (one `RecordEvent` request
each, the time taken just before it is sent). Each follower's stdout is read
line by line and stamped on arrival; latency = arrival - send time
(CLOCK_MONOTONIC, one clock for every process on the machine). Prints p50,
p99 and max per backend, with the feed source's reads and change notices
from `daemon status --json`. Targets: p99 <= 250 ms local and etcd, <= 2 s HTTP.

etcd: a fresh single-member cluster (/usr/bin/etcd, tests/store/etcd_cluster.py);
HTTP: our Worker under `wrangler dev --local` (tests/worker_fixture.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "store"))

from agentcoordctl import client  # noqa: E402
from agentcoordd import protocol as p  # noqa: E402

PY = sys.executable
BATCH = "feed-bench"


class Daemon:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.socket = base / "d.sock"
        self.env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(base / "home"),
                    "XDG_STATE_HOME": str(base / "xs"), "XDG_CONFIG_HOME": str(base / "xc"),
                    "AGENT_COORD_SOCKET": str(self.socket), "AGENT_COORD_NO_AUTOSTART": "1"}
        self.proc = subprocess.Popen(
            [PY, "-m", "agentcoordd.daemon.main", "--foreground", "--socket", str(self.socket),
             "--state-dir", str(base / "state")], env=self.env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=open(base / "daemon.log", "ab"))
        deadline = time.monotonic() + 15
        while not client.daemon_running(str(self.socket), 0.2):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"agentcoordd did not start (log: {base / 'daemon.log'})")
            time.sleep(0.05)

    def request(self, message: Any, caller_env: dict[str, str]) -> p.Response:
        message.caller = p.Caller(env={**self.env, **caller_env}, cwd=str(self.base),
                                  pid=os.getpid())
        response, _ = client.request(message, timeout=30, autostart=False, path=str(self.socket),
                                     env=self.env)
        return response

    def stop(self) -> None:
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(15)
        if self.proc.poll() is None:
            self.proc.kill()


class Follower:
    """One `events --follow --json` process; arrival time of every line it prints."""

    def __init__(self, d: Daemon, caller_env: dict[str, str]) -> None:
        env = {**d.env, **caller_env}
        self.proc = subprocess.Popen(
            [PY, "-m", "agentcoordctl.cli", "events", "--batch-id", BATCH, "--follow", "--json",
             "--until-type", "bench.done"], env=env, cwd=str(d.base),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.arrivals: dict[str, float] = {}
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            row = json.loads(line)
            if row.get("type") == "bench.ready":
                self.started.set()
            self.arrivals[row.get("message", "")] = now

    def finish(self) -> None:
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.thread.join(5)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def measure(name: str, d: Daemon, selection: p.Selection, caller_env: dict[str, str],
            events: int, rate: float, followers: int) -> dict[str, Any]:
    def record(kind: str, message: str) -> None:
        response = d.request(p.RecordEvent(batch_id=BATCH, type=kind, message=message,
                                           selection=selection), caller_env)
        if response.exit_code != 0:
            raise SystemExit(f"{name}: record-event failed: {response.error}")

    record("bench.ready", "ready")
    readers = [Follower(d, caller_env) for _ in range(followers)]
    for reader in readers:
        if not reader.started.wait(60):
            raise SystemExit(f"{name}: a follower did not start")
    sent: dict[str, float] = {}
    for i in range(events):
        tag = f"e{i}"
        sent[tag] = time.monotonic()
        record("bench.event", tag)
        time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - sent[tag])))
    status = d.request(p.DaemonStatus(), caller_env).payload
    record("bench.done", "done")
    for reader in readers:
        reader.finish()
    samples = [(reader.arrivals[tag] - at) * 1000 for reader in readers
               for tag, at in sent.items() if tag in reader.arrivals]
    lost = events * followers - len(samples)
    source = next(iter(status["feed"]["sources"]), {})
    return {"backend": name, "events": events, "followers": followers, "lost": lost,
            "p50_ms": round(statistics.median(samples), 1), "p99_ms": round(pct(samples, 0.99), 1),
            "max_ms": round(max(samples), 1), "mechanism": source.get("mechanism"),
            "reads": source.get("reads"), "ticks": source.get("ticks")}


@contextlib.contextmanager
def backend(name: str, base: Path) -> Iterator[tuple[p.Selection, dict[str, str]]]:
    if name == "local":
        root = base / "root"
        root.mkdir()
        yield p.Selection(state_root=str(root)), {"AGENT_COORD_STATE_ROOT": str(root)}
    elif name == "etcd":
        from etcd_cluster import EtcdCluster

        cluster = EtcdCluster(base / "etcd").start()
        try:
            endpoints = ",".join(cluster.endpoints)
            yield (p.Selection(etcd_endpoints=endpoints),
                   {"AGENT_COORD_ETCD_ENDPOINTS": endpoints, "AGENT_COORD_ETCD_PREFIX": "bench/"})
        finally:
            cluster.stop()
    else:
        from worker_fixture import launch_worker

        with launch_worker(base / "worker", {"bench": None}) as server:
            token = server.tokens["bench"]
            yield (p.Selection(api_url=server.url),
                   {"AGENT_COORD_API_URL": server.url, "AGENT_COORD_API_TOKEN": token})


TARGET_MS = {"local": 250, "etcd": 250, "http": 2000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="local,etcd,http")
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--rate", type=float, default=10.0, help="events per second")
    parser.add_argument("--followers", type=int, default=1)
    args = parser.parse_args()
    failed = False
    for name in args.backends.split(","):
        base = Path(tempfile.mkdtemp(prefix=f"acfb-{name}.", dir="/tmp"))
        try:
            (base / "home").mkdir()
            with backend(name, base) as (selection, caller_env):
                d = Daemon(base)
                try:
                    result = measure(name, d, selection, caller_env, args.events, args.rate,
                                     args.followers)
                finally:
                    d.stop()
        finally:
            shutil.rmtree(base, ignore_errors=True)
        ok = result["p99_ms"] <= TARGET_MS[name] and result["lost"] == 0
        failed = failed or not ok
        print(f"{name:5}  p50 {result['p50_ms']:7.1f} ms  p99 {result['p99_ms']:7.1f} ms  "
              f"max {result['max_ms']:7.1f} ms  (target p99 <= {TARGET_MS[name]} ms: "
              f"{'ok' if ok else 'MISSED'})  events {result['events']} x {result['followers']} "
              f"follower(s), lost {result['lost']}; source {result['mechanism']}: "
              f"{result['reads']} reads / {result['ticks']} notices", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
