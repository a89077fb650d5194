"""The claim --next race, the same on every backend: N agents (separate ctl processes,
spread over the given daemons) run `claim --next` on one batch at once; the outcome is
checked against the stored records (`read(path)` reads the backend directly).

* a pool batch without dependencies: every lane claimed exactly once, every agent
  exactly one lane, the record names the agent that printed the lane, no exit 2;
* a batch of (root, dependent) pairs: only roots are claimed while their roots are
  open; after some roots close, a second wave takes exactly their dependents — and no
  active claim is ever on a lane with an unsatisfied dependency at its claimed_at.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentcoordd.model import ids
from agentcoordd.model.timefmt import parse_ts

Caller = tuple[list[str], dict[str, str]]  # ctl argv prefix, its environment
Reader = Callable[[str], dict[str, Any] | None]


def pool_manifest(batch: str, repo: str, lanes: int, *, pairs: bool = False) -> dict[str, Any]:
    """`lanes` pool lanes (targets t0..); with `pairs`, lane 2k+1 depends on lane 2k."""
    out = []
    for i in range(lanes):
        lane: dict[str, Any] = {"name": f"l{i}", "owner": "pool", "pool": True, "targets": [f"t{i}"]}
        if pairs and i % 2:
            lane["depends_on"] = f"{batch}:l{i - 1}"
        out.append(lane)
    return {"batch_id": batch, "repo": repo, "lanes": out}


def register(caller: Caller, manifest: dict[str, Any], where: Path) -> None:
    path = where / f"{manifest['batch_id']}.json"
    path.write_text(json.dumps(manifest))
    argv, env = caller
    done = subprocess.run([*argv, "register-batch", "--file", str(path)], env=env,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr


def race(callers: Sequence[Caller], batch: str, agents: Sequence[str],
         timeout: float = 240) -> dict[str, tuple[int, dict[str, Any] | None, str]]:
    """agent -> (exit code, --json payload or None, stderr); all started before any is read."""
    procs = {}
    for i, agent in enumerate(agents):
        argv, env = callers[i % len(callers)]
        procs[agent] = subprocess.Popen(
            [*argv, "--timeout", "120", "claim", "--next", "--batch-id", batch, "--agent-id", agent,
             "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    results = {}
    for agent, proc in procs.items():
        out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        payload = json.loads(out) if proc.returncode == 0 else None
        results[agent] = (proc.returncode, payload, err.decode())
    return results


def winners(results: dict[str, tuple[int, Any, str]]) -> dict[str, str]:
    """agent -> lane, for the agents that got one."""
    return {agent: payload["lane"] for agent, (code, payload, _) in results.items() if code == 0}


def check_pool_race(results: dict[str, tuple[int, Any, str]], manifest: dict[str, Any],
                    read: Reader) -> None:
    lanes = {lane["name"]: lane["targets"][0] for lane in manifest["lanes"]}
    codes = {agent: code for agent, (code, _, _) in results.items()}
    assert all(code == 0 for code in codes.values()), \
        {a: (c, e) for a, (c, _, e) in results.items() if c}
    taken = winners(results)
    assert sorted(taken.values()) == sorted(lanes), "every lane exactly once"
    assert len(taken) == len(results), "every agent exactly one lane"
    for agent, lane in taken.items():
        _, payload, _ = results[agent]
        assert payload["target"] == lanes[lane] and payload["claim"]["agent_id"] == agent
        stored = read(ids.claim_path(manifest["repo"], lanes[lane]))
        assert stored is not None and stored["agent_id"] == agent and stored["status"] == "active"
        assert stored["batch_id"] == manifest["batch_id"]


def refusal_line(batch: str, blocked: int, held: int, closed: int) -> str:
    return f"CLAIM_REFUSED: no ready lane in batch {batch} ({blocked} blocked, {held} held, {closed} closed)\n"


def check_no_blocked_lane_held(manifest: dict[str, Any], read: Reader) -> int:
    """Every active claim on a lane of the batch: each dependency of that lane has a
    lane_closed record (terminal done) written before the claim. Returns how many claims."""
    batch, repo = manifest["batch_id"], manifest["repo"]
    by_name = {lane["name"]: lane for lane in manifest["lanes"]}
    seen = 0
    for lane in manifest["lanes"]:
        stored = read(ids.claim_path(repo, lane["targets"][0]))
        if stored is None or stored.get("status") != "active":
            continue
        seen += 1
        claimed_at = parse_ts(stored["claimed_at"])
        dep = lane.get("depends_on")
        if dep is None:
            continue
        dep_name = dep.rpartition(":")[2]
        assert dep_name in by_name
        closed = read(ids.event_path(batch, ids.lane_closed_event_id(dep_name)))
        assert closed is not None and closed["terminal"] == "done", (lane["name"], stored)
        assert parse_ts(closed["at"]) <= claimed_at, (lane["name"], closed["at"], stored["claimed_at"])
    return seen


def close(caller: Caller, agent: str, repo: str, target: str) -> None:
    argv, env = caller
    done = subprocess.run([*argv, "release", "--agent-id", agent, "--repo", repo, "--target", target,
                           "--terminal", "done", "--host", "race-host"], env=env,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr


def run_pair_race(callers: Sequence[Caller], manifest: dict[str, Any], read: Reader,
                  agents: int) -> None:
    """Wave 1: only the roots are claimed (one each), the rest are refused with the counts.
    Half the root holders close their lanes; wave 2 (fresh agents) takes exactly those
    roots' dependents. At every step no active claim is on a blocked lane."""
    batch, repo = manifest["batch_id"], manifest["repo"]
    roots = [lane["name"] for lane in manifest["lanes"] if "depends_on" not in lane]
    targets = {lane["name"]: lane["targets"][0] for lane in manifest["lanes"]}
    first = race(callers, batch, [f"w1-{i}" for i in range(agents)])
    assert all(code in (0, 3) for code, _, _ in first.values()), first
    taken = winners(first)
    assert sorted(taken.values()) == sorted(roots)
    refused = [err for code, _, err in first.values() if code == 3]
    assert len(refused) == agents - len(roots)
    assert set(refused) == {refusal_line(batch, len(roots), len(roots), 0)}, set(refused)
    assert check_no_blocked_lane_held(manifest, read) == len(roots)

    closing = sorted(taken.items(), key=lambda item: int(item[1][1:]))[: len(roots) // 2]
    for i, (agent, lane) in enumerate(closing):
        close(callers[i % len(callers)], agent, repo, targets[lane])
    second = race(callers, batch, [f"w2-{i}" for i in range(agents)])
    assert all(code in (0, 3) for code, _, _ in second.values()), second
    expected = sorted(f"l{int(lane[1:]) + 1}" for _, lane in closing)
    assert sorted(winners(second).values()) == expected
    assert check_no_blocked_lane_held(manifest, read) == len(roots)  # closed roots released
