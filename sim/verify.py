"""`sim verify`: the invariants, from the recorded state, events and worker logs only.

Time tolerance. Records carry whole-second UTC timestamps (`at`,
`updated_at`), truncated, so a stored time can be up to 1 s earlier than the
write it records; worker logs carry float wall time of the same host clock.
`TOL` = 1.0 s (truncation) + 0.25 s (scheduling between the store write and
the log line) is allowed wherever a recorded second is compared with a logged
instant, and wherever a takeover's legality is judged.

Checks (each failure is one violation line):
1. single holder: per target, believed-hold intervals of different agents do
   not overlap — except a legal takeover: the new holder's claim was a
   takeover (`taken_over`) that started at least 4 x heartbeat-TTL - TOL
   after the previous holder's last own heartbeat/claim write, and the
   previous holder's belief then ended by a crash or by being fenced;
2. fencing: after a takeover, the old holder never again got exit 0 from a
   claim or release on that target;
3. lineage: one claim.acquired per hold (agent, target, `at` inside the hold
   ± TOL); a handoff hold ends with a claim.released carrying
   release_mode=handoff and the planned handoff_to; a terminal hold with the
   lane's lane_closed by that agent; a crashed hold with the daemon's
   claim.released (release_mode=holder_exited); fenced holds have no release;
4. every lane ended terminal: the batch record's lane status is terminal and
   there is exactly one lane_closed event per lane;
5. batch-audit exited 0 (complete);
6. no duplicated event (same content apart from event_id/path);
7. dependencies: no lane's first claim (log and claim.acquired event) came
   before each dependency's lane_closed;
8. scripted verdicts: every step's exit code is the one the plan expects
   (claims 0, fencing claims 3, the stop check saw stop_requested);
9. the live feed (feed.jsonl, one `events --follow --json` for the whole run):
   every event of the final listing printed exactly once, nothing else, in
   (at, event_id) order except lines the feed marked `late` (sim/feedlog.py).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from agentcoordd.model.timefmt import parse_ts
from sim import feedlog

TOL = 1.25
DEAD_MULT = 4


def _ts(value: Any) -> float | None:
    parsed = parse_ts(value)
    return parsed.timestamp() if parsed is not None else None


def load_logs(out: Path) -> dict[str, list[dict[str, Any]]]:
    logs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((out / "agents").glob("*.jsonl")):
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass  # a torn last line of a SIGKILLed agent
        logs[path.stem] = rows
    return logs


def verify(out: Path, batch_id: str | None = None) -> dict[str, Any]:
    run = json.loads((out / "run.json").read_text())
    plan = json.loads((out / "plan.json").read_text())
    batch = batch_id or run["batch_id"]
    hb_ttl = plan["params"]["hb_ttl"]
    violations: list[str] = []
    if batch != run["batch_id"]:
        violations.append(f"run directory holds batch {run['batch_id']}, not {batch}")
    state = json.loads((out / "state.json").read_text())
    audit = json.loads((out / "audit.json").read_text())
    logs = load_logs(out)
    status = state.get("status") or {}
    events = [e for e in status.get("events", []) if e.get("batch_id", batch) == batch]
    batches = status.get("batches") or [{}]
    lanes = {ln["name"]: ln for ln in batches[0].get("lanes", [])}
    if state.get("rc") != 0:
        violations.append(f"final status read failed: rc {state.get('rc')} {state.get('err')}")
    lane_of_target = {}
    for ln in plan["lanes"]:
        lane_of_target[ln["targets"][0]] = ln["name"]

    calls_ = [r for rows in logs.values() for r in rows if r.get("kind") == "call"]
    holds = [r for rows in logs.values() for r in rows if r.get("kind") == "hold"]
    crashes = [r for rows in logs.values() for r in rows if r.get("kind") == "crash"]
    steps = [r for rows in logs.values() for r in rows if r.get("kind") == "step"]

    # 8. scripted verdicts
    for rows in logs.values():
        for r in rows:
            if r.get("kind") == "unexpected":
                violations.append(f"verdict: {r['agent']} step {r['step']} {r['op']}: got "
                                  f"{r.get('rc', r.get('verdict'))}, plan expects {r.get('expect', 'stop seen')}")
    planned_agents = {a for a, s in plan["scripts"].items() if s}
    for agent in planned_agents:
        rows = logs.get(agent, [])
        if not any(r.get("kind") in ("done", "crash") for r in rows):
            violations.append(f"agent {agent} never finished its script")

    # 1 + 2. single holder, legal takeovers, fencing
    by_target: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for h in holds:
        by_target[h["target"]].append(h)
    takeovers = 0
    writes: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in calls_:
        if c["op"] in ("claim", "release_terminal", "release_handoff") and c["rc"] == 0:
            t = c["argv"][c["argv"].index("--target") + 1]
            writes[(c["agent"], t)].append(c)
    for target, hs in by_target.items():
        hs.sort(key=lambda h: h["start_wall"])
        for a, b in zip(hs, hs[1:]):
            if b.get("action") == "taken_over":
                takeovers += 1
                last = a.get("last_write_wall", a["start_wall"])
                # a claim --next call may survey long before it claims: judge its answer
                claimed = b["start_wall"] if b.get("pool") else b["claim_t0_wall"]
                if claimed < last + DEAD_MULT * hb_ttl - TOL:
                    violations.append(
                        f"takeover of {target} by {b['agent']} at {b['claim_t0_wall']:.2f} only "
                        f"{b['claim_t0_wall'] - last:.2f}s after {a['agent']}'s last write "
                        f"(dead needs {DEAD_MULT}x{hb_ttl}s)")
                if a["end_reason"] not in ("crashed", "fenced"):
                    violations.append(f"{target}: {b['agent']} took over from {a['agent']} whose hold "
                                      f"ended {a['end_reason']}")
                for w in writes[(a["agent"], target)]:
                    if w["t0_wall"] > b["start_wall"]:
                        violations.append(f"fencing: {a['agent']} got exit 0 from {w['op']} on {target} "
                                          f"after {b['agent']} took it over")
            elif b["start_wall"] < a["end_wall"] - 0.0:
                violations.append(f"two holders: {target} held by {a['agent']} until {a['end_wall']:.2f} "
                                  f"and by {b['agent']} from {b['start_wall']:.2f} (no takeover)")
            if a["end_reason"] in ("script_end",):
                violations.append(f"{a['agent']} still believed it held {target} at the end of its script")
        if hs and hs[-1]["end_reason"] == "script_end":
            violations.append(f"{hs[-1]['agent']} still believed it held {target} at the end of its script")

    # 3. lineage
    ev_by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        ev_by_type[e.get("type", "")].append(e)
    acquired = defaultdict(list)
    for e in ev_by_type["claim.acquired"]:
        acquired[(e.get("agent_id"), str(e.get("target")))].append(_ts(e.get("at")))
    released = defaultdict(list)
    for e in ev_by_type["claim.released"]:
        released[(e.get("agent_id"), str(e.get("target")))].append(e)
    closed = defaultdict(list)
    for e in ev_by_type["lane_closed"]:
        closed[e.get("lane") or lane_of_target.get(str(e.get("target")))].append(e)
    holds_by_key = Counter((h["agent"], h["target"]) for h in holds)
    for key, n in holds_by_key.items():
        if len(acquired.get(key, [])) != n:
            violations.append(f"lineage: {key[0]} held {key[1]} {n}x but {len(acquired.get(key, []))} "
                              "claim.acquired events")
    for key, ats in acquired.items():
        if key not in holds_by_key:
            violations.append(f"lineage: claim.acquired for {key} with no hold in the logs")
    handoffs = 0
    for h in holds:
        key = (h["agent"], h["target"])
        ats = acquired.get(key, [])
        if not any(t is not None and h["claim_t0_wall"] - TOL <= t <= h["start_wall"] + TOL for t in ats):
            violations.append(f"lineage: no claim.acquired for {key} inside its hold start")
        rel = [e for e in released.get(key, []) if (t := _ts(e.get("at"))) is not None
               and h["start_wall"] - TOL <= t <= h["end_wall"] + TOL]
        lane = h["lane"]
        if h["end_reason"] == "handoff":
            handoffs += 1
            if not any(e.get("release_mode") == "handoff" and e.get("handoff_to") for e in rel):
                violations.append(f"lineage: handoff of {lane} by {h['agent']} has no claim.released(handoff)")
        elif h["end_reason"] == "terminal":
            if not any(e.get("agent_id") == h["agent"] or (e.get("closed_by") or {}).get("agent_id") == h["agent"]
                       for e in closed.get(lane, [])):
                violations.append(f"lineage: {lane} closed by {h['agent']} but lane_closed names someone else")
        elif h["end_reason"] == "crashed":
            # its daemon saw the process die and released the claim on its behalf
            late = [e for e in released.get(key, []) if (t := _ts(e.get("at"))) is not None
                    and h["start_wall"] - TOL <= t]
            if [e.get("release_mode") for e in late[:1]] != ["holder_exited"]:
                violations.append(f"lineage: {h['agent']}'s crashed hold of {lane} has no "
                                  "claim.released(holder_exited) after it")
        elif rel:
            violations.append(f"lineage: {h['agent']}'s {h['end_reason']} hold of {lane} has a release event")

    # 4. every lane terminal, one lane_closed each
    from agentcoordd.model.status import is_terminal

    for ln in plan["lanes"]:
        name = ln["name"]
        if not is_terminal((lanes.get(name) or {}).get("status")):
            violations.append(f"lane {name} ended {(lanes.get(name) or {}).get('status')!r}, not terminal")
        if len(closed.get(name, [])) != 1:
            violations.append(f"lane {name} has {len(closed.get(name, []))} lane_closed events")

    # 5. batch-audit
    if audit.get("rc") != 0:
        violations.append(f"batch-audit exit {audit.get('rc')}: {str(audit.get('audit'))[:300]}")

    # 6. duplicates
    seen: Counter[str] = Counter()
    for e in events:
        body = {k: v for k, v in e.items() if k not in ("event_id", "path")}
        seen[json.dumps(body, sort_keys=True)] += 1
    for body, n in seen.items():
        if n > 1:
            violations.append(f"duplicated event x{n}: {body[:200]}")

    # 7. dependencies
    first_claim: dict[str, float] = {}
    for h in holds:
        if h["agent"] == "sim-operator":
            continue
        # claim --next names its lane only in its answer, and its call may start long
        # before it claims: its answer must not precede the dependency's closing release
        # (the event check below compares the records themselves)
        at = h["start_wall"] if h.get("pool") else h["claim_t0_wall"]
        first_claim[h["lane"]] = min(first_claim.get(h["lane"], at), at)
    closed_at = {name: min(filter(None, (_ts(e.get("at")) for e in es)), default=None)
                 for name, es in closed.items()}
    closing_call: dict[str, float] = {}
    for c in calls_:
        if c["op"] == "release_terminal" and c["rc"] == 0:
            lane = lane_of_target[c["argv"][c["argv"].index("--target") + 1]]
            closing_call[lane] = min(closing_call.get(lane, c["t0_wall"]), c["t0_wall"])
    first_acq_event = {}
    for (agent, target), ats in acquired.items():
        lane = lane_of_target.get(target)
        if agent != "sim-operator" and lane:
            first_acq_event[lane] = min([first_acq_event.get(lane, 1e18), *[t for t in ats if t]])
    for ln in plan["lanes"]:
        for dep in ln.get("depends_on", []):
            dep_lane = dep.rsplit(":", 1)[1]
            name = ln["name"]
            if name in first_claim:
                if dep_lane not in closing_call or first_claim[name] < closing_call[dep_lane]:
                    violations.append(f"dependency: {name} claimed before {dep_lane} was closed")
            if name in first_acq_event and (closed_at.get(dep_lane) is None
                                             or first_acq_event[name] < closed_at[dep_lane]):
                violations.append(f"dependency (events): {name} acquired before {dep_lane}'s lane_closed")

    # 9. the live feed: `events --follow` printed each listed event once, in order
    feed_violations, feed_summary = feedlog.check(out, events)
    if (out / feedlog.FEED).exists():
        violations.extend(feed_violations)

    lat = sorted(c["latency"] for c in calls_ if c["op"] not in ("wait_unblocked", "wait_free", "wait_ready"))
    wall = run.get("wall_seconds") or 0.0
    closes = [t for t in closed_at.values() if t]
    summary = {
        "batch_id": batch, "backend": run.get("backend"), "transport": run.get("transport"),
        "agents": plan["params"]["agents"], "lanes": len(plan["lanes"]),
        "lanes_terminal": sum(1 for ln in plan["lanes"] if is_terminal((lanes.get(ln["name"]) or {}).get("status"))),
        "takeovers": takeovers, "handoffs": handoffs, "crashes": len(crashes),
        "exit_releases": sum(1 for e in ev_by_type["claim.released"]
                             if e.get("release_mode") == "holder_exited"),
        "fenced": sum(1 for h in holds if h["end_reason"] == "fenced"),
        "events": len(events), "ctl_calls": len(calls_),
        "ctl_calls_per_s": round(len(calls_) / wall, 1) if wall else None,
        "p50_ctl_latency_ms": round(_pct(lat, 0.50) * 1000, 1) if lat else None,
        "p99_ctl_latency_ms": round(_pct(lat, 0.99) * 1000, 1) if lat else None,
        "wall_seconds": round(wall, 1),
        "time_to_close_s": round(max(closes) - run["fleet_started_wall"], 1) if closes else None,
        "retried_calls": sum(1 for c in calls_ if c.get("attempt", 1) > 1),
        "steps": len(steps),
        **feed_summary,
        "violations": len(violations),
    }
    result = {"summary": summary, "violations": violations}
    (out / "verify.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def _pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def table(summary: dict[str, Any]) -> str:
    width = max(len(k) for k in summary)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in summary.items())
