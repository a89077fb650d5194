"""The answer round trip on the HTTP backend: two machines (two daemons, two
tokens) on one Worker under wrangler dev."""

from __future__ import annotations

import subprocess
import uuid
from typing import Any

from integration import answer_flow


def agent(node: Any) -> answer_flow.Agent:
    def spawn(*args: str) -> subprocess.Popen:
        argv, env = node.argv()
        return subprocess.Popen([*argv, *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=str(node.daemon.base))

    return answer_flow.Agent(ctl=lambda *args: node.ctl(*args), spawn=spawn)


def test_answer_round_trip_between_two_machines_on_one_worker(
        e2e_worker: Any, node_factory: Any) -> None:
    one = node_factory("a", e2e_worker, "m-a")
    two = node_factory("b", e2e_worker, "m-b")
    batch = f"answers-{uuid.uuid4().hex[:8]}"  # the session's Worker is shared between tests
    answer_flow.register(agent(one), batch, one.daemon.base)
    latency = answer_flow.round_trip(agent(one), agent(two), batch)
    print(f"answer round trip over HTTP: answer to print {latency * 1000:.0f} ms")
    assert latency < 10
