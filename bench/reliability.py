"""The reliability suite at full size (tests/reliability runs it reduced in CI).

    .venv/bin/python bench/reliability.py [--procs 32] [--rounds 200] [--http-procs 8]
                                          [--http-rounds 50] [--kills 50] [--outage 30]
                                          [--skip-http] [--json]

Prints one table of figures:
  * contention: N processes × R rounds claiming the same targets through one
    daemon on the local store, and across two daemons on the HTTP backend (our
    Worker under `wrangler dev`): double grants and lost acknowledged writes;
  * crash: SIGKILL the daemon K times at random moments under a write-heavy
    workload: unparsable records, lost acknowledged writes, leftover temp
    files, blocked progress, outbox drained, keep-alive lane renewing;
  * outage: the Worker stopped for S seconds: exit codes and the slowest
    command during it, queued events, how long the outbox took to drain,
    duplicates;
  * storage faults and hostile input: the pytest files, passed/failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

REPO_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_DIR / "tests"))

from integration.helpers import make_daemon  # noqa: E402
from reliability import scenarios  # noqa: E402


def _dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="acbr.", dir="/tmp"))


def contention_local(procs: int, rounds: int) -> dict[str, Any]:
    base = _dir()
    d = make_daemon(base)
    d.start()
    try:
        return scenarios.contention([(d, {}, str(d.root))], procs=procs, rounds=rounds, targets=4,
                                    batch="bench-b1", exists=lambda path: (d.root / path).is_file())
    finally:
        d.stop()
        shutil.rmtree(base, ignore_errors=True)


def contention_http(worker: Any, procs: int, rounds: int) -> dict[str, Any]:
    env = {"AGENT_COORD_API_URL": worker.url, "AGENT_COORD_API_TOKEN": worker.tokens["ref-all"]}
    base = _dir()
    daemons = []
    try:
        for name in ("a", "b"):
            (base / name).mkdir()
            d = make_daemon(base / name)
            d.start()
            daemons.append(d)
        return scenarios.contention([(d, env, None) for d in daemons], procs=procs, rounds=rounds,
                                    targets=4, batch=f"bench-{uuid.uuid4().hex[:8]}",
                                    exists=lambda path: scenarios.http_get(worker, path) is not None)
    finally:
        for d in daemons:
            d.stop()
        shutil.rmtree(base, ignore_errors=True)


def crash(kills: int) -> dict[str, Any]:
    base = _dir()
    try:
        return scenarios.crash(base, kills=kills)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def outage(worker: Any, seconds: float) -> dict[str, Any]:
    base = _dir()
    d = make_daemon(base)
    d.start()
    try:
        return scenarios.outage(d, worker, seconds=seconds, timeout=2.0,
                                drain_within=max(120.0, 4 * seconds))
    finally:
        d.stop()
        shutil.rmtree(base, ignore_errors=True)


def pytest_files(*names: str) -> dict[str, Any]:
    files = [str(REPO_DIR / "tests" / "reliability" / n) for n in names]
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *files],
                            cwd=REPO_DIR, capture_output=True, text=True)
    last = (result.stdout.strip().splitlines() or ["?"])[-1]
    return {"result": last, "exit_code": result.returncode}


def rows(figures: dict[str, Any]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []

    def add(part: str, what: str, value: Any) -> None:
        out.append((part, what, str(value)))

    for key, label in (("contention_local", "contention, local store, 1 daemon"),
                       ("contention_http", "contention, HTTP backend, 2 daemons")):
        c = figures.get(key)
        if not c:
            continue
        add(label, "processes × rounds", f"{c['procs']} × {c['rounds']} ({c['seconds']} s)")
        add(label, "grants / refused (exit 3) / errors", f"{c['grants']} / {c['refused']} / {c['errors']}")
        add(label, "double grants", c["double_grants"])
        add(label, "acknowledged writes / lost", f"{c['acked_writes']} / {c['lost_writes']}")
    c = figures.get("crash")
    if c:
        label = "crash (SIGKILL under writes)"
        add(label, "kills", f"{c['kills']} ({c['seconds']} s)")
        add(label, "records / unparsable", f"{c['records']} / {c['unparsable']}")
        add(label, "acknowledged events+heartbeats+claims / lost",
            f"{c['acked_events']}+{c['acked_heartbeats']}+{c['acked_claims']} / {c['lost_writes']}")
        add(label, "leftover temp files (ignored, non-blocking)", c["leftover_temp_files"])
        add(label, "writes right after the last restart (exit codes)", c["progress_exit_codes"])
        add(label, "outbox entries queued across restarts / delivered",
            f"{c['outbox_injected']} / {c['outbox_delivered']} (drained: {c['outbox_drained']})")
        add(label, "keep-alive lane after restarts", f"{c['lane_state']}, renewing: {c['lane_renewing']}")
    c = figures.get("outage")
    if c:
        label = f"backend outage ({c['outage_seconds']:g} s)"
        add(label, "commands during / exit codes", f"{c['commands_during']} / {c['exit_codes']}")
        add(label, "slowest failing command (--timeout)", f"{c['max_command_seconds']} s ({c['timeout']:g} s)")
        add(label, "events queued / delivered / duplicates",
            f"{c['queued']} / {c['delivered']} / {c['duplicates']}")
        add(label, "outbox drained after the Worker returned", f"{c['drain_seconds']} s")
    for key, label in (("storage_faults", "storage faults"), ("hostile", "hostile input")):
        c = figures.get(key)
        if c:
            add(label, "pytest", c["result"])
    return out


def table(figures: dict[str, Any]) -> str:
    body = rows(figures)
    header = ("part", "figure", "value")
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(3)]
    line = lambda r: "| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(r)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *(line(r) for r in body)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--http-procs", type=int, default=8)
    ap.add_argument("--http-rounds", type=int, default=50)
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--outage", type=float, default=30.0)
    ap.add_argument("--skip-http", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    figures: dict[str, Any] = {}
    figures["contention_local"] = contention_local(args.procs, args.rounds)
    figures["crash"] = crash(args.kills)
    if not args.skip_http:
        from worker_fixture import launch_worker

        with contextlib.ExitStack() as stack:
            worker = stack.enter_context(launch_worker(_dir()))
            figures["contention_http"] = contention_http(worker, args.http_procs, args.http_rounds)
            figures["outage"] = outage(worker, args.outage)
    figures["storage_faults"] = pytest_files("test_storage_faults.py")
    figures["hostile"] = pytest_files("test_hostile.py")
    if args.json:
        print(json.dumps(figures, indent=2, default=str))
    print(table(figures))
    bad = [key for key, c in figures.items() if c.get("double_grants") or c.get("lost_writes")
           or c.get("unparsable") or c.get("duplicates") or c.get("exit_code")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
