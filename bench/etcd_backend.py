"""agentcoordd on etcd: latency through the daemon and renewal throughput, 1 and 3 members.

    .venv/bin/python bench/etcd_backend.py [--members 1,3] [--runs 30] [--seconds 4]
        [--clients 8] [--lanes 400] [--renew-every 0.5] [--data-dir /tmp]

For each cluster size it starts a throwaway etcd cluster on loopback (the
test harness in tests/store/etcd_cluster.py: Debian's etcd-server, 50 ms
heartbeat, 500 ms election timeout) and one agentcoordd whose callers select
etcd with AGENT_COORD_ETCD_ENDPOINTS, then prints

* median / p95 of `agentcoordctl claim`, `heartbeat`, `status --repo --target`
  as subprocesses (what an agent pays, interpreter start included) and of the
  same requests through ctl's client library in-process (daemon + etcd only);
* heartbeats/s through the daemon from N concurrent raw-socket clients;
* keep-alive renewals/s: L lanes registered with `claim --keep-alive`
  renewing every R seconds (demand L/R per second); achieved renewals/s,
  renewal failures and scheduler lag from `agentcoordctl lanes --json`;
* a whole listing of --listing claims (10,000), unchanged, from an in-process
  EtcdStore: ms for the first, for repeats answered from the kept listing
  after one keys-only range (`min_mod_revision`), for repeats from a store
  that keeps nothing, and their ratio (`--only-listing` skips the rest).

etcd's data dir decides fsync cost: /tmp here is the machine's disk,
/dev/shm takes fsync out (not a production setting).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_DIR / "tests" / "store"))

from etcd_cluster import EtcdCluster  # noqa: E402

from agentcoordctl import client  # noqa: E402
from agentcoordd import protocol as p  # noqa: E402

CTL = [sys.executable, "-m", "agentcoordctl.cli"]
REPO = "bench/widgets"


def summary(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return f"  {name:<58} median {statistics.median(samples):7.1f} ms   p95 {p95:7.1f} ms"


class Bench:
    def __init__(self, base: Path, endpoints: list[str]) -> None:
        self.base = base
        self.sock = base / "d.sock"
        self.env = {
            "PATH": os.environ.get("PATH", os.defpath), "HOME": str(base),
            "XDG_STATE_HOME": str(base / "state"), "XDG_CONFIG_HOME": str(base / "config"),
            "AGENT_COORD_SOCKET": str(self.sock), "AGENT_COORD_NO_AUTOSTART": "1",
            "AGENT_COORD_ETCD_ENDPOINTS": ",".join(endpoints),
            "AGENT_COORD_ETCD_PREFIX": "bench/",
        }
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "agentcoordd.daemon.main", "--foreground", "--socket",
             str(self.sock), "--state-dir", str(base / "daemon"), "--log-level", "warning"],
            env={k: v for k, v in self.env.items() if not k.startswith("AGENT_COORD_ETCD")},
            stdout=subprocess.DEVNULL, stderr=open(base / "daemon.log", "ab"))  # noqa: SIM115
        deadline = time.monotonic() + 10
        while not self.sock.exists():
            if time.monotonic() > deadline or self.daemon.poll() is not None:
                raise SystemExit("agentcoordd did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.daemon.send_signal(signal.SIGTERM)
        self.daemon.wait(30)

    # -- one call, two ways --
    def ctl(self, *args: str) -> float:
        start = time.perf_counter()
        result = subprocess.run([*CTL, *args], env=self.env, capture_output=True)
        elapsed = (time.perf_counter() - start) * 1000
        if result.returncode != 0:
            raise SystemExit(f"ctl {args} failed ({result.returncode}): {result.stderr.decode()}")
        return elapsed

    def request(self, message: Any) -> tuple[float, p.Response]:
        message.caller = client.caller(self.env)
        start = time.perf_counter()
        response, _ = client.request(message, timeout=30, autostart=False, env=self.env,
                                     path=str(self.sock))
        elapsed = (time.perf_counter() - start) * 1000
        if response.exit_code != 0:
            raise SystemExit(f"{type(message).__name__} failed: {response.error}")
        return elapsed, response


def latencies(b: Bench, runs: int) -> None:
    b.ctl("claim", "--agent-id", "bench-a", "--repo", REPO, "--target", "warm")
    rows: list[tuple[str, Callable[[int], float]]] = [
        ("ctl claim (new target)", lambda n: b.ctl(
            "claim", "--agent-id", "bench-a", "--repo", REPO, "--target", f"c{n}")),
        ("ctl heartbeat --repo --target", lambda n: b.ctl(
            "heartbeat", "--agent-id", "bench-a", "--repo", REPO, "--target", "warm")),
        ("ctl status --repo --target --json", lambda n: b.ctl(
            "status", "--repo", REPO, "--target", "warm", "--json")),
        ("in-process claim (new target)", lambda n: b.request(p.Claim(
            agent_id="bench-a", repo=REPO, target=f"i{n}"))[0]),
        ("in-process heartbeat", lambda n: b.request(p.Heartbeat(
            agent_id="bench-a", repo=REPO, target="warm"))[0]),
        ("in-process status --repo --target", lambda n: b.request(p.Status(
            repo=REPO, target="warm"))[0]),
    ]
    for name, call in rows:
        call(-1)
        print(summary(name, [call(n) for n in range(runs)]), flush=True)


def _client(sock_path: str, env: dict[str, str], n: int, seconds: float, counter: Any) -> None:
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.connect(sock_path)
    enc, dec = p.encoder(), p.client_decoder()
    sock.sendall(p.frame(enc.encode(p.Hello(protocol=p.PROTOCOL_VERSION, client="bench"))))
    dec.decode(p.recv_frame(sock))
    request = p.Heartbeat(agent_id=f"bench-hb-{n}", caller=client.caller(env))
    body = p.frame(enc.encode(request))
    done = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        sock.sendall(body)
        reply = dec.decode(p.recv_frame(sock))
        if reply.exit_code != 0:
            raise SystemExit(reply.error)
        done += 1
    sock.close()
    with counter.get_lock():
        counter.value += done


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def heartbeat_throughput(b: Bench, cluster: EtcdCluster, clients: int, seconds: float) -> str:
    ctx = multiprocessing.get_context("fork")
    counter = ctx.Value("i", 0)
    procs = [ctx.Process(target=_client, args=(str(b.sock), b.env, n, seconds, counter))
             for n in range(clients)]
    etcd_pids = [m.process.pid for m in cluster.members if m.process is not None]
    daemon_cpu, etcd_cpu = cpu_seconds(b.daemon.pid), sum(map(cpu_seconds, etcd_pids))
    start = time.perf_counter()
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    elapsed = time.perf_counter() - start
    done = max(counter.value, 1)
    daemon_ms = (cpu_seconds(b.daemon.pid) - daemon_cpu) * 1000 / done
    etcd_ms = (sum(map(cpu_seconds, etcd_pids)) - etcd_cpu) * 1000 / done
    return (f"{counter.value / elapsed:,.0f} requests/s (CPU per heartbeat: daemon {daemon_ms:.1f} ms, "
            f"etcd {etcd_ms:.1f} ms over {len(etcd_pids)} member(s))")


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def lanes_summary(b: Bench) -> dict[str, Any]:
    _, response = b.request(p.Lanes())
    return response.payload["summary"]


def renewals(b: Bench, lanes: int, renew_every: float, seconds: float, tag: str) -> None:
    ttl = max(int(renew_every * 3) + 1, 2)
    ka = p.KeepAlive(renew_every=renew_every, heartbeat_ttl=ttl)
    names = [f"lane-{tag}-{n}" for n in range(lanes)]
    start = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:  # agents register concurrently, as they would
        list(pool.map(lambda name: b.request(p.Claim(agent_id=name, repo=REPO, target=name,
                                                     keep_alive=ka)), names))
    registered = time.perf_counter() - start
    time.sleep(renew_every * 2)  # let the schedule spread out
    before = lanes_summary(b)
    t0 = time.perf_counter()
    time.sleep(seconds)
    after = lanes_summary(b)
    elapsed = time.perf_counter() - t0
    rate = (after["renewals"] - before["renewals"]) / elapsed
    failures = after["renewal_failures"] - before["renewal_failures"]
    lag = after.get("lag_p99")
    print(f"  keep-alive: {lanes} lanes every {renew_every:g}s (ttl {ttl}s, demand "
          f"{lanes / renew_every:,.0f}/s): {rate:,.0f} renewals/s, {failures} failures, "
          f"live {after['live']}/{lanes}, lag p50 {_s(after.get('lag_p50'))} p99 {_s(lag)} "
          f"max {_s(after.get('lag_max'))} (registering took {registered:.1f}s)", flush=True)
    with ThreadPoolExecutor(8) as pool:  # end the lanes so the daemon stops renewing them
        list(pool.map(lambda name: b.request(p.LanesStop(agent_id=name)), names))


def listing_cost(endpoints: list[str], count: int, repeats: int) -> dict[str, float]:
    """Median ms of listing `count` claims: first, kept (revalidated), not kept."""
    import anyio

    from agentcoordd.store.base import list_all
    from agentcoordd.store.etcd import EtcdStore

    async def timed(store: EtcdStore, n: int) -> float:
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            assert len((await list_all(store, "claims")).entries) == count
            samples.append((time.perf_counter() - start) * 1000)
        return statistics.median(samples)

    async def run() -> dict[str, float]:
        kept = EtcdStore(endpoints, key_prefix="listbench/", timeout=60)
        plain = EtcdStore(endpoints, key_prefix="listbench/", timeout=60, listing_memo_bytes=0)
        try:
            async with anyio.create_task_group() as tg:
                limiter = anyio.CapacityLimiter(16)

                async def create(n: int) -> None:
                    async with limiter:
                        await kept.create(f"claims/acme/widgets/t{n:05d}.json",
                                          {"status": "claimed", "repo": "acme/widgets", "target": f"t{n}",
                                           "agent_id": f"a{n % 200}", "note": "x" * 200})

                for n in range(count):
                    tg.start_soon(create, n)
            return {"first": await timed(kept, 1), "kept": await timed(kept, repeats),
                    "not kept": await timed(plain, repeats)}
        finally:
            await kept.aclose()
            await plain.aclose()

    return anyio.run(run)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", default="1,3")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--lanes", default="100,300", help="comma-separated lane counts")
    parser.add_argument("--renew-every", type=float, default=1.0)
    parser.add_argument("--data-dir", default="/tmp", help="parent of the etcd data dirs")
    parser.add_argument("--listing", type=int, default=10_000, help="claims listed unchanged (0: skip)")
    parser.add_argument("--only-listing", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up clusters on kill
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpu(s), load {os.getloadavg()[0]:.1f}, "
          f"etcd data under {args.data_dir}")
    for members in (int(m) for m in args.members.split(",")):
        base = Path(tempfile.mkdtemp(prefix="acetcd.", dir="/tmp"))
        data = Path(tempfile.mkdtemp(prefix="acetcd-data.", dir=args.data_dir))
        cluster = EtcdCluster(data, members).start()
        b = None
        try:
            print(f"{members} member(s):", flush=True)
            if args.listing:
                ms = listing_cost(cluster.endpoints, args.listing, 5)
                for which, value in ms.items():
                    print(f"  listing {args.listing:,} claims, {which}: {value:,.0f} ms", flush=True)
                print(f"  listing kept / not kept: {ms['kept'] / ms['not kept']:.2f}", flush=True)
            if args.only_listing:
                continue
            b = Bench(base, cluster.endpoints)
            latencies(b, args.runs)
            rate = heartbeat_throughput(b, cluster, args.clients, args.seconds)
            print(f"  {args.clients} raw-socket clients, heartbeats through the daemon: {rate}",
                  flush=True)
            for lanes in (int(n) for n in args.lanes.split(",")):
                renewals(b, lanes, args.renew_every, args.seconds, tag=str(lanes))
        finally:
            if b is not None:
                b.stop()
            cluster.stop()
            shutil.rmtree(base, ignore_errors=True)
            shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
