"""The claim --next race through the Worker: 32 agents (ctl processes on two daemons,
two machines' tokens) on a 32-lane pool batch, and on a batch of dependency pairs
(tests/integration/ready_race.py); outcomes checked against the Worker's records."""

from __future__ import annotations

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
