"""Checked histories under faults, on every backend (issue 43; sim/chaos.py, sim/history.py).

    .venv/bin/python bench/history_check.py [--backends local,http,etcd] [--ops 10000]
                                            [--agents 16] [--seed 1]

Runs `python -m sim history` once per backend and prints, per backend: operations
recorded, faults injected (by kind), unknown outcomes, grants, fenced writes accepted
and refused, and violations found (must be 0). The run directories (histories,
violations.txt) are kept and printed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="local,http,etcd")
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    failed = False
    print(f"{'backend':8} {'ops':>7} {'faults':>6} {'unknown':>7} {'grants':>6} {'accepted':>8} "
          f"{'refused':>7} {'violations':>10}  faults by kind / run directory", flush=True)
    for kind in args.backends.split(","):
        done = subprocess.run(
            [sys.executable, "-m", "sim", "history", "--backend", kind, "--ops", str(args.ops),
             "--agents", str(args.agents), "--seed", str(args.seed), "--json"],
            cwd=REPO, capture_output=True, text=True, check=False)
        try:
            r = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            print(f"{kind:8} failed to run:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
            failed = True
            continue
        failed = failed or r["violations"] != 0 or r["timed_out"]
        print(f"{kind:8} {r['operations']:>7} {r['faults_injected']:>6} {r['unknown']:>7} "
              f"{r['grants']:>6} {r['fenced_writes_accepted']:>8} {r['fenced_writes_refused']:>7} "
              f"{r['violations']:>10}  {r['faults']} {r['out']} ({r['wall_seconds']}s)", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
