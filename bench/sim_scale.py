"""Full-size fleet figures: 200 agents x 1,000 lanes on the local store and the HTTP backend.

    .venv/bin/python bench/sim_scale.py [--agents 200] [--lanes 1000] [--backend local,http]
                                        [--transport wire] [--agents-per-process 20] [--out DIR]

Reports wall time, ctl calls/s, p50/p99 ctl latency and invariant violations
(must be 0) per backend, from `sim verify`.

200 agents on 2 cores: the scripted agents are multiplexed — `--agents-per-process`
agents run as threads of one worker process (crashing agents always alone,
since they SIGKILL their process) — and by default each ctl call goes through
the wire transport: the same request Structs agentcoordctl builds, sent over
the daemon's socket from the worker (sim/calls.py). `--transport ctl` runs the
real binary per call instead (~0.1 s CPU of interpreter start-up each, which
then dominates what is measured). Heartbeat TTL is 6 s (renewal every 2 s) so
200 keep-alive lanes do not saturate two daemons; chaos: crash, handoff,
takeover, stop (outage is left to the CI runs).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.plan import Params  # noqa: E402
from sim.run import run  # noqa: E402
from sim.verify import verify  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=200)
    ap.add_argument("--lanes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--backend", default="local,http")
    ap.add_argument("--transport", default="wire", choices=("wire", "ctl"))
    ap.add_argument("--agents-per-process", type=int, default=20)
    ap.add_argument("--hb-ttl", type=int, default=6)
    ap.add_argument("--idle-timeout", type=float, default=20.0)
    ap.add_argument("--chaos", default="crash,handoff,takeover,stop")
    ap.add_argument("--duration", type=float, default=1500.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--pool-lanes", type=float, default=0.0, metavar="FRACTION",
                    help="share of lanes taken with claim --next (sim --pool-lanes)")
    args = ap.parse_args()
    base = args.out or Path(tempfile.mkdtemp(prefix="sim-scale."))
    rows = []
    for backend in args.backend.split(","):
        params = Params(agents=args.agents, lanes=args.lanes, seed=args.seed,
                        chaos=tuple(c for c in args.chaos.split(",") if c),
                        hb_ttl=args.hb_ttl, idle_timeout=args.idle_timeout,
                        pool_frac=args.pool_lanes)
        out = base / backend
        t0 = time.monotonic()
        info = run(params, out, backend=backend, transport=args.transport,
                   per_process=args.agents_per_process, duration=args.duration)
        result = verify(out, info["batch_id"])
        s = result["summary"]
        rows.append({"backend": backend, "agents": args.agents, "lanes": args.lanes,
                     "transport": args.transport, "wall_s": s["wall_seconds"],
                     "total_s": round(time.monotonic() - t0, 1), "ctl_calls": s["ctl_calls"],
                     "calls_per_s": s["ctl_calls_per_s"], "p50_ms": s["p50_ctl_latency_ms"],
                     "p99_ms": s["p99_ctl_latency_ms"], "takeovers": s["takeovers"],
                     "handoffs": s["handoffs"], "crashes": s["crashes"], "events": s["events"],
                     "violations": s["violations"], "timed_out": info["timed_out"]})
        print(json.dumps(rows[-1]), flush=True)
        for v in result["violations"][:20]:
            print(f"  VIOLATION: {v}", flush=True)
    print(f"\nrun directories under {base}")
    cols = list(rows[0])
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r[c]) for c in cols))
    return 0 if all(r["violations"] == 0 and not r["timed_out"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
