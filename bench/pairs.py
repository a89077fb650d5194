"""Before/after ratio of one bench figure, run alternately in two checkouts.

    .venv/bin/python bench/pairs.py --baseline ../old-checkout --pairs 6 \\
        --figure '([\\d,.]+) requests/s' -- bench/ctl_latency.py --only-throughput --seconds 4

Runs the bench script (this checkout's copy) with the baseline checkout's
Python and working directory, then with this checkout's, `--pairs` times in
turn, reads the figure (the first group of `--figure`) from each output and
prints every pair's ratio and their median. Pair by pair, a machine whose
speed drifts (shared, noisy) still gives a fair ratio. The baseline checkout
needs its own `.venv` with its package installed (editable).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def figure(checkout: Path, script: list[str], pattern: re.Pattern[str]) -> float:
    command = [str(checkout / ".venv/bin/python"), str(HERE / script[0]), *script[1:]]
    out = subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=True).stdout
    found = pattern.search(out)
    if found is None:
        raise SystemExit(f"figure {pattern.pattern!r} not in the output of {checkout}:\n{out}")
    return float(found.group(1).replace(",", ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the older checkout")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--figure", required=True, help="regex; its first group is the number")
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- bench/SCRIPT.py ARGS")
    args = parser.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not script:
        parser.error("name the bench script after --")
    pattern = re.compile(args.figure)
    before, after, ratios = [], [], []
    for n in range(args.pairs):
        old = figure(args.baseline.resolve(), script, pattern)
        new = figure(HERE, script, pattern)
        before.append(old)
        after.append(new)
        ratios.append(new / old)
        print(f"pair {n + 1}: before {old:,.1f}  after {new:,.1f}  after/before {new / old:.2f}",
              flush=True)
    print(f"median before {statistics.median(before):,.1f}  after {statistics.median(after):,.1f}  "
          f"after/before {statistics.median(ratios):.2f} (pairs {min(ratios):.2f}..{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
