"""agentcoord-mcp against a warm agentcoordd: what an agent host pays.

    .venv/bin/python bench/mcp_latency.py [--runs 50]

Prints the server's start-up (spawn to the first tools/list answer, once per
agent session) and median / p95 of one tool call (heartbeat, status in target
scope) over the SDK's stdio client, next to the same request as an
`agentcoordctl … --json` process (what an agent with a shell pays per call).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

HERE = Path(sys.executable).parent


def summary(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return f"{name:<48} median {statistics.median(samples):7.1f} ms   p95 {p95:7.1f} ms"


async def over_mcp(env: dict[str, str], runs: int) -> list[str]:
    lines = []
    params = StdioServerParameters(command=str(HERE / "agentcoord-mcp"), env=env)
    start = time.perf_counter()
    async with Client(params) as client:
        await client.list_tools()
        lines.append(f"{'agentcoord-mcp start-up (spawn to tools/list)':<48} "
                     f"{(time.perf_counter() - start) * 1000:7.1f} ms")
        for name, args in (("heartbeat", {"repo": "o/r", "target": "1"}),
                           ("status", {"repo": "o/r", "target": "1"})):
            samples = []
            for _ in range(runs):
                t0 = time.perf_counter()
                result = await client.call_tool(name, args)
                samples.append((time.perf_counter() - t0) * 1000)
                if result.is_error:
                    raise SystemExit(f"{name}: {result.structured_content}")
            lines.append(summary(f"mcp tool {name}", samples))
    return lines


def over_ctl(env: dict[str, str], runs: int) -> list[str]:
    lines = []
    for args in (["heartbeat", "--agent-id", "bench", "--repo", "o/r", "--target", "1", "--json"],
                 ["status", "--repo", "o/r", "--target", "1", "--json"]):
        samples = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([str(HERE / "agentcoordctl"), *args], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            samples.append((time.perf_counter() - t0) * 1000)
        lines.append(summary(f"agentcoordctl {args[0]} --json (a process)", samples))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="acmcp.", dir="/tmp"))
    root = base / "root"
    root.mkdir()
    sock = base / "d.sock"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "agentcoordd.daemon.main", "--foreground", "--socket", str(sock),
         "--state-dir", str(base / "state")],
        env={"PATH": os.defpath, "HOME": str(base)}, stderr=subprocess.DEVNULL)
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(base),
           "AGENT_COORD_SOCKET": str(sock), "AGENT_COORD_STATE_ROOT": str(root),
           "AGENT_COORD_NO_AUTOSTART": "1", "AGENT_COORD_AGENT_ID": "bench"}
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        for line in [*anyio.run(over_mcp, env, args.runs), *over_ctl(env, args.runs)]:
            print(line)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(15)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
