"""The HTTP backend end to end: ctl -> agentcoordd -> Worker (wrangler dev + local D1).

    .venv/bin/python bench/http_backend.py [--runs 100] [--lanes 1000] [--renew-every 1.0]
                                           [--window 10] [--clients 8]
                                           [--api-url URL --token TOKEN]

Without --api-url it starts our Worker under `wrangler dev --local` on a free
loopback port (tests/worker_fixture.py; needs `bash worker/ci-install.sh`) with
one --all-state token. Prints

  * median / p99 wall time of one `agentcoordctl` process (interpreter start-up
    included) for `claim` (a fresh target each time: GET + create),
    `heartbeat` (GET + CAS replace) and scoped `status --repo R --target T --json`;
  * heartbeat requests/s through the daemon from N concurrent raw-socket
    clients (no interpreter start-up: the daemon + Worker ceiling);
  * the Worker's own floor for comparison: in-process HttpStore GET + CAS
    replace pairs (what one heartbeat or renewal costs), sequential and with
    16 concurrent tasks;
  * keep-alive: LANES heartbeat lanes registered with `--keep-alive` (as many
    as register within --register-within seconds)
    (renew every RENEW_EVERY s, so the demand is LANES / RENEW_EVERY per
    second), then renewals/s actually landed on the Worker over WINDOW s (sum
    of the heartbeats' version increments) and the daemon's own lag report;
  * a stop check (`telemetry.stop_state`, what the daemon runs after a
    heartbeat of a lane) of a batch with --stop-events events (6,000, the full
    simulation's size): Worker requests and ms for the first check and for a
    repeated one, from an in-process HttpStore (one per run, as a daemon keeps);
  * a whole listing of --listing claims (10,000), unchanged: ms and bytes
    received for the first, for repeats revalidated with If-None-Match (304
    per unchanged page) and for repeats from a store that keeps nothing, and
    their ratio.

Where the Worker advertises `batch` / `events` on /v1/health (ours since
issue 23) the client uses them; `--skip-keepalive` / `--only-stop-check`
shorten a run, and so does `--only-listing` (after the stop check;
`--stop-events 0` skips that).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from agentcoordd import protocol as p

REPO = Path(__file__).resolve().parents[1]
HERE = Path(sys.executable).parent
CTL = [str(HERE / "agentcoordctl")] if (HERE / "agentcoordctl").exists() else [
    sys.executable, "-m", "agentcoordctl.cli"]


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered))) - 1))]


def summary(name: str, samples: list[float]) -> str:
    return (f"{name:<50} median {statistics.median(samples):7.1f} ms   "
            f"p99 {pct(samples, 0.99):7.1f} ms   (n={len(samples)})")


def timed(cmds: list[list[str]], env: dict[str, str]) -> list[float]:
    out = []
    for cmd in cmds:
        start = time.perf_counter()
        result = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        out.append((time.perf_counter() - start) * 1000)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr.decode()}")
    return out


@contextlib.contextmanager
def worker(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if args.api_url:
        yield args.api_url, args.token
        return
    sys.path.insert(0, str(REPO / "tests"))
    from worker_fixture import launch_worker

    base = Path(tempfile.mkdtemp(prefix="acbench-worker."))
    try:
        with launch_worker(base, {"bench": None}) as server:
            yield server.url, server.tokens["bench"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


class Conn:
    """One raw client connection to the daemon (what ctl sends, without start-up)."""

    def __init__(self, sock_path: str, env: dict[str, str]) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(120)
        self.sock.connect(sock_path)
        self.enc, self.dec = p.encoder(), p.client_decoder()
        self.caller = p.Caller(env=env, cwd="/", pid=os.getpid())
        self.sock.sendall(p.frame(self.enc.encode(p.Hello(protocol=p.PROTOCOL_VERSION, client="bench"))))
        self.dec.decode(p.recv_frame(self.sock))

    def call(self, request: Any) -> Any:
        request.caller = self.caller
        request.timeout = 60.0
        self.sock.sendall(p.frame(self.enc.encode(request)))
        while True:
            reply = self.dec.decode(p.recv_frame(self.sock))
            if isinstance(reply, p.Response):
                if reply.exit_code != 0:
                    raise SystemExit(f"{type(request).__name__} failed: {reply.error}")
                return reply

    def close(self) -> None:
        self.sock.close()


def fan_out(clients: int, jobs: list[Any], sock_path: str, env: dict[str, str],
            within: float | None = None) -> tuple[int, float]:
    """Run `jobs` (requests) over `clients` connections, starting none after `within`
    seconds; returns (requests done, requests/s)."""
    chunks = [jobs[i::clients] for i in range(clients)]
    deadline = time.perf_counter() + within if within else None
    done = [0] * clients

    def run(n: int, chunk: list[Any]) -> None:
        conn = Conn(sock_path, env)
        try:
            for request in chunk:
                if deadline is not None and time.perf_counter() > deadline:
                    return
                conn.call(request)
                done[n] += 1
        finally:
            conn.close()

    threads = [threading.Thread(target=run, args=(n, chunk)) for n, chunk in enumerate(chunks)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done), sum(done) / (time.perf_counter() - start)


def heartbeat_rate(sock_path: str, env: dict[str, str], clients: int, seconds: float) -> float:
    counts = [0] * clients
    deadline = time.perf_counter() + seconds

    def run(n: int) -> None:
        conn = Conn(sock_path, env)
        try:
            while time.perf_counter() < deadline:
                conn.call(p.Heartbeat(agent_id=f"rate-{n}"))
                counts[n] += 1
        finally:
            conn.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


def worker_floor(url: str, token: str, seconds: float) -> tuple[list[float], float]:
    """HttpStore GET + replace pairs: sequential latency, then pairs/s with 16 tasks."""
    import anyio

    from agentcoordd.store.http import HttpStore

    async def run() -> tuple[list[float], float]:
        async with HttpStore(url, token, timeout=30) as store:
            path = f"heartbeats/floor-{os.getpid()}.json"
            await store.create(path, {"n": 0})
            latencies = []
            for i in range(50):
                start = time.perf_counter()
                current = await store.get(path)
                assert current is not None
                await store.replace(path, {"n": i}, current.version)
                latencies.append((time.perf_counter() - start) * 1000)
            done = 0
            deadline = time.perf_counter() + seconds

            async def task(k: int) -> None:
                nonlocal done
                mine = f"heartbeats/floor-{os.getpid()}-{k}.json"
                await store.create(mine, {})
                while time.perf_counter() < deadline:
                    cur = await store.get(mine)
                    assert cur is not None
                    await store.replace(mine, {"n": done}, cur.version)
                    done += 1

            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for k in range(16):
                    tg.start_soon(task, k)
            return latencies, done / (time.perf_counter() - start)

    return anyio.run(run)


class CountingTransport(httpx.AsyncBaseTransport):
    """Counts the requests an HttpStore sends (what a check costs the Worker)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def seed_events(url: str, token: str, batch: str, count: int) -> float:
    """`count` events of `batch` written straight to the Worker; seconds taken."""
    import concurrent.futures

    start = time.perf_counter()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as c:
        caps = c.get("/v1/health").json().get("capabilities") or []

        def event(n: int) -> tuple[str, dict[str, Any]]:
            kind = "batch.stop_requested" if n == count // 2 else "lane.progress"
            return (f"events/{batch}/e{n:05d}.json",
                    {"batch_id": batch, "event_id": f"e{n:05d}", "type": kind, "lane": f"l{n % 1000}",
                     "at": f"2026-12-02T10:{n // 600 % 60:02d}:{n // 10 % 60:02d}.{n % 10}00000Z",
                     "agent_id": f"a{n % 200}", "message": "x" * 120})

        if "batch" in caps:
            for start_n in range(0, count, 64):
                ops = [{"op": "put", "path": path, "data": data, "if_none_match": "*"}
                       for path, data in map(event, range(start_n, min(count, start_n + 64)))]
                c.post("/v1/batch", json={"ops": ops}).raise_for_status()
        else:
            def put(n: int) -> None:
                path, data = event(n)
                c.put("/v1/state/" + quote(path, safe=""), json={"data": data},
                      headers={"If-None-Match": "*"}).raise_for_status()

            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                list(pool.map(put, range(count)))
    return time.perf_counter() - start


def stop_check_cost(url: str, token: str, batch: str, repeats: int) -> list[tuple[str, int, float]]:
    """(which, requests, ms) of a first stop check and of `repeats` repeated ones."""
    import anyio

    from agentcoordd.coord import telemetry
    from agentcoordd.coord.context import Ctx
    from agentcoordd.daemon.clock import SystemClock
    from agentcoordd.store.http import HttpStore

    async def run() -> list[tuple[str, int, float]]:
        transport = CountingTransport()
        async with HttpStore(url, token, timeout=60, transport=transport) as store:
            ctx = Ctx(store=store, clock=SystemClock())
            rows = []
            for which in ["first"] + ["repeated"] * repeats:
                before, start = transport.requests, time.perf_counter()
                state = await telemetry.stop_state(ctx, batch)
                rows.append((which, transport.requests - before, (time.perf_counter() - start) * 1000))
                assert state.get("stop_requested"), state
            return rows

    return anyio.run(run)


def versions(url: str, token: str, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    cursor = None
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        while True:
            params = {"prefix": "heartbeats", "limit": "1000"}
            if cursor:
                params["cursor"] = cursor
            page = c.get("/v1/state", params=params).json()
            for e in page["entries"]:
                if e["path"].startswith(prefix):
                    out[e["path"]] = e["version"]
            cursor = page.get("next_cursor")
            if not cursor:
                return out


def listing_cost(url: str, token: str, owner: str, count: int, repeats: int) -> list[tuple[str, float, int]]:
    """(which, ms, bytes received) of listing `count` claims: first, repeated with
    revalidation (If-None-Match -> 304 per unchanged page), repeated without it."""
    import anyio

    from agentcoordd.store import http
    from agentcoordd.store.base import Create, list_all

    class Received(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner, self.bytes = httpx.AsyncHTTPTransport(), 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            response = await self.inner.handle_async_request(request)
            await response.aread()
            self.bytes += len(response.content)
            return response

        async def aclose(self) -> None:
            await self.inner.aclose()

    async def timed_lists(store: http.HttpStore, transport: Received, which: str, n: int) -> list[tuple[str, float, int]]:
        rows = []
        for _ in range(n):
            before, start = transport.bytes, time.perf_counter()
            assert len((await list_all(store, f"claims/{owner}")).entries) == count
            rows.append((which, (time.perf_counter() - start) * 1000, transport.bytes - before))
        return rows

    async def run() -> list[tuple[str, float, int]]:
        transport = Received()
        async with http.HttpStore(url, token, timeout=120, transport=transport) as store:
            for start in range(0, count, 64):
                ops = [Create(f"claims/{owner}/widgets/t{n:05d}.json",
                              {"status": "claimed", "repo": f"{owner}/widgets", "target": f"t{n}",
                               "agent_id": f"a{n % 200}", "note": "x" * 200})
                       for n in range(start, min(count, start + 64))]
                for outcome in await store.run_batch(ops):
                    assert isinstance(outcome, str), outcome
            rows = await timed_lists(store, transport, "first", 1)
            rows += await timed_lists(store, transport, "revalidated", repeats)
        plain = Received()
        async with http.HttpStore(url, token, timeout=120, transport=plain, listing_memo_bytes=0) as store:
            rows += await timed_lists(store, plain, "not kept", repeats)
        return rows

    return anyio.run(run)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--lanes", type=int, default=1000)
    parser.add_argument("--renew-every", type=float, default=1.0)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--stop-events", type=int, default=6000)
    parser.add_argument("--register-within", type=float, default=180.0,
                        help="stop registering lanes after this long (a saturated daemon)")
    parser.add_argument("--skip-keepalive", action="store_true")
    parser.add_argument("--only-stop-check", action="store_true")
    parser.add_argument("--listing", type=int, default=10_000,
                        help="claims listed whole, unchanged, repeatedly (0: skip)")
    parser.add_argument("--only-listing", action="store_true")
    parser.add_argument("--api-url")
    parser.add_argument("--token", default=os.environ.get("AGENT_COORD_API_TOKEN", ""))
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="acbench.", dir="/tmp"))
    sock = base / "d.sock"
    with worker(args) as (url, token):
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(base),
               "XDG_STATE_HOME": str(base / "state"), "XDG_CONFIG_HOME": str(base / "config"),
               "AGENT_COORD_SOCKET": str(sock), "AGENT_COORD_NO_AUTOSTART": "1",
               "AGENT_COORD_API_URL": url, "AGENT_COORD_API_TOKEN": token}
        caller_env = {k: v for k, v in env.items() if k.startswith(("AGENT_COORD_", "XDG_")) or k == "HOME"}
        daemon_env = {k: env[k] for k in ("PATH", "HOME", "XDG_STATE_HOME")}
        daemon = subprocess.Popen([sys.executable, "-m", "agentcoordd.daemon.main", "--foreground",
                                   "--socket", str(sock), "--state-dir", str(base / "daemon"),
                                   "--log-level", "warning"], env=daemon_env,
                                  stdout=subprocess.DEVNULL, stderr=open(base / "daemon.log", "wb"))
        try:
            deadline = time.monotonic() + 15
            while not sock.exists():
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise SystemExit("daemon did not start: " + (base / "daemon.log").read_text())
                time.sleep(0.02)
            with httpx.Client(base_url=url) as c:
                caps = c.get("/v1/health").json().get("capabilities") or []
            print(f"Worker capabilities: {', '.join(caps) or 'none (single requests only)'}")
            if args.stop_events:
                batch = f"stopbench-{int(time.time())}"
                took = seed_events(url, token, batch, args.stop_events)
                print(f"seeded {args.stop_events:,} events of batch {batch} in {took:.1f}s")
                rows = stop_check_cost(url, token, batch, 5)
                for which, requests, ms in rows[:2]:
                    print(f"stop check, {which} (batch of {args.stop_events:,} events): "
                          f"{requests} Worker requests, {ms:,.0f} ms")
                reps = [ms for which, _, ms in rows if which == "repeated"]
                print(f"stop check, repeated x{len(reps)}: median {statistics.median(reps):,.1f} ms, "
                      f"{statistics.median([r for w, r, _ in rows if w == 'repeated']):.0f} requests each")
            if args.only_stop_check:
                return 0
            if args.listing:
                rows = listing_cost(url, token, f"listbench{int(time.time())}", args.listing, 5)
                medians = {}
                for which in ("first", "revalidated", "not kept"):
                    ms = statistics.median([m for w, m, _ in rows if w == which])
                    got = statistics.median([b for w, _, b in rows if w == which])
                    medians[which] = ms
                    print(f"listing {args.listing:,} claims, {which}: {ms:,.0f} ms, {got / 1e6:,.2f} MB received")
                print(f"listing revalidated / not kept: {medians['revalidated'] / medians['not kept']:.2f}")
            if args.only_listing:
                return 0
            repo = f"bench{int(time.time())}/widgets"
            heartbeat = [*CTL, "heartbeat", "--agent-id", "bench", "--repo", repo, "--target", "1"]
            status = [*CTL, "status", "--repo", repo, "--target", "1", "--json"]
            timed([[*CTL, "claim", "--agent-id", "bench", "--repo", repo, "--target", "1"]] + [heartbeat] * 3,
                  env)  # warm the daemon's pooled connection and the Worker
            print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpu(s), Worker {url}"
                  f"{' (wrangler dev --local, local D1)' if not args.api_url else ''}")
            print(summary("python -c pass", timed([[sys.executable, "-c", "pass"]] * args.runs, env)))
            claims = [[*CTL, "claim", "--agent-id", "bench", "--repo", repo, "--target", f"c{i}"]
                      for i in range(args.runs)]
            print(summary("agentcoordctl claim (fresh target)", timed(claims, env)))
            print(summary("agentcoordctl heartbeat (repo/target)", timed([heartbeat] * args.runs, env)))
            print(summary("agentcoordctl status --repo R --target T --json",
                          timed([status] * args.runs, env)))
            rate = heartbeat_rate(str(sock), caller_env, args.clients, args.seconds)
            print(f"{args.clients} raw-socket clients, heartbeats through daemon -> Worker: "
                  f"{rate:,.0f} requests/s")

            floor, floor_rate = worker_floor(url, token, args.seconds)
            print(summary("Worker floor: HttpStore GET + replace (in-process)", floor))
            print(f"Worker floor: 16 concurrent GET + replace pairs: {floor_rate:,.0f} pairs/s")

            if args.skip_keepalive:
                return 0
            # keep-alive lanes
            ttl = max(int(args.renew_every * 3) + 1, 3)
            ka = p.KeepAlive(renew_every=args.renew_every)
            jobs = [p.Heartbeat(agent_id=f"lane-{n:05d}", repo=repo, target=f"l{n}", ttl=ttl,
                                keep_alive=ka) for n in range(args.lanes)]
            registered, reg = fan_out(args.clients, jobs, str(sock), caller_env, args.register_within)
            print(f"registered {registered} of {args.lanes} keep-alive lanes within "
                  f"{args.register_within:g}s ({reg:,.1f} registrations/s); "
                  f"renew every {args.renew_every:g}s, ttl {ttl}s -> demand "
                  f"{registered / args.renew_every:,.0f} renewals/s")
            time.sleep(min(args.window, 3.0))  # let the schedule settle after registration
            before = versions(url, token, "heartbeats/lane-")
            t0 = time.perf_counter()
            time.sleep(args.window)
            after = versions(url, token, "heartbeats/lane-")
            took = time.perf_counter() - t0
            renewed = sum(after[k] - before.get(k, after[k]) for k in after)
            lagging = sum(1 for k in after if after[k] == before.get(k))
            print(f"keep-alive: {renewed / took:,.0f} renewals/s landed on the Worker over {took:.1f}s "
                  f"({renewed} renewals; {lagging} of {len(after)} lanes not renewed in the window)")
            conn = Conn(str(sock), caller_env)
            lanes = conn.call(p.Lanes()).payload or {}
            conn.close()
            rows = lanes.get("lanes") or []
            lags = [r.get("lag") or 0.0 for r in rows]
            states: dict[str, int] = {}
            for r in rows:
                states[r.get("state") or "?"] = states.get(r.get("state") or "?", 0) + 1
            if lags:
                print(f"daemon lanes: {len(rows)} {json.dumps(states)}; lag median "
                      f"{statistics.median(lags):.2f}s p99 {pct(lags, 0.99):.2f}s max {max(lags):.2f}s")
            summary_line = (lanes.get("summary") or {}).get("status")
            if summary_line:
                print(f"daemon summary: {summary_line}")
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
