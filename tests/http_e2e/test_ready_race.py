"""The claim --next race through the Worker: 32 agents (ctl processes on two daemons,
two machines' tokens) on a 32-lane pool batch, and on a batch of dependency pairs
(tests/integration/ready_race.py); outcomes checked against the Worker's records."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from integration.ready_race import check_pool_race, pool_manifest, race, register, run_pair_race

from .conftest import record


def _setup(e2e_worker: Any, node_factory: Any) -> tuple[list[Any], Any]:
    a = node_factory("a", e2e_worker, "m-a")
    b = node_factory("b", e2e_worker, "m-b")

    def read(path: str) -> dict[str, Any] | None:
        entry = record(e2e_worker, path)
        return None if entry is None else entry["data"]

    return [a.argv(), b.argv()], read


@pytest.mark.slow
def test_race_32_agents_claim_next_on_32_pool_lanes_http(
        e2e_worker: Any, node_factory: Any, repo: str, short_dir: Any) -> None:
    callers, read = _setup(e2e_worker, node_factory)
    batch = f"race-{uuid.uuid4().hex[:8]}"
    manifest = pool_manifest(batch, repo, 32)
    register(callers[0], manifest, short_dir)
    check_pool_race(race(callers, batch, [f"agent-{i}" for i in range(32)]), manifest, read)


@pytest.mark.slow
def test_race_with_dependencies_never_hands_out_a_blocked_lane_http(
        e2e_worker: Any, node_factory: Any, repo: str, short_dir: Any) -> None:
    callers, read = _setup(e2e_worker, node_factory)
    manifest = pool_manifest(f"pairs-{uuid.uuid4().hex[:8]}", repo, 32, pairs=True)
    register(callers[0], manifest, short_dir)
    run_pair_race(callers, manifest, read, agents=32)


def test_ready_and_wait_until_ready_through_the_worker(
        e2e_worker: Any, node_factory: Any, repo: str, short_dir: Any) -> None:
    node = node_factory("a", e2e_worker, "m-a")
    batch = f"wr-{uuid.uuid4().hex[:8]}"
    register(node.argv(), pool_manifest(batch, repo, 2, pairs=True), short_dir)
    view = json.loads(node.ctl("ready", "--batch-id", batch, "--json").stdout)
    assert [(row["name"], row["state"]) for row in view["lanes"]] == [("l0", "ready"), ("l1", "blocked")]
    taken = node.ctl("claim", "--next", "--batch-id", batch, "--agent-id", "w1", "--json")
    assert taken.returncode == 0 and json.loads(taken.stdout)["lane"] == "l0"
    time.sleep(0.3)  # the waiters' shared classification is up to 0.25 s old
    assert node.ctl("wait", "--until-ready", "--batch-id", batch, "--agent-id", "w2",
                    "--timeout", "0.5").returncode == 2
    assert node.ctl("release", "--agent-id", "w1", "--repo", repo, "--target", "t0",
                    "--terminal", "done", "--host", "m-a").returncode == 0
    ready_now = node.ctl("wait", "--until-ready", "--batch-id", batch, "--agent-id", "w2",
                         "--timeout", "20")
    assert ready_now.returncode == 0, ready_now.stderr
    assert ready_now.stdout == f"ready: lane l1 of {batch} is ready for w2\n".encode()
