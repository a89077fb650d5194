"""`sim run`: plan, start the machines and the backend, run the fleet, record, verify.

The run directory (--out) afterwards holds everything `sim verify` reads:

    plan.json        the deterministic plan (params, lanes, per-agent scripts)
    run.json         backend, transport, batch id, timings, worker exit codes
    machines.json    per-machine environments the workers used
    agents/*.jsonl   one log per agent (+ sim-operator), see sim/worker.py
    controller.jsonl the controller's own actions (outage, stop, operator)
    state.json       `status --batch-id B --json --all-events` at the end
    audit.json       `batch-audit --batch-id B --json` and its exit code
    sync/            harness barriers (handoff/crash/stall ordering, stop)
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sim import calls, cluster, feedlog
from sim.plan import OPERATOR, REPO, Params, Plan, lane_name, make_plan, target_of


class Controller:
    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self.log = open(run_dir / "controller.jsonl", "a", buffering=1, encoding="utf-8")

    def emit(self, **record: Any) -> None:
        record.setdefault("wall", time.time())
        self.log.write(json.dumps(record, sort_keys=True) + "\n")


def ctl(env: dict[str, str], *args: str, timeout: float = 120) -> tuple[int, Any, str]:
    proc = subprocess.run([calls.CTL, "--timeout", "60", *args], env=env, capture_output=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    out = proc.stdout.decode("utf-8", "replace")
    try:
        payload = json.loads(out) if out.strip() else None
    except ValueError:
        payload = None
    return proc.returncode, payload, proc.stderr.decode("utf-8", "replace")


def terminal_lanes(env: dict[str, str], batch: str) -> set[str] | None:
    rc, payload, _ = ctl(env, "status", "--batch-id", batch, "--events", "1", "--json")
    if rc != 0 or not isinstance(payload, dict) or not payload.get("batches"):
        return None
    from agentcoordd.model.status import is_terminal

    return {lane["name"] for lane in payload["batches"][0].get("lanes", []) if is_terminal(lane.get("status"))}


def groups(plan: Plan, per_process: int) -> list[list[str]]:
    """Crashing agents alone in their process (they SIGKILL themselves); the rest in groups."""
    alone = [[a] for a in plan.crashing]
    rest = [a for a in plan.scripts if a not in plan.crashing and plan.scripts[a]]
    return alone + [rest[i:i + per_process] for i in range(0, len(rest), per_process)]


def run(params: Params, out: Path, *, backend: str = "local", transport: str = "ctl",
        per_process: int = 1, duration: float = 900.0, verify_after: bool = True) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("agents", "sync"):
        (out / sub).mkdir(exist_ok=True)
    plan = make_plan(params)
    (out / "plan.json").write_text(plan.dumps() + "\n")
    batch = f"sim-{params.seed}-{secrets.token_hex(3)}"
    ctrl = Controller(out)
    info: dict[str, Any] = {"batch_id": batch, "backend": backend, "transport": transport,
                            "per_process": per_process, "params": params.to_json()}
    t_start = time.time()
    with cluster.backend(backend, out, params.machines) as (benvs, bdesc), \
            cluster.machines(params.machines, benvs, out) as fleet:
        info["backend_detail"] = bdesc
        envs = {str(m.index): m.env for m in fleet}
        (out / "machines.json").write_text(json.dumps({"batch_id": batch, "envs": envs}, indent=1) + "\n")
        env0 = fleet[0].env
        manifest = {"batch_id": batch, "repo": REPO, "objective": f"sim seed {params.seed}",
                    "lanes": json.loads(json.dumps(plan.batch_manifest_lanes).replace("@BATCH@", batch))}
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        rc, _, err = ctl(env0, "register-batch", "--file", str(out / "manifest.json"),
                         "--synthetic", "--synthetic-kind", "simulation")
        if rc != 0:
            raise RuntimeError(f"register-batch failed ({rc}): {err}")
        ctrl.emit(kind="registered", batch=batch, lanes=params.lanes)
        follower = feedlog.start(calls.CTL, env0, batch, out)  # the verifier's live feed
        t_fleet = time.time()
        procs = []
        workers_out = open(out / "workers.out", "ab")  # noqa: SIM115 - closed after the fleet ends
        for group in groups(plan, per_process):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "sim.worker", "--run-dir", str(out), "--agents", ",".join(group),
                 "--transport", transport],
                cwd=str(cluster.REPO_ROOT), stdin=subprocess.DEVNULL,
                stdout=workers_out, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(cluster.REPO_ROOT)}))
        ctrl.emit(kind="workers_started", processes=len(procs))
        pre_stop = {lane_name(i) for i in range(params.lanes if plan.stop_from is None else plan.stop_from)}
        outage_done = "outage" not in params.chaos
        stop_done = plan.stop_from is None
        deadline = time.monotonic() + duration
        timed_out = False
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                timed_out = True
                ctrl.emit(kind="duration_exceeded")
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                break
            if not (outage_done and stop_done):
                done = terminal_lanes(env0, batch)
                if done is not None:
                    if not outage_done and len(done & pre_stop) >= len(pre_stop) // 3:
                        victim = fleet[-1]
                        ctrl.emit(kind="outage_begin", machine=victim.name)
                        victim.stop()
                        time.sleep(1.0)
                        victim.start()
                        ctrl.emit(kind="outage_end", machine=victim.name)
                        outage_done = True
                    if not stop_done and pre_stop <= done:
                        rc, _, err = ctl(env0, "batch", "stop", "--batch-id", batch,
                                         "--message", "sim: stop claiming new lanes")
                        ctrl.emit(kind="stop_requested", rc=rc, err=err[-300:])
                        (out / "sync" / "stop-issued").touch()
                        stop_done = True
            time.sleep(0.5)
        info["worker_exit_codes"] = [p.wait() for p in procs]
        workers_out.close()
        if plan.stop_from is not None and not timed_out:
            _operator_closeout(out, plan, batch, fleet[0].env)
            rc, _, _ = ctl(env0, "batch", "stopped", "--batch-id", batch, "--message", "sim: drained")
            ctrl.emit(kind="batch_stopped", rc=rc)
        t_end = time.time()
        rc, state, err = ctl(env0, "status", "--batch-id", batch, "--all-events", "--json", timeout=600)
        (out / "state.json").write_text(json.dumps({"rc": rc, "err": err[-500:], "status": state}) + "\n")
        listed = {e.get("event_id", "") for e in (state or {}).get("events", [])}
        info["feed_catch_up_seconds"] = round(feedlog.finish(follower, out, listed), 3)
        rc, audit, err = ctl(env0, "batch-audit", "--batch-id", batch, "--json", timeout=600)
        (out / "audit.json").write_text(json.dumps({"rc": rc, "err": err[-500:], "audit": audit}) + "\n")
    info.update(started_wall=t_start, fleet_started_wall=t_fleet, fleet_ended_wall=t_end,
                wall_seconds=t_end - t_fleet, timed_out=timed_out)
    (out / "run.json").write_text(json.dumps(info, indent=1) + "\n")
    ctrl.log.close()
    return info


def _operator_closeout(out: Path, plan: Plan, batch: str, env: dict[str, str]) -> None:
    """After the stop drained the fleet: the operator abandons the lanes nobody started."""
    from sim.worker import AgentRunner

    steps = []
    for i in range(plan.stop_from or 0, plan.params.lanes):
        lane, tgt = lane_name(i), target_of(i)
        steps.append({"op": "claim", "lane": lane, "target": tgt, "phase": "closeout", "expect": 0})
        steps.append({"op": "release_terminal", "lane": lane, "target": tgt, "terminal": "abandoned", "expect": 0})
    plan_json = json.loads((out / "plan.json").read_text())
    plan_json["scripts"] = {OPERATOR: steps}
    runner = AgentRunner(out, plan_json, OPERATOR, env, "ctl", batch)
    t = threading.Thread(target=runner.run)
    t.start()
    t.join()
