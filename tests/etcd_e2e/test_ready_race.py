"""The claim --next race on a real etcd: 32 agents (ctl processes on two daemons) on a
32-lane pool batch, and on a batch of dependency pairs (tests/integration/ready_race.py);
outcomes checked by reading etcd directly."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from integration.helpers import PYTHON
from integration.ready_race import check_pool_race, pool_manifest, race, register, run_pair_race

from .conftest import NO_LOCAL, EtcdCluster, EtcdDaemon, new_prefix

REPO = "acme/widgets"


def _callers(etcd_server: EtcdCluster, daemon_factory: Any) -> tuple[list[Any], EtcdDaemon]:
    prefix = new_prefix()
    nodes = []
    for name in ("a", "b"):
        d = daemon_factory(name)
        d.start()
        nodes.append(EtcdDaemon(d, etcd_server.endpoints, prefix))
    callers = []
    for node in nodes:
        env = node.daemon.env(**node.caller_env)
        for name in NO_LOCAL:
            env.pop(name, None)
        callers.append(([PYTHON, "-m", "agentcoordctl.cli"], env))
    return callers, nodes[0]


def test_race_32_agents_claim_next_on_32_pool_lanes_etcd(
        etcd_server: EtcdCluster, daemon_factory: Any, short_dir: Path) -> None:
    callers, node = _callers(etcd_server, daemon_factory)
    manifest = pool_manifest("race", REPO, 32)
    register(callers[0], manifest, short_dir)
    check_pool_race(race(callers, "race", [f"agent-{i}" for i in range(32)]), manifest, node.read)


@pytest.mark.slow
def test_race_with_dependencies_never_hands_out_a_blocked_lane_etcd(
        etcd_server: EtcdCluster, daemon_factory: Any, short_dir: Path) -> None:
    callers, node = _callers(etcd_server, daemon_factory)
    manifest = pool_manifest("pairs", REPO, 32, pairs=True)
    register(callers[0], manifest, short_dir)
    run_pair_race(callers, manifest, node.read, agents=32)


def test_ready_and_wait_until_ready_on_etcd(on_etcd: EtcdDaemon, short_dir: Path) -> None:
    manifest = pool_manifest("wr", REPO, 2, pairs=True)
    path = short_dir / "wr.json"
    path.write_text(json.dumps(manifest))
    assert on_etcd.ctl("register-batch", "--file", str(path)).returncode == 0
    view = json.loads(on_etcd.ctl("ready", "--batch-id", "wr", "--json").stdout)
    assert [(row["name"], row["state"]) for row in view["lanes"]] == [("l0", "ready"), ("l1", "blocked")]
    assert on_etcd.ctl("claim", "--next", "--batch-id", "wr", "--agent-id", "w1").returncode == 0
    time.sleep(0.3)  # the waiters' shared classification is up to 0.25 s old
    waiting = on_etcd.ctl("wait", "--until-ready", "--batch-id", "wr", "--agent-id", "w2",
                          "--timeout", "0.5")
    assert waiting.returncode == 2
    assert on_etcd.ctl("release", "--agent-id", "w1", "--repo", REPO, "--target", "t0",
                       "--terminal", "done", "--host", "m1").returncode == 0
    ready_now = on_etcd.ctl("wait", "--until-ready", "--batch-id", "wr", "--agent-id", "w2",
                            "--timeout", "10")
    assert ready_now.returncode == 0 and ready_now.stdout == b"ready: lane l1 of wr is ready for w2\n"
