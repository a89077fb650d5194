"""The reliability suite at full size (tests/reliability runs it reduced in CI).

    .venv/bin/python bench/reliability.py [--procs 32] [--rounds 200] [--http-procs 8]
                                          [--http-rounds 50] [--kills 50] [--outage 30]
                                          [--flood 300] [--idle 5000] [--lock-hold 60]
                                          [--frames 100000] [--cli 20000]
                                          [--full-events 200] [--streams 200]
                                          [--slowloris 300] [--scrapes 500]
                                          [--skip-http] [--only PART,…] [--json]

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
  * hardening (issue 17): a flood of partial 2 MB frames (RSS growth, served
    throughout), idle pre-hello connections past the limit, another process
    holding one record lock, a daemon restart with a caller-only token, two
    daemons on one state dir, the frame fuzzer and the CLI fuzzer at size;
  * issue 41: the daemon's state dir on a full filesystem (acknowledged events
    lost), poisoned records (every reader of another machine: exit codes,
    named, served), the dashboard port under 200 event streams + 300
    slowloris connections (/metrics latency during the attack) and tried by
    another user (every route refused, nothing written);
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
from reliability import (  # noqa: E402
    clifuzz,
    full_disk,
    hardening,
    loopback_attack,
    poisoned,
    scenarios,
)


# The poisoned-record part's machines: a reader of every family (archive too, for gc)
# and the finding's machine, which may write only claims/acme/widgets.
POISON_MACHINES = {
    "ops": None,  # seeds the state
    "reader": (["claims", "heartbeats", "batches", "events", "archive"],
               ["claims", "heartbeats", "batches", "events"]),
    "widgets-only": (["claims/acme/widgets"], ["claims/acme/widgets"]),
}


def _dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="acbr.", dir="/tmp"))


@contextlib.contextmanager
def _daemon(*flags: str) -> Any:
    base = _dir()
    d = make_daemon(base)
    d.start(*flags)
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(base, ignore_errors=True)


def contention_local(procs: int, rounds: int) -> dict[str, Any]:
    with _daemon() as d:
        return scenarios.contention([(d, {}, str(d.root))], procs=procs, rounds=rounds, targets=4,
                                    batch="bench-b1", exists=lambda path: (d.root / path).is_file())


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
    with _daemon() as d:
        return scenarios.outage(d, worker, seconds=seconds, timeout=2.0,
                                drain_within=max(120.0, 4 * seconds))


def flood(clients: int) -> dict[str, Any]:
    with _daemon() as d:
        return hardening.flood(d, clients=clients)


def idle(count: int) -> dict[str, Any]:
    with _daemon("--hello-timeout", "2") as d:
        return hardening.idle_connections(d, count=count, hello_timeout=2.0)


def lock_hold(seconds: float) -> dict[str, Any]:
    with _daemon() as d:
        return hardening.lock_holder(d, seconds=seconds, locked_calls=45,
                                     other_calls=max(60, int(seconds * 20)))


def caller_token(worker: Any) -> dict[str, Any]:
    with _daemon() as d:
        return hardening.caller_token_restart(d, worker, events=7)


def shared_state() -> dict[str, Any]:
    base = _dir()
    made: list[Any] = []

    def make(name: str) -> Any:
        (base / name).mkdir()
        d = make_daemon(base / name)
        made.append(d)
        return d

    try:
        return hardening.shared_state_dir(make, appends=200)
    finally:
        for d in made:
            d.stop()
        shutil.rmtree(base, ignore_errors=True)


def frame_fuzz(frames: int) -> dict[str, Any]:
    with _daemon() as d:
        return hardening.frame_fuzz(d, frames=frames)


def cli_fuzz(invocations: int) -> dict[str, Any]:
    import os
    import time

    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    with _daemon() as d:
        (d.base / "cwd").mkdir()
        (d.base / "no-programs").mkdir()
        env = d.env(PATH=str(d.base / "no-programs"), AGENT_COORD_TIMEOUT="10")
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_DIR), str(REPO_DIR / "tests")])
        worker = clifuzz.Worker(env, d.base / "cwd")
        catalog = clifuzz.commands()
        figures: dict[str, Any] = {"invocations": 0, "violations": 0, "samples": [],
                                   "exit_codes": {}}
        started = time.monotonic()

        @settings(max_examples=invocations, deadline=None, database=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def one(data: Any) -> None:
            args = data.draw(clifuzz.invocations(catalog, str(d.root)))
            result = worker.call(args)
            figures["invocations"] += 1
            code = str(result["code"])
            figures["exit_codes"][code] = figures["exit_codes"].get(code, 0) + 1
            problem = clifuzz.verdict(args, result)
            if problem:
                figures["violations"] += 1
                figures["samples"].append(([a[:60] for a in args], problem[:300]))

        try:
            one()
        finally:
            worker.close()
        allowed = [d.root, d.base / "home", d.base / "xdgstate", d.base / "xdgconfig",
                   d.state_dir, d.log_path, d.base / "run"]
        figures["files_outside_root"] = len(clifuzz.files_outside(d.base, allowed))
        figures["seconds"] = round(time.monotonic() - started, 1)
        figures["daemon_alive"] = d.proc is not None and d.proc.poll() is None
        return figures


def full_state_dir(events: int) -> dict[str, Any]:
    base = _dir()
    try:
        return full_disk.queued_events_on_a_full_state_dir(base, events=events)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _poisoned_reads(ctl: Any) -> dict[str, Any]:
    reads = poisoned.read_everything(ctl)
    return {"exits": {name: r["exit"] for name, r in reads.items()},
            "named": sum(r["named"] for r in reads.values()),
            "served": sum(r["served"] for r in reads.values()), "readers": len(reads),
            "internal_errors": sum(r["internal_error"] for r in reads.values()),
            "as_expected": all(r["exit"] == poisoned.EXPECTED_EXIT[name] for name, r in reads.items())}


def poisoned_record(worker: Any) -> dict[str, Any]:
    """Every reader of another machine over a Worker holding the poisoned records."""
    import datetime as dt

    import httpx

    poisoned.seed(worker, dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    env = {"AGENT_COORD_API_URL": worker.url, "AGENT_COORD_API_TOKEN": worker.tokens["reader"]}
    with _daemon() as d:
        def ctl(*args: str) -> Any:
            return d.ctl(*args, env=env, unset=("AGENT_COORD_STATE_ROOT",), timeout=120)

        figures = _poisoned_reads(ctl)
        url = json.loads(ctl("dashboard", "--json").stdout)["url"]
        board = poisoned.dashboard_reads(
            lambda route: httpx.get(url + route, headers=d.dashboard_headers(), timeout=60))
        figures["dashboard"] = {route: r["exit"] for route, r in board.items()}
        figures["dashboard_named"] = all(r["named"] and r["served"] for r in board.values())
        with worker.client("widgets-only") as client:  # the finding's write, refused now
            body = b'{"data":{"meta":' + b"[" * 1000 + b"]" * 1000 + b"}}"
            figures["finding_write"] = client.put(
                "/v1/state/claims%2Facme%2Fwidgets%2F667.json", content=body,
                headers={"If-None-Match": "*", "Content-Type": "application/json"}).status_code
        return figures


def slots(streams: int, slowloris: int, scrapes: int) -> dict[str, Any]:
    with _daemon() as d:
        return loopback_attack.slots_attack(d, streams=streams, slowloris=slowloris, scrapes=scrapes)


def other_user() -> dict[str, Any]:
    """Every route of the dashboard port tried by a second user holding the token."""
    import pwd
    import re

    import httpx

    from conftest import OTHER_USER

    user = pwd.getpwnam(OTHER_USER)
    prefix = [shutil.which("setpriv") or "setpriv", "--reuid", str(user.pw_uid), "--regid",
              str(user.pw_gid), "--clear-groups"]
    with _daemon() as d:
        assert d.ctl("claim", "--agent-id", "a1", "--repo", "acme/widgets", "--target", "1",
                     "--batch-id", "b1").returncode == 0
        shown = loopback_attack.dashboard(d)
        page = httpx.get(shown["url"], headers=d.dashboard_headers(), timeout=10).text
        csrf = re.search(r'name="agentcoord-csrf" content="([^"]+)"', page).group(1)  # type: ignore[union-attr]
        before = sorted(p.read_bytes() for p in d.root.rglob("*.json"))
        answers = loopback_attack.routes_as(prefix, shown["port"], d.dashboard_token(), csrf)
        after = sorted(p.read_bytes() for p in d.root.rglob("*.json"))
        return {"routes": len(answers), "refused_403": sum(a["status"] == 403 for a in answers),
                "records_written": int(before != after)}


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
    c = figures.get("flood")
    if c:
        label = f"flood ({c['clients']} × 2 MB partial frames)"
        add(label, "held / refused (one line: busy)", f"{c['held']} / {c['refused']} ({c['refusals_one_line']})")
        add(label, "daemon RSS before / peak / growth",
            f"{c['rss_before_mb']} / {c['rss_peak_mb']} / {c['rss_growth_mb']} MB")
        add(label, "good client served throughout", f"{c['served_throughout']} ({c['good_client_ms']} ms)")
    c = figures.get("idle")
    if c:
        label = f"idle pre-hello connections ({c['connections']})"
        add(label, "accepted / refused at once", f"{c['accepted']} / {c['refused']}")
        add(label, "served after the hello deadline", f"{c['served_after_deadline']} ({c['good_client_ms']} ms)")
    c = figures.get("lock_hold")
    if c:
        label = f"lock holder ({c['hold_seconds']:g} s on one record)"
        add(label, "calls on that record: exit codes / slowest (--timeout)",
            f"{c['locked_calls']}: {c['locked_exit_codes']} / {c['slowest_locked_call']} s ({c['timeout']:g} s)")
        add(label, "other records' calls: exit codes / slowest",
            f"{c['other_calls']}: {c['other_exit_codes']} / {c['slowest_other_call']} s")
    c = figures.get("caller_token")
    if c:
        label = "restart with a caller-only token"
        add(label, "events queued / waiting for a token after restart",
            f"{c['queued']} / {c['waiting_for_token']}")
        add(label, "delivered after the next call / duplicates",
            f"{c['delivered']} / {c['duplicates']} ({c['drain_seconds']} s)")
    c = figures.get("shared_state")
    if c:
        label = "shared state dir"
        add(label, "second daemon on the same state dir", f"exit {c['second_daemon_exit']} (refused)")
        add(label, "outbox appends by 2 processes / lost", f"{c['outbox_appends']} / {c['outbox_lost']}")
    c = figures.get("frame_fuzz")
    if c:
        label = "frame fuzzer"
        add(label, "frames / daemon deaths / bad replies",
            f"{c['frames']} / {c['deaths']} / {c['bad_replies']} ({c['seconds']} s)")
        add(label, "good client not served after a frame", c["good_failures"])
    c = figures.get("cli_fuzz")
    if c:
        label = "CLI fuzzer"
        add(label, "invocations / contract violations",
            f"{c['invocations']} / {c['violations']} ({c['seconds']} s)")
        add(label, "exit codes seen", ", ".join(f"{k}: {v}" for k, v in sorted(c["exit_codes"].items())))
        add(label, "files outside the root", c["files_outside_root"])
    for key, (label, lines) in ISSUE_41_ROWS.items():
        c = figures.get(key)
        if c:
            texts = {k: ", ".join(f"{n}: {v}" for n, v in x.items()) if isinstance(x, dict) else x
                     for k, x in c.items()}  # a dict of figures prints as "name: value, …"
            for what, value in lines:
                add(label.format(**texts), what.format(**texts), value.format(**texts))
    for key, label in (("storage_faults", "storage faults"), ("hostile", "hostile input")):
        c = figures.get(key)
        if c:
            add(label, "pytest", c["result"])
    return out


# Issue 41's parts: part -> (label, [(figure, value)]), formatted with the part's figures.
ISSUE_41_ROWS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "full_state_dir": ("state dir on a full filesystem (1 MB tmpfs)", [
        ("record-event --queue-on-failure while full: exit codes / naming the dir",
         "{full_exit_codes} / {full_errors_naming_dir} of {events}"),
        ("after space returned (no restart): acked / queued / delivered",
         "{acked_after_space_returned} / {queued} / {delivered}"),
        ("acked events lost / torn outbox bytes", "{acked_lost} / {torn_outbox_bytes}")]),
    "poisoned_record": ("poisoned records (1,000 / 100,000 deep, 1 MiB + 70 B)", [
        ("other machine's readers: exit codes", "{exits}"),
        ("readers naming them / serving the rest / internal errors",
         "{named} / {served} of {readers} / {internal_errors}"),
        ("dashboard API / named and served", "{dashboard} / {dashboard_named}"),
        ("the finding's write to our Worker (1,000 deep)", "HTTP {finding_write}")]),
    "slots": ("dashboard port: {streams} event streams + {slowloris} slowloris", [
        ("streams accepted / refused 503 (Retry-After)",
         "{streams_accepted} / {streams_refused_503} ({retry_after})"),
        ("/metrics during the attack ({scrapes} scrapes): statuses", "{metrics_statuses}"),
        ("/metrics p50 / p99 / max", "{metrics_p50_ms} / {metrics_p99_ms} / {metrics_max_ms} ms"),
        ("page during the attack / a closed stream's slot reused",
         "{page_status} ({page_ms} ms) / {stream_after_close}"),
        ("slowloris reconnections (dropped or evicted)", "{slowloris_reconnects}")]),
    "other_user": ("dashboard port, another user (token leaked)", [
        ("routes refused 403 / records written", "{refused_403} of {routes} / {records_written}")]),
}


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
    ap.add_argument("--flood", type=int, default=300)
    ap.add_argument("--idle", type=int, default=5000)
    ap.add_argument("--lock-hold", type=float, default=60.0)
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--cli", type=int, default=20_000)
    ap.add_argument("--full-events", type=int, default=200)
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--slowloris", type=int, default=300)
    ap.add_argument("--scrapes", type=int, default=500)
    ap.add_argument("--skip-http", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated parts (e.g. frame_fuzz,cli_fuzz)")
    args = ap.parse_args()

    only = {part for part in args.only.split(",") if part}

    def wanted(part: str) -> bool:
        return not only or part in only

    figures: dict[str, Any] = {}
    local_parts = {
        "contention_local": lambda: contention_local(args.procs, args.rounds),
        "crash": lambda: crash(args.kills),
    }
    later_parts = {
        "flood": lambda: flood(args.flood),
        "idle": lambda: idle(args.idle),
        "lock_hold": lambda: lock_hold(args.lock_hold),
        "shared_state": shared_state,
        "full_state_dir": lambda: full_state_dir(args.full_events),
        "slots": lambda: slots(args.streams, args.slowloris, args.scrapes),
        "other_user": other_user,
        "frame_fuzz": lambda: frame_fuzz(args.frames),
        "cli_fuzz": lambda: cli_fuzz(args.cli),
        "storage_faults": lambda: pytest_files("test_storage_faults.py"),
        "hostile": lambda: pytest_files("test_hostile.py", "test_hardening.py"),
    }
    http_parts = ("contention_http", "outage", "caller_token", "poisoned_record")
    for part, run in local_parts.items():
        if wanted(part):
            figures[part] = run()
    if not args.skip_http and any(wanted(part) for part in http_parts):
        from worker_fixture import MACHINES, launch_worker

        with contextlib.ExitStack() as stack:
            worker = stack.enter_context(launch_worker(_dir(), {**MACHINES, **POISON_MACHINES}))
            http_runs = {
                "contention_http": lambda: contention_http(worker, args.http_procs, args.http_rounds),
                "outage": lambda: outage(worker, args.outage),
                "caller_token": lambda: caller_token(worker),
                "poisoned_record": lambda: poisoned_record(worker),
            }
            for part, run in http_runs.items():
                if wanted(part):
                    figures[part] = run()
    for part, run in later_parts.items():
        if wanted(part):
            figures[part] = run()
    if args.json:
        print(json.dumps(figures, indent=2, default=str))
    print(table(figures))
    for key in ("frame_fuzz", "cli_fuzz"):
        for sample in (figures.get(key) or {}).get("samples", [])[:10]:
            print(f"{key} sample: {sample!r}")
    bad = [key for key, c in figures.items() if c.get("double_grants") or c.get("lost_writes")
           or c.get("unparsable") or c.get("duplicates") or c.get("exit_code") or c.get("deaths")
           or c.get("violations") or c.get("outbox_lost") or c.get("files_outside_root")
           or c.get("acked_lost") or c.get("internal_errors") or c.get("records_written")
           or c.get("as_expected") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
