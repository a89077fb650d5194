"""`python -m sim`: a fleet of scripted agents driving real agentcoordctl/agentcoordd.

    python -m sim run --agents N --lanes M --seed S [--backend local|http|etcd]
                      [--duration T] [--chaos crash,handoff,takeover,stop,outage]
                      [--out DIR] [--transport ctl|wire] [--agents-per-process K]
    python -m sim run --replay DIR [--out DIR2]
    python -m sim verify --batch-id B [--out DIR]
    python -m sim history [--backend local|http|etcd] [--agents 16] [--ops 10000] [--faults all]

Why a top-level `sim/` package and not `agentcoordd/sim` + `agentcoordctl sim`:
the harness is a test and load generator, not something an agent or a machine
runs. It starts daemons, the Worker under `wrangler dev` and etcd through the
test suite's launchers (tests/worker_fixture.py, tests/store/etcd_cluster.py),
which must not become dependencies of the installed packages; and a `sim`
command in agentcoordctl would widen the thin client that every agent loads on
every call (STYLE.md: ctl start-up). It drives the product only from outside —
the real `agentcoordctl` binary, or the same wire Structs over the daemon's
socket — exactly like the existing tool's `sim/` directory. Run it from the
repository root (or with the root on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from sim.plan import CHAOS_KINDS, Params


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["history"]:  # the checked history under faults (sim/chaos.py)
        from sim import chaos

        return chaos.main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m sim")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a fleet and verify it")
    r.add_argument("--agents", type=int, default=20)
    r.add_argument("--lanes", type=int, default=40)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--backend", choices=("local", "http", "etcd"), default="local")
    r.add_argument("--duration", type=float, default=900.0, help="hard cap on the fleet's run time (s)")
    r.add_argument("--chaos", default="", help=f"comma list of {','.join(CHAOS_KINDS)} (or 'all')")
    r.add_argument("--out", type=Path)
    r.add_argument("--transport", choices=("ctl", "wire"), default="ctl")
    r.add_argument("--agents-per-process", type=int, default=1)
    r.add_argument("--machines", type=int, default=2)
    r.add_argument("--hb-ttl", type=int, default=2)
    r.add_argument("--idle-timeout", type=float, default=5.0)
    r.add_argument("--pool-lanes", type=float, default=0.0, metavar="FRACTION",
                   help="share of lanes that are pool lanes, taken with claim --next by whoever is free")
    r.add_argument("--replay", type=Path, help="re-run DIR's parameters and compare the scripted calls")
    v = sub.add_parser("verify", help="check a run directory's invariants")
    v.add_argument("--batch-id")
    v.add_argument("--out", type=Path, required=True)
    v.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from sim import verify as verify_mod

    if args.cmd == "verify":
        result = verify_mod.verify(args.out, args.batch_id)
        _print(result, args.json if hasattr(args, "json") else False)
        return 0 if not result["violations"] else 1

    from sim import replay as replay_mod
    from sim import run as run_mod

    if args.replay:
        prev = json.loads((args.replay / "run.json").read_text())
        params = Params.from_json(prev["params"])
        backend, transport, per = prev["backend"], prev["transport"], prev.get("per_process", 1)
        out = args.out or Path(str(args.replay).rstrip("/") + "-replay")
    else:
        chaos = CHAOS_KINDS if args.chaos == "all" else tuple(c for c in args.chaos.split(",") if c)
        params = Params(agents=args.agents, lanes=args.lanes, seed=args.seed, chaos=tuple(chaos),
                        machines=args.machines, hb_ttl=args.hb_ttl, idle_timeout=args.idle_timeout,
                        pool_frac=args.pool_lanes)
        backend, transport, per = args.backend, args.transport, args.agents_per_process
        out = args.out or Path(tempfile.mkdtemp(prefix=f"sim-{args.seed}-"))
    info = run_mod.run(params, out, backend=backend, transport=transport, per_process=per,
                       duration=args.duration)
    result = verify_mod.verify(out, info["batch_id"])
    print(f"run directory: {out}")
    _print(result, False)
    code = 0 if not result["violations"] else 1
    if args.replay:
        problems = replay_mod.compare(args.replay, out)
        print(f"replay: {'identical scripted calls and verdicts' if not problems else 'DIFFERS'}")
        for line in problems[:50]:
            print(f"  {line}")
        code = code or (1 if problems else 0)
    return code


def _print(result: dict, as_json: bool) -> None:
    from sim.verify import table

    if as_json:
        print(json.dumps(result, indent=1))
        return
    print(table(result["summary"]))
    for line in result["violations"][:100]:
        print(f"VIOLATION: {line}")
    if len(result["violations"]) > 100:
        print(f"... and {len(result['violations']) - 100} more")


if __name__ == "__main__":
    sys.exit(main())
