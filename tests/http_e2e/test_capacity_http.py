"""Capacity reservations through agentcoordd on our Worker (wrangler dev): the
contract's retry/conflict/refusal replay as ctl commands, and the 16 x 50 last-slot
race from two machines (tests/integration/capacity_flow.py)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from integration.capacity_flow import race_last_slot, replay_retry_conflict_and_refusals
from worker_fixture import WorkerServer


def test_retry_conflict_and_refusals_replay_on_the_worker(e2e_worker: WorkerServer,
                                                          node_factory: Any) -> None:
    node = node_factory("a", e2e_worker, "planner-a")
    replay_retry_conflict_and_refusals(
        lambda *args, env: node.daemon.ctl(*args, env={**node.env(), **env}, timeout=60,
                                           unset=("AGENT_COORD_STATE_ROOT",)),
        {}, workspace=f"ws-{uuid.uuid4().hex[:8]}")


@pytest.mark.slow  # 16 x 50 calls through the backend: 1-3 minutes on 2 cores
@pytest.mark.timeout(900)
def test_race_16_planners_50_rounds_for_the_last_slot_worker(e2e_worker: WorkerServer,
                                                             node_factory: Any) -> None:
    planners = []
    for name, machine in (("a", "planner-a"), ("b", "planner-b")):
        node = node_factory(name, e2e_worker, machine)
        _argv, env = node.argv()
        planners.append((str(node.daemon.socket), {**env, "AGENT_COORD_MACHINE_ID": machine}))
    rounds = race_last_slot(planners, rounds=50, tag=f"w{uuid.uuid4().hex[:6]}")
    assert len(rounds) == 50


def test_ready_on_a_machine_without_host_limit_scopes_warns_and_goes_on(
        e2e_worker: WorkerServer, node_factory: Any, short_dir: Any) -> None:
    node = node_factory("c", e2e_worker, "m-a")  # claims/heartbeats/batches/events only
    batch = f"qh{uuid.uuid4().hex[:8]}"
    manifest = short_dir / "q.json"
    manifest.write_text(json.dumps({"batch_id": batch, "repo": "acme/widgets", "lanes": [
        {"name": "east", "owner": "pool", "pool": True, "targets": ["1"], "quota_host": "pool-east"}]}))
    assert node.ctl("register-batch", "--file", str(manifest)).returncode == 0
    shown = node.ctl("ready", "--batch-id", batch, "--json", AGENT_COORD_MACHINE_ID="m-a")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["ready"] == ["east"]
    assert shown.stderr.decode().splitlines() == [
        "warning: host limits are outside this machine's read scopes: lanes naming a "
        "quota_host were not checked against them"]
