"""A worker process: runs one or more scripted agents (threads), each logging JSON lines.

    python -m sim.worker --run-dir DIR --agents a000,a001 --transport ctl|wire

Every agent reads its script from DIR/plan.json and its machine's environment
from DIR/machines.json, and appends to DIR/agents/<agent>.jsonl:

* `call`: one ctl call (argv, exit code, latency, monotonic + wall start/end,
  attempt number) — every attempt, retries included;
* `step`: one scripted step's final verdict (what replay compares);
* `hold`: an interval during which the agent believed it held a target, from
  its claim's exit 0 until it released (terminal or handoff), was fenced
  (a refused claim after someone took the target over) or crashed;
* `crash` / `stopped` / `done` markers.

`pool_work` (pool lanes, plans with `pool_frac`): `claim --next` until the batch has
no pool lane left open for this agent — each lane taken is worked like a planned
one (heartbeats, `release --terminal done`); nothing ready yet: `wait --until-ready`.
A `claim --next` that ended in exit 2 may have claimed a lane anyway (the reply was
lost): `ready --agent-id` then shows it held by this agent, and it is worked.

A crash is real: the process logs the end of its belief, then SIGKILLs itself
(crashing agents always run alone in their process). Its keep-alive lane
watches the worker's pid, so agentcoordd stops renewing the heartbeat.
Operational failures (exit 2: daemon restarting, backend outage) are retried
with capped backoff; the step's verdict is the final attempt's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sim import calls

RETRY_FOR = 120.0
STOP_SEEN_WITHIN = 30.0
POOL_WAIT = 30.0
# claim --next's refusal: how many of this agent's lanes are blocked / held / closed.
_REFUSAL = re.compile(r"no ready lane in batch \S+ \((\d+) blocked, (\d+) held, (\d+) closed\)")


class AgentRunner:
    def __init__(self, run_dir: Path, plan: dict[str, Any], agent: str, env: dict[str, str],
                 transport: str, batch: str) -> None:
        self.dir = run_dir
        self.agent = agent
        self.steps = plan["scripts"][agent]
        prm = plan["params"]
        self.ctx = calls.Ctx(agent=agent, batch=batch, hb_ttl=prm["hb_ttl"], claim_ttl=prm["claim_ttl"],
                             idle_timeout=prm["idle_timeout"], watch_pid=os.getpid())
        self.t = calls.transport(transport, env)
        self.batch = batch
        self.log = open(run_dir / "agents" / f"{agent}.jsonl", "a", buffering=1, encoding="utf-8")
        self.holding: dict[str, dict[str, Any]] = {}  # target -> open hold
        self.failed = False

    def emit(self, record: dict[str, Any]) -> None:
        record = {"agent": self.agent, **record}
        self.log.write(json.dumps(record, sort_keys=True) + "\n")

    def call(self, n: int, step: dict[str, Any], *, retry: bool = True) -> calls.Result:
        argv = calls.argv_for(step, self.ctx)
        started = time.monotonic()
        attempt = 0
        delay = 0.2
        while True:
            attempt += 1
            w0, m0 = time.time(), time.monotonic()
            res = self.t.call(argv, timeout=calls.WAIT_TIMEOUT if argv[0] == "wait" else 60.0)
            w1, m1 = time.time(), time.monotonic()
            extra: dict[str, Any] = {}
            if isinstance(res.payload, dict):
                if "action" in res.payload:
                    extra["action"] = res.payload["action"]
                if res.payload.get("stop_requested"):
                    extra["stop_requested"] = True
            self.emit({"kind": "call", "step": n, "op": step["op"], "argv": argv, "rc": res.rc,
                       "attempt": attempt, "t0_wall": w0, "t1_wall": w1, "t0_mono": m0, "t1_mono": m1,
                       "latency": m1 - m0, **extra, **({"err": res.err[-300:]} if res.rc else {})})
            if res.rc != 2 or not retry or argv[0] == "wait" or time.monotonic() - started > RETRY_FOR:
                res.t0_wall, res.t1_wall = w0, w1  # type: ignore[attr-defined]
                return res
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def step_record(self, n: int, step: dict[str, Any], verdict: Any) -> None:
        argv = calls.argv_for(step, self.ctx) if step["op"] not in ("work", "sync_post", "sync_wait", "crash", "pool_work") else None
        self.emit({"kind": "step", "step": n, "op": step["op"],
                   "argv": calls.normalize(argv, self.batch) if argv else None,
                   "name": step.get("name"), "expect": step.get("expect"), "verdict": verdict,
                   "wall": time.time()})

    def close_hold(self, target: str, reason: str, at_wall: float, at_mono: float) -> None:
        hold = self.holding.pop(target, None)
        if hold is None:
            return
        hold.update(kind="hold", end_wall=at_wall, end_mono=at_mono, end_reason=reason)
        self.emit(hold)

    def work_pool_lane(self, n: int, lane: str, target: str, claimed: calls.Result) -> None:
        """A lane claim --next handed out: worked and closed like a planned lane."""
        self.holding[target] = {
            "target": target, "lane": lane, "start_wall": claimed.t1_wall,  # type: ignore[attr-defined]
            "start_mono": time.monotonic(), "claim_t0_wall": claimed.t0_wall,  # type: ignore[attr-defined]
            "action": (claimed.payload or {}).get("action", "acquired"),
            "last_write_wall": claimed.t0_wall, "takeover": False, "handoff": False, "pool": True}  # type: ignore[attr-defined]
        for phase in ("implement", "test"):
            time.sleep(0.05)
            res = self.call(n, {"op": "heartbeat", "lane": lane, "target": target, "phase": phase})
            if res.rc == 0:
                self.holding[target]["last_write_wall"] = res.t0_wall  # type: ignore[attr-defined]
        res = self.call(n, {"op": "release_terminal", "lane": lane, "target": target})
        if res.rc == 0:
            self.close_hold(target, "terminal", res.t1_wall, time.monotonic())  # type: ignore[attr-defined]
        else:
            self.emit({"kind": "unexpected", "step": n, "op": "release_terminal", "rc": res.rc,
                       "expect": 0, "err": res.err[-300:]})

    def own_held_lane(self, n: int) -> tuple[str, str] | None:
        """A lane `ready` shows held by this agent that it does not know it holds."""
        res = self.call(n, {"op": "ready"})
        rows = res.payload.get("lanes", []) if res.rc == 0 and isinstance(res.payload, dict) else []
        for row in rows:  # held by us, or ours with our heartbeat already dead
            holders = {h.get("target"): h.get("agent_id") for h in row.get("held_by") or []}
            holders.update(row.get("dead_holders") or {})
            for target, holder in holders.items():
                if holder == self.agent and target not in self.holding:
                    return row["name"], target
        return None

    def pool_work(self, n: int) -> str:
        """claim --next until no pool lane is open for this agent; the step's verdict."""
        while True:
            res = self.call(n, {"op": "claim_next"}, retry=False)
            if res.rc == 0 and isinstance(res.payload, dict):
                self.work_pool_lane(n, res.payload["lane"], res.payload["target"], res)
                continue
            if res.rc == 2:  # maybe claimed with the reply lost: adopt it, else ask again
                time.sleep(0.5)
                mine = self.own_held_lane(n)
                if mine is not None:
                    self.work_pool_lane(n, mine[0], mine[1], res)
                continue
            found = _REFUSAL.search(res.err) if res.rc == 3 else None
            if found is None:
                self.emit({"kind": "unexpected", "step": n, "op": "claim_next", "rc": res.rc,
                           "expect": "0 or 3", "err": res.err[-300:]})
                return "failed"
            if found.group(1) == "0" and found.group(2) == "0":
                return "pool done"
            self.call(n, {"op": "wait_ready", "seconds": POOL_WAIT})

    def run(self) -> None:
        self.emit({"kind": "start", "pid": os.getpid(), "wall": time.time(), "mono": time.monotonic()})
        for n, step in enumerate(self.steps):
            op = step["op"]
            if op == "work":
                time.sleep(step["seconds"])
                continue
            if op == "sync_post":
                (self.dir / "sync" / step["name"]).touch()
                self.step_record(n, step, "posted")
                continue
            if op == "sync_wait":
                flag = self.dir / "sync" / step["name"]
                while not flag.exists():
                    time.sleep(0.05)
                self.step_record(n, step, "seen")
                continue
            if op == "crash":
                now_w, now_m = time.time(), time.monotonic()
                self.close_hold(step["target"], "crashed", now_w, now_m)
                self.emit({"kind": "crash", "lane": step["lane"], "target": step["target"],
                           "wall": now_w, "mono": now_m})
                self.step_record(n, step, "crashed")
                self.log.flush()
                os.fsync(self.log.fileno())
                (self.dir / "sync" / f"ready-{step['lane']}").touch()
                os.kill(os.getpid(), signal.SIGKILL)
                return
            if op == "pool_work":
                self.step_record(n, step, self.pool_work(n))
                continue
            res = self.call(n, step)
            if op == "stop_check":  # a stop written through another daemon may be cached briefly
                until = time.monotonic() + STOP_SEEN_WITHIN
                while not (isinstance(res.payload, dict) and res.payload.get("stop_requested")) \
                        and time.monotonic() < until:
                    time.sleep(0.5)
                    res = self.call(n, step)
            verdict: Any = res.rc
            if op == "claim":
                if res.rc == 0:
                    hold = self.holding.get(step["target"])
                    if hold is None:
                        self.holding[step["target"]] = {
                            "target": step["target"], "lane": step["lane"], "start_wall": res.t1_wall,
                            "start_mono": time.monotonic(), "claim_t0_wall": res.t0_wall,
                            "action": (res.payload or {}).get("action"),
                            "last_write_wall": res.t0_wall,
                            "takeover": bool(step.get("takeover")), "handoff": bool(step.get("handoff"))}
                    else:
                        hold["last_write_wall"] = res.t0_wall
                elif step.get("fencing"):
                    self.close_hold(step["target"], "fenced", res.t1_wall, time.monotonic())
            elif op == "heartbeat" and res.rc == 0 and step["target"] in self.holding:
                self.holding[step["target"]]["last_write_wall"] = res.t0_wall
            elif op in ("release_terminal", "release_handoff") and res.rc == 0:
                self.close_hold(step["target"], "terminal" if op == "release_terminal" else "handoff",
                                res.t1_wall, time.monotonic())
            elif op == "stop_check":
                verdict = [res.rc, bool(isinstance(res.payload, dict) and res.payload.get("stop_requested"))]
            self.step_record(n, step, verdict)
            if step.get("expect") is not None and res.rc != step["expect"]:
                self.emit({"kind": "unexpected", "step": n, "op": op, "rc": res.rc, "expect": step["expect"],
                           "err": res.err[-300:]})
            if op == "stop_check":
                if verdict == [0, True]:
                    self.emit({"kind": "stopped", "wall": time.time()})
                else:
                    self.emit({"kind": "unexpected", "step": n, "op": op, "verdict": verdict})
                break
        for target in list(self.holding):
            self.close_hold(target, "script_end", time.time(), time.monotonic())
        self.emit({"kind": "done", "wall": time.time(), "mono": time.monotonic()})
        self.log.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.worker")
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--agents", required=True)
    ap.add_argument("--transport", default="ctl", choices=("ctl", "wire"))
    args = ap.parse_args(argv)
    plan = json.loads((args.run_dir / "plan.json").read_text())
    machines = json.loads((args.run_dir / "machines.json").read_text())
    batch = machines["batch_id"]
    runners = []
    for agent in args.agents.split(","):
        m = plan["machine_of"][agent]
        env = dict(machines["envs"][str(m)])
        runners.append(AgentRunner(args.run_dir, plan, agent, env, args.transport, batch))
    if len(runners) == 1:
        runners[0].run()
        return 0
    threads = [threading.Thread(target=r.run, name=r.agent) for r in runners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
