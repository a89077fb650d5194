"""Capacity reservations through a real agentcoordd on a local state root
(tests/integration/capacity_flow.py; the Worker and etcd run the same flows)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from integration.capacity_flow import race_last_slot, replay_retry_conflict_and_refusals
from integration.helpers import Daemon


def test_retry_conflict_and_refusals_replay_through_ctl(daemon: Daemon) -> None:
    replay_retry_conflict_and_refusals(daemon.ctl, {})


@pytest.mark.timeout(600)
def test_race_16_planners_50_rounds_for_the_last_slot_local(daemon_factory: Any) -> None:
    """Two daemons on one root (two processes, one flock per record): one winner a round."""
    first, second = daemon_factory("a"), daemon_factory("b")
    second.root = first.root
    first.start()
    second.start()
    planners = [(str(d.socket), d.env(AGENT_COORD_MACHINE_ID="planner-box")) for d in (first, second)]
    rounds = race_last_slot(planners, rounds=50)
    assert len(rounds) == 50


def test_refusal_is_one_line_exit_4_and_config_show_reports_it(daemon: Daemon) -> None:
    env = {"AGENT_COORD_MACHINE_ID": "planner-box"}
    assert daemon.ctl("capacity", "profile", "p1", "--max-concurrency", "1", env=env).returncode == 0
    assert daemon.ctl("capacity", "inbox", "in1", "--profile", "p1", env=env).returncode == 0
    base = ["reserve", "--profile", "p1", "--inbox", "in1", "--batch-id", "b",
            "--owner-id", "o", "--instance-id", "i"]
    assert daemon.ctl(*base, "--id", "r1", "--lane", "b:one", env=env).returncode == 0
    refused = daemon.ctl(*base, "--id", "r2", "--lane", "b:two", env=env)
    assert refused.returncode == 4
    assert refused.stdout == b""
    assert refused.stderr.decode().splitlines() == [
        "RESERVATION_REFUSED: not enough capacity (all-or-nothing)"]
    codes = json.loads(daemon.ctl("config", "show", "--json").stdout)["exit_codes"]
    assert codes["reservation_refused"] == 4


def test_reserve_without_a_machine_id_is_a_usage_error(daemon: Daemon) -> None:
    done = daemon.ctl("reserve", "--id", "r1", "--profile", "p1", "--inbox", "in1",
                      "--batch-id", "b", "--owner-id", "o", "--instance-id", "i", "--lane", "b:x",
                      unset=("AGENT_COORD_MACHINE_ID",))
    assert done.returncode == 1
    assert done.stderr.decode().strip().endswith("set AGENT_COORD_MACHINE_ID")


def test_reserve_without_a_lane_is_a_usage_error(daemon: Daemon) -> None:
    done = daemon.ctl("reserve", "--id", "r1", "--profile", "p1", "--inbox", "in1",
                      "--batch-id", "b", "--owner-id", "o", "--instance-id", "i",
                      env={"AGENT_COORD_MACHINE_ID": "planner-box"})
    assert (done.returncode, done.stderr.decode()) == (
        1, "missing required --lane (see 'agentcoordctl reserve -h')\n")
