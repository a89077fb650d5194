"""Warm reads through the real daemon, against the floor of a stat walk (issue 24).

    .venv/bin/python bench/warm_reads.py [--root DIR] [--runs 5]

Builds (or reuses) the root of bench/status_scale.py — 10,000 claims, 10,000
heartbeats, 100 batches, 100,000 events — starts `agentcoordd` on it and
times, through `agentcoordctl`:
  * full `status --json`: the first call (cold parsed-record cache), then the
    median of `--runs` warm calls;
  * `gc --dry-run --json`, warm median;
  * the floor: a fresh Python process that walks the root's directories
    (`os.walk`: every directory listed, each entry's type from the listing,
    no file opened) — what a reader that knows nothing changed still pays;
  * the daemon's peak RSS (VmHWM) after the status calls, and after gc.
Prints the ratio of warm status to the floor (issue 24: <= 3x) and, with
`--before S`, to an earlier warm status median S (target <= 0.5).

To measure the code before a change, copy this script into a worktree of that
commit with its own venv and run it there, from that worktree (`-m` imports
the daemon from the working directory first):
    git worktree add /tmp/before <commit> && cd /tmp/before && python3 -m venv .venv
    .venv/bin/pip install -q -e . && cp <this checkout>/bench/warm_reads.py bench/
    .venv/bin/python bench/warm_reads.py --root DIR
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ctl_latency import CTL, start_daemon, timed  # noqa: E402
import status_scale  # noqa: E402

WALK = ("import os, sys\n"
        "n = 0\n"
        "for _d, dirs, files in os.walk(sys.argv[1]):\n"
        "    n += len(dirs) + len(files)\n")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, help="state root (built here when missing)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", type=float, help="warm status median (ms) of the code before")
    parser.add_argument("--before-gc", type=float, help="warm gc dry-run median (ms) of the code before")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="acwarm.", dir="/tmp"))
    root = args.root or base / "root"
    if not (root / status_scale.MARKER).exists():
        started = time.perf_counter()
        status_scale.build(root)
        print(f"built {root} in {time.perf_counter() - started:.1f} s")
    sock = base / "d.sock"
    env = {**os.environ, "HOME": str(base), "XDG_STATE_HOME": str(base / "state"),
           "XDG_CONFIG_HOME": str(base / "config"), "AGENT_COORD_SOCKET": str(sock),
           "AGENT_COORD_STATE_ROOT": str(root), "AGENT_COORD_NO_AUTOSTART": "1"}
    daemon = start_daemon(base, env)
    try:
        walk = timed([sys.executable, "-c", WALK, str(root)], env, args.runs)  # also warms the page cache
        status = [*CTL, "status", "--json"]
        gc = [*CTL, "gc", "--dry-run", "--json"]
        cold = timed(status, env, 1)[0]
        warm = statistics.median(timed(status, env, args.runs))
        status_peak = peak_rss_mb(daemon.pid)
        timed(gc, env, 1)
        warm_gc = statistics.median(timed(gc, env, args.runs))
        floor = statistics.median(walk)
        print(f"root: {root}")
        print(f"floor: fresh process walking the root's directories   {floor:8.1f} ms")
        print(f"status --json, cold daemon cache                     {cold:8.1f} ms")
        print(f"status --json, warm (median of {args.runs})                  {warm:8.1f} ms"
              f"   {warm / floor:.2f}x the floor (target <= 3x)")
        print(f"gc --dry-run --json, warm (median of {args.runs})            {warm_gc:8.1f} ms")
        if args.before:
            print(f"warm status / before: {warm / args.before:.2f} (target <= 0.5)")
        if args.before_gc:
            print(f"warm gc dry-run / before: {warm_gc / args.before_gc:.2f} (target <= 0.6)")
        print(f"daemon peak RSS (VmHWM) after status: {status_peak:.1f} MB (target <= 150), "
              f"after gc too: {peak_rss_mb(daemon.pid):.1f} MB")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
