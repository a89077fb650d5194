"""Status / batch-audit at scale, in-process (issue 3).

Builds a local state root with 10,000 claims + 10,000 heartbeats, 100 batches
of 100 lanes and 100,000 events (1,000 per batch), written directly in the
stores' own JSON format, plus a second root holding only one of those batches
(its manifest, events, lane claims and heartbeats). Then, for each command,
runs it in a fresh Python process the way the daemon would (the use case over
`CachingStore(LocalStore(root))`, payload encoded with msgpack): the first
call is *cold* (empty parsed-record cache; the OS page cache is warm because
the root was just built or read), the second is *warm* (the daemon is
long-lived). Prints wall time and peak RSS of the process for each.

    .venv/bin/python bench/status_scale.py                 # build in a temp dir, run all
    .venv/bin/python bench/status_scale.py --root /tmp/r   # reuse / keep a root
    .venv/bin/python bench/status_scale.py --no-cache      # plain LocalStore, for comparison

Targets (issue 3): full status warm <= 0.9 s and <= 150 MB RSS; batch-scoped
status on the big root within 2x of the same batch on its own root. The
existing Ruby tool: 8.6 s / 459 MB full, 0.2 s batch-scoped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


N_CLAIMS = 10_000
N_BATCHES = 100
LANES_PER_BATCH = 100
EVENTS_PER_LANE = 10
NOW = dt.datetime(2026, 6, 13, 12, 0, tzinfo=dt.timezone.utc)
MARKER = ".bench-complete"
PROBE_BATCH = "batch-042"


def ts(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def build(root: Path, only_batch: str | None = None) -> None:
    from agentcoordd.model.ids import lane_closed_event_id
    from agentcoordd.store.local import encode_record

    def write(rel: str, data: object) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_record(data))

    for b in range(N_BATCHES):
        batch_id = f"batch-{b:03d}"
        if only_batch is not None and batch_id != only_batch:
            continue
        repo = f"acme/repo-{b % 10}"
        lanes = []
        for k in range(LANES_PER_BATCH):
            i = b * LANES_PER_BATCH + k
            agent, target = f"agent-{i:05d}", str(1000 + i)
            lane = {"name": f"lane-{k:03d}", "owner": agent, "targets": [target], "thread_handle": f"t-{i}",
                    "host": "codex"}
            if k:
                lane["depends_on"] = [f"{batch_id}:lane-{k - 1:03d}"]
            if k == 0 and b:
                lane["depends_on"] = f"batch-{b - 1:03d}:lane-099"
            lanes.append(lane)
            started = NOW - dt.timedelta(hours=6) + dt.timedelta(seconds=k)
            claim = {
                "schema_version": 1, "repo": repo, "target": target, "agent_id": agent, "batch_id": batch_id,
                "branch": f"feat/{target}", "machine_id": "m5", "status": "released" if k % 3 else "active",
                "claimed_at": ts(started), "updated_at": ts(started), "expires_at": ts(started + dt.timedelta(hours=4)),
            }
            write(f"claims/{repo}/{target}.json", claim)
            beat_at = NOW - dt.timedelta(minutes=k % 90)
            heartbeat = {
                "schema_version": 1, "agent_id": agent, "repo": repo, "target": target, "batch_id": batch_id,
                "branch": f"feat/{target}", "phase": "validating", "machine_id": "m5",
                "status": ("done", "in_progress", "blocked", "merged")[k % 4],
                "updated_at": ts(beat_at), "expires_at": ts(beat_at + dt.timedelta(minutes=15)),
            }
            write(f"heartbeats/{agent}.json", heartbeat)
            for e in range(EVENTS_PER_LANE):
                at = started + dt.timedelta(minutes=e)
                base = {"schema_version": 1, "batch_id": batch_id, "agent_id": agent, "repo": repo,
                        "target": target, "branch": f"feat/{target}", "at": ts(at)}
                if e == EVENTS_PER_LANE - 1 and k % 2:
                    eid = lane_closed_event_id(lane["name"])
                    record = {**base, "schema_version": 2, "event_id": eid, "type": "lane_closed",
                              "lane": lane["name"], "terminal": "done", "workspace": "default",
                              "closed_by": {"agent_id": agent, "machine": "m5"}}
                else:
                    eid = at.strftime("%Y%m%dT%H%M%S.") + f"{i:06d}Z-{e:08x}"
                    kind = {0: "claim.acquired", EVENTS_PER_LANE - 1: "claim.released"}.get(e, "phase.changed")
                    record = {**base, "event_id": eid, "type": kind}
                    if kind == "phase.changed":
                        record.update(previous_phase=f"p{e - 1}", phase=f"p{e}")
                    if kind == "claim.released":
                        record["status"] = "released"
                write(f"events/{batch_id}/{eid}.json", record)
        write(f"batches/{batch_id}.json", {
            "schema_version": 1, "batch_id": batch_id, "repo": repo, "objective": f"bench {b}",
            "lanes": lanes, "registered_at": ts(NOW - dt.timedelta(hours=7)), "updated_at": ts(NOW),
        })
    (root / MARKER).write_text("ok\n")


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


def child(root: Path, op: str, use_cache: bool) -> None:
    """One fresh 'daemon' process: cold call, then warm calls."""
    import anyio
    import msgspec

    from agentcoordd.coord.audit import batch_audit
    from agentcoordd.coord.context import Ctx
    from agentcoordd.coord.status import status
    from agentcoordd.store.cache import CachingStore
    from agentcoordd.store.local import LocalStore

    class Clock:
        def now(self) -> dt.datetime:
            return NOW

    store = CachingStore(LocalStore(root)) if use_cache else LocalStore(root)
    ctx = Ctx(store, Clock())
    calls = {
        "full": lambda: status(ctx),
        "batch": lambda: status(ctx, batch_id=PROBE_BATCH),
        "target": lambda: status(ctx, repo="acme/repo-2", target=str(1000 + 42 * LANES_PER_BATCH + 7)),
        "audit": lambda: batch_audit(ctx, batch_id=PROBE_BATCH),
    }
    results = []
    base = rss_mb()

    async def main() -> None:
        for label in ("cold", "warm", "warm"):
            started = time.perf_counter()
            payload = await calls[op]()
            wire = msgspec.msgpack.encode(payload)
            elapsed = time.perf_counter() - started
            results.append({"call": label, "seconds": elapsed, "peak_mb": peak_mb(), "rss_mb": rss_mb(),
                            "exit_code": payload.get("exit_code"), "bytes": len(wire),
                            "events": len(payload.get("events", [])), "verdict": payload.get("verdict")})
            del payload, wire  # a daemon drops the answer once it is sent

    anyio.run(main)
    print(json.dumps({"op": op, "base_rss_mb": base, "results": results}))


def run_child(root: Path, op: str, use_cache: bool) -> dict:
    args = [sys.executable, __file__, "--child", op, "--root", str(root)]
    if not use_cache:
        args.append("--no-cache")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, help="state root to build (or reuse if already built)")
    parser.add_argument("--no-cache", action="store_true", help="plain LocalStore instead of CachingStore")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.root, args.child, not args.no_cache)
        return

    tmp = None
    if args.root is None:
        tmp = tempfile.TemporaryDirectory(prefix="ac-bench-")
        args.root = Path(tmp.name)
    big = args.root / "big"
    small = args.root / "single-batch"
    for root, only in ((big, None), (small, PROBE_BATCH)):
        if not (root / MARKER).exists():
            started = time.perf_counter()
            build(root, only)
            print(f"built {root} in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    # warm the OS page cache so "cold" means "cold parsed-record cache"
    for root in (big, small):
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                with open(os.path.join(dirpath, name), "rb") as fh:
                    fh.read()

    mode = "LocalStore (no cache)" if args.no_cache else "CachingStore(LocalStore)"
    print(f"# {mode}; {N_CLAIMS} claims, {N_CLAIMS} heartbeats, {N_BATCHES} batches x {LANES_PER_BATCH} lanes, "
          f"{N_BATCHES * LANES_PER_BATCH * EVENTS_PER_LANE} events")
    print(f"{'command':<34} {'cold s':>7} {'warm s':>7} {'peak MB':>8} {'rss MB':>7} {'exit':>4}")
    rows = [
        ("status (full)", big, "full"),
        (f"status --batch-id {PROBE_BATCH}", big, "batch"),
        (f"  same batch, single-batch root", small, "batch"),
        ("status --repo R --target T", big, "target"),
        (f"batch-audit --batch-id {PROBE_BATCH}", big, "audit"),
    ]
    timings = {}
    for label, root, op in rows:
        report = run_child(root, op, not args.no_cache)
        cold, warm = report["results"][0], min(report["results"][1:], key=lambda r: r["seconds"])
        timings[label] = warm["seconds"]
        code = cold["exit_code"]
        print(f"{label:<34} {cold['seconds']:>7.3f} {warm['seconds']:>7.3f} {warm['peak_mb']:>8.1f} "
              f"{warm['rss_mb']:>7.1f} {code:>4}")
    ratio = timings[f"status --batch-id {PROBE_BATCH}"] / timings["  same batch, single-batch root"]
    print(f"batch-scoped big/single ratio (warm): {ratio:.2f}x (target <= 2x)")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
