"""The answer round trip on etcd: two daemons, one cluster prefix."""

from __future__ import annotations

import subprocess
from typing import Any

from integration import answer_flow
from integration.helpers import PYTHON

from .conftest import NO_LOCAL, EtcdDaemon, new_prefix


def agent(e: EtcdDaemon) -> answer_flow.Agent:
    def spawn(*args: str) -> subprocess.Popen:
        env = e.daemon.env(**e.caller_env)
        for name in NO_LOCAL:
            env.pop(name, None)
        return subprocess.Popen([PYTHON, "-m", "agentcoordctl.cli", *args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(e.daemon.base))

    return answer_flow.Agent(ctl=lambda *args: e.ctl(*args), spawn=spawn)


def test_answer_round_trip_between_two_daemons_on_one_etcd(etcd_server: Any, daemon_factory: Any) -> None:
    prefix = new_prefix()
    nodes = []
    for name in ("a", "b"):
        d = daemon_factory(name)
        d.start()
        nodes.append(EtcdDaemon(d, etcd_server.endpoints, prefix))
    one, two = nodes
    answer_flow.register(agent(one), "b1", one.daemon.base)
    latency = answer_flow.round_trip(agent(one), agent(two), "b1")
    print(f"answer round trip on etcd: answer to print {latency * 1000:.0f} ms")
    assert latency < 5
