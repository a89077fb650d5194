"""The deterministic plan: lanes, dependencies, who does what, and every agent's script.

Everything here is a pure function of (agents, lanes, seed, chaos, machines):
the same inputs give byte-identical `plan.json`, and so every agent the same
sequence of scripted ctl calls with the same expected verdicts. Timing is not
part of the plan; the ordering that matters (a takeover only after the holder
crashed or stalled, a fencing claim only after the takeover) is expressed with
harness barriers (`sync_wait` / `sync_post`, files in the run directory), never
with sleeps.

Deadlock freedom: each agent works its lanes in increasing global index, and a
lane depends only on lower-indexed lanes, so the lowest unfinished lane can
always make progress (its dependencies are done, its agent's earlier lanes are
lower). A handoff/takeover receiver takes the lane at its global-order position.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any

REPO = "sim/fleet"
CHAOS_KINDS = ("crash", "handoff", "takeover", "stop", "outage")
OPERATOR = "sim-operator"
LANE_OWNER = "sim-pool"  # lanes are dispatched by the plan, not by the manifest owner
PHASES = ("plan", "implement", "test")


@dataclass(frozen=True)
class Params:
    agents: int
    lanes: int
    seed: int
    chaos: tuple[str, ...] = ()
    machines: int = 2
    hb_ttl: int = 2            # heartbeat TTL (s): dead after 4 x ttl without renewal
    idle_timeout: float = 5.0  # keep-alive ends when an agent makes no ctl call this long
    claim_ttl: int = 900
    work: tuple[float, float] = (0.02, 0.15)  # per-phase "work" sleep range (s)
    dep_prob: float = 0.3
    dep_window: int = 8
    pool_frac: float = 0.0     # share of (pre-stop) lanes that are pool lanes, taken by claim --next

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["chaos"] = list(self.chaos)
        data["work"] = list(self.work)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Params":
        data = dict(data)
        data["chaos"] = tuple(data.get("chaos", ()))
        data["work"] = tuple(data.get("work", (0.02, 0.15)))
        return cls(**data)


def agent_name(j: int) -> str:
    return f"a{j:03d}"


def lane_name(i: int) -> str:
    return f"l{i:04d}"


def target_of(i: int) -> str:
    return str(i + 1)


@dataclass
class Plan:
    params: Params
    batch_manifest_lanes: list[dict[str, Any]]
    machine_of: dict[str, int]
    scripts: dict[str, list[dict[str, Any]]]
    chaos_lanes: dict[str, list[str]] = field(default_factory=dict)  # kind -> lanes
    stop_from: int | None = None  # lanes >= this index are closed by the operator after a stop
    crashing: list[str] = field(default_factory=list)
    pool_lanes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"params": self.params.to_json(), "lanes": self.batch_manifest_lanes,
                "machine_of": self.machine_of, "scripts": self.scripts,
                "chaos_lanes": self.chaos_lanes, "stop_from": self.stop_from,
                "crashing": self.crashing, "pool_lanes": self.pool_lanes}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True)


def make_plan(params: Params) -> Plan:
    if params.agents < 1 or params.lanes < 1:
        raise ValueError("need at least one agent and one lane")
    unknown = set(params.chaos) - set(CHAOS_KINDS)
    if unknown:
        raise ValueError(f"unknown chaos kinds: {sorted(unknown)} (known: {', '.join(CHAOS_KINDS)})")
    rng = random.Random(params.seed)
    n, m = params.agents, params.lanes
    agents = [agent_name(j) for j in range(n)]

    stop_from = None
    if "stop" in params.chaos and m >= 4:
        stop_from = max(2, int(m * 0.85))
    # Pool lanes (own random stream: plans without them stay as they were). Whoever is free
    # takes one with claim --next after its planned lanes; so that no planned lane can wait
    # on them, only pool lanes may depend on pool lanes.
    pool_rng = random.Random(f"{params.seed}-pool")
    pool = {i for i in range(m if stop_from is None else stop_from)
            if params.pool_frac > 0 and pool_rng.random() < params.pool_frac}

    deps: dict[int, list[int]] = {}
    for i in range(m):
        lo = max(0, i - params.dep_window)
        if i > 0 and rng.random() < params.dep_prob:
            k = min(i - lo, rng.choice((1, 1, 2)))
            chosen = sorted(rng.sample(range(lo, i), k))
            chosen = [d for d in chosen if i in pool or d not in pool]
            if chosen:
                deps[i] = chosen
    lanes_manifest = []
    for i in range(m):
        entry: dict[str, Any] = {"name": lane_name(i), "owner": LANE_OWNER, "targets": [target_of(i)]}
        if i in pool:
            entry["pool"] = True
        if deps.get(i):
            entry["depends_on"] = [f"@BATCH@:{lane_name(d)}" for d in deps[i]]
        lanes_manifest.append(entry)

    work_lanes = [i for i in range(m if stop_from is None else stop_from) if i not in pool]

    # Balanced assignment: each block of n lanes is a fresh permutation of the agents.
    holder: dict[int, str] = {}
    for start in range(0, len(work_lanes), n):
        block = work_lanes[start:start + n]
        perm = agents[:]
        rng.shuffle(perm)
        for i, a in zip(block, perm):
            holder[i] = a

    # Chaos on pre-stop lanes. kind per lane: crash / stall / handoff, with a receiver.
    special: dict[int, tuple[str, str]] = {}
    crashing: list[str] = []
    if "crash" in params.chaos and n >= 2:
        count = max(1, n // 10)
        candidates = [i for i in work_lanes if i >= 1]
        rng.shuffle(candidates)
        for i in candidates:
            if len(crashing) >= count or len(crashing) >= n - 1:
                break
            a = holder[i]
            if a in crashing:
                continue
            crashing.append(a)
            special[i] = ("crash", "")
        alive = [a for a in agents if a not in crashing]
        for i in sorted(special):  # the crashed agent's later lanes go to survivors
            a = holder[i]
            for k in work_lanes:
                if k > i and holder[k] == a:
                    holder[k] = rng.choice(alive)
            special[i] = ("crash", rng.choice(alive))
    alive = [a for a in agents if a not in crashing]
    free = [i for i in work_lanes if i not in special and holder[i] not in crashing]
    rng.shuffle(free)
    if "takeover" in params.chaos and len(alive) >= 2:
        for i in free[:max(1, n // 10)]:
            special[i] = ("stall", rng.choice([a for a in alive if a != holder[i]]))
        free = free[max(1, n // 10):]
    if "handoff" in params.chaos and len(alive) >= 2:
        for i in free[:max(1, m // 10)]:
            special[i] = ("handoff", rng.choice([a for a in alive if a != holder[i]]))

    # Scripts: (lane index, role) per agent in global order.
    todo: dict[str, list[tuple[int, str]]] = {a: [] for a in agents}
    for i in work_lanes:
        todo[holder[i]].append((i, "holder"))
        if i in special:
            todo[special[i][1]].append((i, "receiver"))
    scripts: dict[str, list[dict[str, Any]]] = {}
    for a in agents:
        steps: list[dict[str, Any]] = []
        crashed = False
        for i, role in sorted(todo[a]):
            if crashed:
                break
            kind = special.get(i, ("normal", ""))[0]
            lane, tgt = lane_name(i), target_of(i)
            w = lambda: round(rng.uniform(*params.work), 3)  # noqa: E731
            if role == "holder":
                if deps.get(i):
                    steps.append({"op": "wait_unblocked", "lane": lane})
                steps.append({"op": "claim", "lane": lane, "target": tgt, "phase": "plan", "expect": 0})
                steps.append({"op": "work", "seconds": w()})
                steps.append({"op": "heartbeat", "lane": lane, "target": tgt, "phase": "implement", "expect": 0})
                steps.append({"op": "work", "seconds": w()})
                if kind == "crash":
                    steps.append({"op": "crash", "lane": lane, "target": tgt})
                    crashed = True
                elif kind == "stall":
                    steps.append({"op": "sync_post", "name": f"ready-{lane}"})
                    steps.append({"op": "sync_wait", "name": f"taken-{lane}"})
                    steps.append({"op": "claim", "lane": lane, "target": tgt, "phase": "implement",
                                  "expect": 3, "fencing": True})
                    steps.append({"op": "sync_post", "name": f"fenced-{lane}"})
                elif kind == "handoff":
                    steps.append({"op": "release_handoff", "lane": lane, "target": tgt,
                                  "to": special[i][1], "expect": 0})
                    steps.append({"op": "sync_post", "name": f"ready-{lane}"})
                else:
                    steps.append({"op": "heartbeat", "lane": lane, "target": tgt, "phase": "test", "expect": 0})
                    steps.append({"op": "work", "seconds": w()})
                    steps.append({"op": "release_terminal", "lane": lane, "target": tgt, "expect": 0})
            else:  # receiver: take the lane over after a handoff, crash or stall
                steps.append({"op": "sync_wait", "name": f"ready-{lane}"})
                steps.append({"op": "wait_free", "lane": lane, "target": tgt})
                steps.append({"op": "claim", "lane": lane, "target": tgt, "phase": "implement",
                              "expect": 0, "takeover": kind in ("crash", "stall"),
                              "handoff": kind == "handoff"})
                if kind == "stall":
                    steps.append({"op": "sync_post", "name": f"taken-{lane}"})
                steps.append({"op": "work", "seconds": w()})
                steps.append({"op": "heartbeat", "lane": lane, "target": tgt, "phase": "test", "expect": 0})
                if kind == "stall":
                    steps.append({"op": "sync_wait", "name": f"fenced-{lane}"})
                steps.append({"op": "release_terminal", "lane": lane, "target": tgt, "expect": 0})
        if pool and not crashed:
            steps.append({"op": "pool_work"})
        if stop_from is not None and not crashed:
            steps.append({"op": "sync_wait", "name": "stop-issued"})
            steps.append({"op": "stop_check"})
        scripts[a] = steps

    chaos_lanes: dict[str, list[str]] = {}
    for i, (kind, _) in sorted(special.items()):
        chaos_lanes.setdefault({"stall": "takeover"}.get(kind, kind), []).append(lane_name(i))
    if stop_from is not None:
        chaos_lanes["stop"] = [lane_name(i) for i in range(stop_from, m)]
    return Plan(params=params, batch_manifest_lanes=lanes_manifest,
                machine_of={a: j % params.machines for j, a in enumerate(agents)},
                scripts=scripts, chaos_lanes=chaos_lanes, stop_from=stop_from, crashing=crashing,
                pool_lanes=[lane_name(i) for i in sorted(pool)])
