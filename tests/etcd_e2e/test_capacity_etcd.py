"""Capacity reservations through agentcoordd on a real etcd: the contract's
retry/conflict/refusal replay as ctl commands, and the 16 x 50 last-slot race from
two daemons (tests/integration/capacity_flow.py)."""

from __future__ import annotations

from typing import Any

import pytest

from integration.capacity_flow import race_last_slot, replay_retry_conflict_and_refusals

from .conftest import NO_LOCAL, EtcdCluster, EtcdDaemon, new_prefix


def test_retry_conflict_and_refusals_replay_on_etcd(on_etcd: EtcdDaemon) -> None:
    replay_retry_conflict_and_refusals(on_etcd.ctl, {})


@pytest.mark.slow  # 16 x 50 calls through the backend: 1-3 minutes on 2 cores
@pytest.mark.timeout(900)
def test_race_16_planners_50_rounds_for_the_last_slot_etcd(etcd_server: EtcdCluster,
                                                           daemon_factory: Any) -> None:
    prefix = new_prefix()
    planners = []
    for name in ("a", "b"):
        daemon = daemon_factory(name)
        daemon.start()
        node = EtcdDaemon(daemon, etcd_server.endpoints, prefix)
        env = daemon.env(**node.caller_env, AGENT_COORD_MACHINE_ID=f"planner-{name}")
        for variable in NO_LOCAL:
            env.pop(variable, None)
        planners.append((str(daemon.socket), env))
    assert len(race_last_slot(planners, rounds=50)) == 50
