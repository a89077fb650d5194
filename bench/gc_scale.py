"""gc at scale (issue 8): dry-run and execute over 100,000 events and 10,000 claims.

Builds the same root as bench/status_scale.py (10,000 claims + heartbeats,
100 batches, 100,000 events; half the lanes closed with lane_closed) and runs
gc eight days after it, so released claims, dead heartbeats and the events of
closed lanes are eligible. Each run is a fresh process doing what the daemon
does (the use case over `CachingStore(LocalStore(root))`): the first dry-run
is *cold* (empty parsed-record cache, OS page cache warm), the second dry-run
in the same process is *warm* (a live daemon). Execute runs on a copy of the
root (in --dir: its filesystem matters, fsyncs). Prints wall time and peak RSS.

    .venv/bin/python bench/gc_scale.py [--root DIR] [--dir DIR] [--only-execute]

The package is imported from the running venv, so bench/pairs.py can time an
older checkout with this script: --figure 'execute\s+([\d.]+)'.

Target (issue 8): warm dry-run <= 1.5 s. The existing Ruby tool's dry-run:
7.7 s / 316 MB on such a root. Lock files of deleted records stay.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import status_scale  # noqa: E402  (the shared root builder, beside this script)

GC_NOW = status_scale.NOW + dt.timedelta(days=8)


class FixedClock:
    def now(self) -> dt.datetime:
        return GC_NOW


def child(root: Path, mode: str) -> None:
    import anyio

    from agentcoordd.coord import gc
    from agentcoordd.coord.context import Ctx
    from agentcoordd.store.cache import CachingStore
    from agentcoordd.store.local import LocalStore

    store = CachingStore(LocalStore(root))
    ctx = Ctx(store, FixedClock())
    timings = []

    async def go() -> None:
        runs = ("dry-run", "dry-run") if mode == "dry-run" else ("execute",)
        for run in runs:
            start = time.perf_counter()
            plan = await gc.gc(ctx, execute=run == "execute")
            timings.append({"run": run, "seconds": time.perf_counter() - start, "actions": len(plan["actions"])})

    anyio.run(go)
    print(json.dumps({"timings": timings, "peak_mb": status_scale.peak_mb()}))


def run_child(root: Path, mode: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", mode, "--root", str(root)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, help="the root to build or reuse (kept)")
    parser.add_argument("--dir", help="where the working copy goes (default: the temp dir)")
    parser.add_argument("--only-execute", action="store_true", help="no dry-runs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.root, args.child)
        return
    work = Path(tempfile.mkdtemp(prefix="acgc.", dir=args.dir))
    root = args.root or work / "root"
    if not (root / status_scale.MARKER).exists():
        start = time.perf_counter()
        status_scale.build(root)
        print(f"built {root} in {time.perf_counter() - start:.1f} s")
    runs = []
    if not args.only_execute:
        dry = run_child(root, "dry-run")
        runs += [("dry-run cold", dry, 0), ("dry-run warm", dry, 1)]
    copy = work / "exec"
    shutil.copytree(root, copy)
    runs.append(("execute", run_child(copy, "execute"), 0))
    if not args.only_execute:
        runs.append(("dry-run after execute", run_child(copy, "dry-run"), 0))
    print(f"{'run':<22}{'seconds':>9}{'actions':>9}{'peak MB':>9}")
    for label, result, index in runs:
        t = result["timings"][index]
        print(f"{label:<22}{t['seconds']:>9.2f}{t['actions']:>9}{result['peak_mb']:>9.0f}")
    locks = sum(1 for _ in copy.rglob("*.json.lock"))
    print(f"lock files kept after execute: {locks}")
    print("reference: Ruby agent-coord dry-run 7.7 s / 316 MB; target warm dry-run <= 1.5 s")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
