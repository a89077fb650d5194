"""One agent of a history run (`python -m sim history`): a loop of claim, fenced writes,
heartbeats and release on random targets, recording every call (sim/history.py).

    python -m sim.chaos_agent CONFIG.json AGENT INCARNATION

Requests go over the daemon's socket with ctl's client library (what `agentcoordctl`
sends), so a call costs a round trip, not an interpreter start-up. Each call is
written to the agent's history file twice: an `invoke` line before it is sent and a
`return` line when it ends — a process killed in between leaves only the first (an
unknown outcome). Plain claims with the agent's own short heartbeats, no keep-alive:
an agent that is SIGSTOPped while holding loses its claim to a takeover once its
heartbeat is dead, and its fenced writes after SIGCONT must be refused.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from agentcoordctl import client
from agentcoordd import protocol as p
from sim.history import BEAT, GRANT, OK, REFUSED, RELEASE, UNKNOWN, WRITE

EVENT_TYPE = "hist.write"


class Agent:
    def __init__(self, config: dict[str, Any], name: str, incarnation: int) -> None:
        self.config = config
        self.name = name
        self.prefix = f"{name}:{incarnation}"
        self.rng = random.Random(f"{config['seed']}:{name}:{incarnation}")
        machine = config["machines"][config["placement"][name]]
        self.socket = machine["socket"]
        self.env = machine["env"]
        self.history = open(Path(config["history_dir"]) / f"{name}.jsonl", "a", buffering=1)  # noqa: SIM115
        self.seq = 0

    def call(self, kind: str, target: str, message: Any, token: int | None = None) -> tuple[str, Any]:
        """Send one request, recording it; (outcome, response or None)."""
        self.seq += 1
        op_id = f"{self.prefix}:{self.seq}"
        if kind == WRITE:
            message.message = op_id  # the event carries its op id: the final state is checked
        self._log({"phase": "invoke", "id": op_id, "agent": self.name, "kind": kind,
                   "target": target, "t": time.monotonic(), "token": token})
        message.caller = p.Caller(env=self.env, cwd="/", pid=os.getpid())
        try:
            response, _ = client.request(message, timeout=self.config["call_timeout"],
                                         autostart=False, path=self.socket)
        except client.ClientError:
            self._log({"phase": "return", "id": op_id, "t": time.monotonic(), "outcome": UNKNOWN})
            return UNKNOWN, None
        code = response.exit_code
        outcome = OK if code == 0 else REFUSED if code in (1, 3) else UNKNOWN
        row: dict[str, Any] = {"phase": "return", "id": op_id, "t": time.monotonic(),
                               "outcome": outcome, "exit": code}
        if kind == GRANT and code == 0 and isinstance(response.payload, dict):
            row["token"] = response.payload["claim"].get("fencing_token")
            row["action"] = response.payload.get("action")
        self._log(row)
        return outcome, response

    def _log(self, row: dict[str, Any]) -> None:
        self.history.write(json.dumps(row) + "\n")

    def run(self, quota: int) -> None:
        c = self.config
        repo, batch, hb_ttl = c["repo"], c["batch_id"], c["hb_ttl"]
        while self.seq < quota:
            target = str(self.rng.randrange(c["targets"]))
            outcome, response = self.call(GRANT, target, p.Claim(
                agent_id=self.name, repo=repo, target=target, batch_id=batch, ttl=c["claim_ttl"]))
            if outcome != OK:
                time.sleep(self.rng.uniform(0.0, 0.05))
                continue
            token = response.payload["claim"]["fencing_token"]
            for step in range(self.rng.randint(1, 4)):
                if self.seq >= quota:
                    break
                if step == 0 or self.rng.random() < 0.4:  # a beat first: it is the claim's evidence
                    self.call(BEAT, target, p.Heartbeat(
                        agent_id=self.name, repo=repo, target=target, batch_id=batch, ttl=hb_ttl,
                        fencing_token=token), token)
                else:
                    self.call(WRITE, target, p.RecordEvent(
                        batch_id=batch, type=EVENT_TYPE, agent_id=self.name, repo=repo,
                        target=target, fencing_token=token), token)
                time.sleep(self.rng.uniform(0.0, 0.05))
            self.call(RELEASE, target, p.Release(agent_id=self.name, repo=repo, target=target,
                                                 fencing_token=token), token)


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    name, incarnation = sys.argv[2], int(sys.argv[3])
    agent = Agent(config, name, incarnation)
    done = _done_so_far(Path(config["history_dir"]) / f"{name}.jsonl")
    agent.seq = done  # ids stay unique per incarnation; the quota counts every call
    agent.run(config["quota"])


def _done_so_far(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if '"invoke"' in line)
    except FileNotFoundError:
        return 0


if __name__ == "__main__":
    main()
