"""What the daemon's Prometheus metrics cost (issue 22: RSS within 5 MB, added latency).

    .venv/bin/python bench/metrics_overhead.py [--requests 2000] [--rounds 3] [--root-dir /dev/shm]

Starts real daemons in three configurations, alternating, `--rounds` times each:
  off      `--no-metrics` (what the daemon was before metrics: prometheus_client never imported)
  on       metrics recorded, no HTTP server
  on+http  metrics recorded and `--metrics-port` serving /metrics (scraped once per round)
For each: RSS of the idle daemon (1 s after start), then `--requests` heartbeats through
the daemon protocol on one raw connection (after 200 warm-up ones), their mean and
median µs, and RSS after them. Then the added latency: median(on) − median(off),
and, noise-free, the in-process cost of what one heartbeat records (one request
sample plus its store calls, timed in a loop).
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agentcoordd import protocol as p

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ctl_latency import start_daemon  # noqa: E402

CONFIGS = {"off": ["--no-metrics"], "on": [], "on+http": None}  # None: --metrics-port PORT
WARMUP = 200


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape(port: int) -> bytes:
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/metrics")
            body = conn.getresponse().read()
            conn.close()
            return body
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def store_calls_per_heartbeat(exposition: bytes) -> float:
    """Timed store calls per heartbeat request, from the daemon's own metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    calls = requests = 0.0
    for family in text_string_to_metric_families(exposition.decode()):
        for sample in family.samples:
            if sample.name == "agentcoord_backend_request_duration_seconds_count":
                calls += sample.value
            elif sample.name == "agentcoord_requests_total" and sample.labels["op"] == "heartbeat":
                requests += sample.value
    return calls / requests if requests else 0.0


def heartbeats(sock_path: Path, root: str, count: int) -> list[float]:
    """µs per heartbeat request, one connection, sequential."""
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(sock_path))
    enc, dec = p.encoder(), p.client_decoder()
    sock.sendall(p.frame(enc.encode(p.Hello(protocol=p.PROTOCOL_VERSION, client="bench"))))
    dec.decode(p.recv_frame(sock))
    body = p.frame(enc.encode(p.Heartbeat(agent_id="bench", selection=p.Selection(state_root=root),
                                          caller=p.Caller(env={"HOME": root}, cwd=root))))
    out = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            sock.sendall(body)
            reply = dec.decode(p.recv_frame(sock))
            out.append((time.perf_counter() - start) * 1e6)
            if reply.exit_code != 0:
                raise SystemExit(reply.error)
    finally:
        sock.close()
    return out


def run(config: str, requests: int, root_dir: str) -> dict[str, float]:
    base = Path(tempfile.mkdtemp(prefix="acmetrics.", dir="/tmp"))
    root = tempfile.mkdtemp(prefix="acmetrics-root.", dir=root_dir)
    sock = base / "d.sock"
    args = CONFIGS[config]
    port = None
    if args is None:
        port = free_port()
        args = ["--metrics-port", str(port)]
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(base),
           "XDG_STATE_HOME": str(base / "state")}
    daemon = start_daemon(base, env, *args)
    try:
        if port is not None:
            scrape(port)  # the server is up (and the exposition code loaded) before measuring
        time.sleep(1.0)
        idle = rss_kib(daemon.pid)
        heartbeats(sock, root, WARMUP)
        samples = heartbeats(sock, root, requests)
        calls = store_calls_per_heartbeat(scrape(port)) if port is not None else 0.0
        after = rss_kib(daemon.pid)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(20)
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    return {"idle_kib": idle, "after_kib": after, "mean_us": statistics.fmean(samples),
            "median_us": statistics.median(samples), "calls": calls}


class _NullStore:
    """The cheapest possible store: what is left of a call is the wrapper's own cost."""

    name = "null"
    capabilities = None

    async def get(self, path: str) -> None:
        return None


def recording_cost(loops: int = 200_000) -> tuple[float, float]:
    """µs to record one request sample, and µs a TimedStore adds to one store call
    (its extra await, two clock reads and the histogram sample), in process."""
    import asyncio

    from agentcoordd.daemon.metrics import PrometheusMetrics

    metrics = PrometheusMetrics()
    request = p.Heartbeat(agent_id="bench")
    start = time.perf_counter()
    for _ in range(loops):
        metrics.request(request, 0, 0.0004)
    per_request = (time.perf_counter() - start) / loops * 1e6

    async def calls(store: _NullStore) -> float:
        start = time.perf_counter()
        for _ in range(loops):
            await store.get("claims/x.json")
        return (time.perf_counter() - start) / loops * 1e6

    bare = asyncio.run(calls(_NullStore()))
    timed = asyncio.run(calls(metrics.wrap(_NullStore(), "local")))
    return per_request, timed - bare


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--root-dir", default="/dev/shm" if os.path.isdir("/dev/shm") else "/tmp",
                        help="where the state root lives (default /dev/shm: no fsync noise)")
    args = parser.parse_args()

    results: dict[str, list[dict[str, float]]] = {name: [] for name in CONFIGS}
    for _ in range(args.rounds):
        for name in CONFIGS:
            results[name].append(run(name, args.requests, args.root_dir))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpu(s), {args.requests} heartbeats "
          f"x {args.rounds} rounds, state root on {args.root_dir}")
    print(f"{'config':<9} {'idle RSS':>10} {'RSS after':>10} {'mean µs':>9} {'median µs':>10}")
    med: dict[str, dict[str, float]] = {}
    for name, rows in results.items():
        med[name] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        m = med[name]
        print(f"{name:<9} {m['idle_kib'] / 1024:8.1f}MB {m['after_kib'] / 1024:8.1f}MB "
              f"{m['mean_us']:9.1f} {m['median_us']:10.1f}")
    for name in ("on", "on+http"):
        print(f"{name} − off: idle RSS {(med[name]['idle_kib'] - med['off']['idle_kib']) / 1024:+.2f} MB, "
              f"RSS after {(med[name]['after_kib'] - med['off']['after_kib']) / 1024:+.2f} MB, "
              f"median {med[name]['median_us'] - med['off']['median_us']:+.1f} µs/request, "
              f"mean {med[name]['mean_us'] - med['off']['mean_us']:+.1f} µs/request")
    per_request, per_call = recording_cost()
    calls = med["on+http"]["calls"]
    print(f"in process: one request sample {per_request:.2f} µs, one timed store call "
          f"+{per_call:.2f} µs -> a heartbeat (1 request + {calls:.1f} store calls, as scraped) "
          f"adds {per_request + calls * per_call:.2f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
