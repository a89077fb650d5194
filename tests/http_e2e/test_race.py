"""Two machines (two daemons, two sockets, two tokens) race claims on the same
targets through the Worker: exactly one winner per round, and the record
names the winner and the winner's machine.

The 200-round race sends each claim the way ctl does (`agentcoordctl.client.
request`: hello + Claim frame on the daemon's socket, the caller's env with
AGENT_COORD_API_URL/TOKEN), from threads, so the round count fits the time
budget on a 2-core box (400 ctl interpreters alone take ~70 s there); a
shorter race runs real ctl subprocesses.
"""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from agentcoordctl import client
from agentcoordd import protocol as p

ROUNDS = 200
CTL_ROUNDS = 24
PARALLEL_ROUNDS = 8


def _stored(worker: Any, repo: str) -> dict[str, Any]:
    listing = httpx.get(f"{worker.url}/v1/state", params={"prefix": f"claims/{repo}", "limit": "1000"},
                        headers={"Authorization": f"Bearer {worker.tokens['ops']}"}, timeout=30)
    listing.raise_for_status()
    return {e["path"]: e for e in listing.json()["entries"]}


def _check(rounds: list[list[tuple[str, str, int, str]]], stored: dict[str, Any], repo: str) -> dict[str, int]:
    """Exactly one winner per round: one stored claim (version 1, never overwritten)
    naming one of the two agents; never two exit-0s; a refusal (exit 3) names
    that holder. Exit 2 (UNKNOWN: the backend did not confirm in time) is an
    honest answer under load, not a grant: allowed in at most 2% of rounds,
    and only when the record still shows exactly one holder."""
    wins = {"m-a": 0, "m-b": 0}
    unknown = []
    assert len(stored) == len(rounds)
    for i, results in enumerate(rounds):
        entry = stored[f"claims/{repo}/t{i}.json"]
        holder, machine = entry["data"]["agent_id"], entry["updated_by"]
        assert entry["version"] == 1, (i, entry)  # one create, never overwritten
        assert (holder, machine) in {(ag, m) for m, ag, _, _ in results}, (i, entry, results)
        codes = sorted(code for _, _, code, _ in results)
        assert codes.count(0) <= 1, f"double grant in round {i}: {results}"
        assert set(codes) <= {0, 2, 3}, (i, results)
        for m, ag, code, error in results:
            if code == 0:
                assert (ag, m) == (holder, machine), (i, results, entry)
            elif code == 3:
                assert f"held by {holder}" in error, (i, error)
        if 2 in codes:
            unknown.append((i, results))
        else:
            assert codes == [0, 3], (i, results)
        wins[machine] += 1
    if unknown:
        print(f"\n{len(unknown)} round(s) with an UNKNOWN (exit 2) answer: {unknown[:3]}")
    assert len(unknown) <= len(rounds) // 50, f"{len(unknown)} UNKNOWN rounds: {unknown[:5]}"
    return wins


def _wire_claim(node: Any, machine: str, agent: str, repo: str, target: str,
                gate: threading.Barrier) -> tuple[str, str, int, str]:
    message = p.Claim(agent_id=agent, repo=repo, target=target)
    env = {**node.daemon.env(**node.env())}
    env.pop("AGENT_COORD_STATE_ROOT", None)
    message.caller = client.caller(env)
    gate.wait(10)
    response, _ = client.request(message, timeout=30, autostart=False, env=env,
                                 path=str(node.daemon.socket))
    return machine, agent, response.exit_code, response.error or ""


def test_two_daemons_racing_claims_get_exactly_one_winner_per_round(
        e2e_worker: Any, node_factory: Any, repo: str) -> None:
    a = node_factory("a", e2e_worker, "m-a")
    b = node_factory("b", e2e_worker, "m-b")

    def one_round(i: int) -> list[tuple[str, str, int, str]]:
        gate = threading.Barrier(2)
        with ThreadPoolExecutor(2) as pair:
            futures = [pair.submit(_wire_claim, a, "m-a", "a-codex", repo, f"t{i}", gate),
                       pair.submit(_wire_claim, b, "m-b", "b-claude", repo, f"t{i}", gate)]
            return [f.result() for f in futures]

    started = time.monotonic()
    with ThreadPoolExecutor(PARALLEL_ROUNDS) as pool:
        rounds = list(pool.map(one_round, range(ROUNDS)))
    took = time.monotonic() - started
    wins = _check(rounds, _stored(e2e_worker, repo), repo)
    print(f"\n{ROUNDS} wire rounds in {took:.1f}s; wins {wins}")
    assert took < 60, f"race took {took:.1f}s"


def _ctl_race(contenders: list[tuple[Any, str, str]], repo: str, target: str) -> list[tuple[str, str, int, str]]:
    procs = []
    for node, machine, agent in contenders:
        argv, env = node.argv()
        procs.append((machine, agent, subprocess.Popen(
            [*argv, "claim", "--agent-id", agent, "--repo", repo, "--target", target],
            env=env, cwd=str(node.daemon.base), stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
    results = []
    for machine, agent, proc in procs:
        _, stderr = proc.communicate(timeout=60)
        results.append((machine, agent, proc.returncode, stderr.decode()))
    return results


def test_two_daemons_racing_ctl_claims_get_exactly_one_winner_per_round(
        e2e_worker: Any, node_factory: Any, repo: str) -> None:
    a = node_factory("a", e2e_worker, "m-a")
    b = node_factory("b", e2e_worker, "m-b")
    contenders = [(a, "m-a", "a-codex"), (b, "m-b", "b-claude")]
    with ThreadPoolExecutor(PARALLEL_ROUNDS) as pool:
        # alternate who is launched first so neither side always has a head start
        rounds = list(pool.map(
            lambda i: _ctl_race(contenders[::1 if i % 2 else -1], repo, f"t{i}"), range(CTL_ROUNDS)))
    _check(rounds, _stored(e2e_worker, repo), repo)
