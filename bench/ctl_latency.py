"""ctl latency and daemon throughput against a warm agentcoordd.

    .venv/bin/python bench/ctl_latency.py [--runs 40] [--seconds 3] [--clients 8]

Prints median / p95 wall time of
  * `python -c pass` (the interpreter floor),
  * `agentcoordctl heartbeat --agent-id … --repo R --target T`,
  * `agentcoordctl status --repo R --target T --json`,
requests/s of N concurrent raw-socket clients doing heartbeats on the local
store, and the top of `python -X importtime` for one ctl call.
Targets (issue 4): ctl median <= 90 ms, >= 1000 heartbeat requests/s; (issue 20) the
heartbeat median at most half of the 8.6x `python -c pass` measured before typer left
the common path.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentcoordd import protocol as p

BASELINE_RATIO = 8.6  # issue 20: 197 ms heartbeat vs 22 ms `python -c pass`, typer on every call
HERE = Path(sys.executable).parent
CTL_PY = [sys.executable]
CTL = [str(HERE / "agentcoordctl")] if (HERE / "agentcoordctl").exists() else [
    sys.executable, "-m", "agentcoordctl.cli"]


def timed(cmd: list[str], env: dict[str, str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        result = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        out.append((time.perf_counter() - start) * 1000)
        if result.returncode != 0:
            raise SystemExit(f"{cmd} failed: {result.stderr.decode()}")
    return out


def start_daemon(base: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """`agentcoordd --foreground` on `base/d.sock`, once its socket exists."""
    sock = base / "d.sock"
    daemon = subprocess.Popen([sys.executable, "-m", "agentcoordd.daemon.main", "--foreground",
                               "--socket", str(sock), "--state-dir", str(base / "daemon"),
                               "--log-level", "warning", *args], env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not sock.exists():
        if time.monotonic() > deadline or daemon.poll() is not None:
            daemon.kill()
            raise SystemExit("daemon did not start")
        time.sleep(0.01)
    return daemon


def summary(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return f"{name:<52} median {statistics.median(samples):7.1f} ms   p95 {p95:7.1f} ms"


def _client(sock_path: str, root: str, n: int, seconds: float, counter) -> None:  # type: ignore[no-untyped-def]
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(sock_path)
    enc, dec = p.encoder(), p.client_decoder()
    sock.sendall(p.frame(enc.encode(p.Hello(protocol=p.PROTOCOL_VERSION, client="bench"))))
    dec.decode(p.recv_frame(sock))
    request = p.Heartbeat(agent_id=f"bench-{n}", selection=p.Selection(state_root=root),
                          caller=p.Caller(env={"HOME": root}, cwd=root))
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


def throughput(sock_path: str, root: str, clients: int, seconds: float) -> float:
    ctx = multiprocessing.get_context("fork")
    counter = ctx.Value("i", 0)
    procs = [ctx.Process(target=_client, args=(sock_path, root, n, seconds, counter))
             for n in range(clients)]
    start = time.perf_counter()
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    return counter.value / (time.perf_counter() - start)


def importtime(env: dict[str, str], args: list[str], top: int = 16) -> str:
    """The slowest imports (cumulative) of one ctl call, from `python -X importtime`."""
    result = subprocess.run([*CTL_PY, "-X", "importtime", "-m", "agentcoordctl.cli", *args],
                            env=env, capture_output=True)
    rows = []
    for line in result.stderr.decode().splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative, name = line.removeprefix("import time:").split("|")
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        rows.append((int(cumulative), int(self_us), depth, name.strip()))
    total = sum(c for c, _s, d, _n in rows if d == 0)
    lines = [f"import time of one ctl call (-X importtime): {total / 1000:.1f} ms total"]
    for cumulative, _self, depth, name in sorted((r for r in rows if r[2] <= 1), reverse=True)[:top]:
        lines.append(f"  {cumulative / 1000:7.1f} ms  {'  ' * depth}{name}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--root-dir", default="/tmp",
                        help="where the state root lives (/dev/shm: no fsync cost)")
    parser.add_argument("--only-throughput", action="store_true")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="acbench.", dir="/tmp"))
    root = Path(tempfile.mkdtemp(prefix="acbench-root.", dir=args.root_dir))
    sock = base / "d.sock"
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(base),
           "XDG_STATE_HOME": str(base / "state"), "XDG_CONFIG_HOME": str(base / "config"),
           "AGENT_COORD_SOCKET": str(sock), "AGENT_COORD_STATE_ROOT": str(root),
           "AGENT_COORD_NO_AUTOSTART": "1"}
    daemon = start_daemon(base, env)
    try:
        if args.only_throughput:
            rate = throughput(str(sock), str(root), args.clients, args.seconds)
            print(f"{args.clients} raw-socket clients, heartbeats, root on {args.root_dir}: "
                  f"{rate:,.0f} requests/s")
            return 0
        heartbeat = [*CTL, "heartbeat", "--agent-id", "bench", "--repo", "acme/widgets",
                     "--target", "1"]
        status = [*CTL, "status", "--repo", "acme/widgets", "--target", "1", "--json"]
        claim = [*CTL, "claim", "--agent-id", "bench", "--repo", "acme/widgets", "--target", "1"]
        subprocess.run(claim, env=env, check=True, stdout=subprocess.DEVNULL)
        timed(heartbeat, env, 3)  # warm caches and the daemon
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpu(s), ctl = {' '.join(CTL)}")
        floor = timed([sys.executable, "-c", "pass"], env, args.runs)
        print(summary("python -c pass", floor))
        print(summary("python -S -c pass", timed([sys.executable, "-S", "-c", "pass"], env, args.runs)))
        beats = timed(heartbeat, env, args.runs)
        print(summary("agentcoordctl heartbeat …", beats))
        ratio = statistics.median(beats) / statistics.median(floor)
        print(f"heartbeat / python -c pass: {ratio:.1f}x (issue 20: baseline {BASELINE_RATIO}x, "
              f"target <= {BASELINE_RATIO / 2:.1f}x; measure on a non-editable install)")
        print(summary("agentcoordctl status --repo R --target T --json", timed(status, env, args.runs)))
        rate = throughput(str(sock), str(root), args.clients, args.seconds)
        print(f"{args.clients} raw-socket clients, heartbeats, root on {args.root_dir}: "
              f"{rate:,.0f} requests/s")
        print(importtime(env, heartbeat[len(CTL):]))
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(20)
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
