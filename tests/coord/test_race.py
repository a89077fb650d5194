"""Multi-process race: 16 OS processes claim the same target, 50 rounds, one state root.

Each worker is a separate Python process running a tiny claim loop. The test
writes the round's target to every worker's stdin back to back (so all 16 race
for it), then collects one exit code per worker before starting the next round.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

PROCESSES = 16
ROUNDS = 50
MAX_EXIT_2_SHARE = 0.01

WORKER = textwrap.dedent(
    """
    import datetime as dt
    import sys

    import anyio

    from agentcoordd.coord import claims
    from agentcoordd.coord.context import Ctx
    from agentcoordd.model.errors import CoordError
    from agentcoordd.store.local import LocalStore

    class FixedClock:
        def now(self):
            return dt.datetime(2026, 6, 13, 0, 30, tzinfo=dt.timezone.utc)

    root, agent = sys.argv[1], sys.argv[2]
    store = LocalStore(root)

    async def attempt(target):
        try:
            await claims.claim(Ctx(store, FixedClock()), agent_id=agent, repo="acme/race",
                               target=target, batch_id="race")
        except CoordError as exc:
            return exc.exit_code
        return 0

    print("ready", flush=True)
    for line in sys.stdin:
        target = line.strip()
        print(target, anyio.run(attempt, target), flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sixteen_processes_racing_for_one_target_yield_exactly_one_winner(tmp_path: Path, record_property):
    root = tmp_path / "state"
    root.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    agents = [f"racer-{n:02d}" for n in range(PROCESSES)]
    workers = [
        subprocess.Popen([sys.executable, str(script), str(root), agent],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for agent in agents
    ]
    codes: dict[str, Counter] = {}
    winners: dict[str, str] = {}
    try:
        for worker in workers:
            assert worker.stdout.readline().strip() == "ready"
        for round_no in range(ROUNDS):
            target = f"t{round_no}"
            for worker in workers:
                worker.stdin.write(target + "\n")
                worker.stdin.flush()
            results = {}
            for agent, worker in zip(agents, workers):
                echoed, code = worker.stdout.readline().split()
                assert echoed == target
                results[agent] = int(code)
            codes[target] = Counter(results.values())
            winners[target] = next((a for a, c in results.items() if c == 0), "")
    finally:
        for worker in workers:
            worker.stdin.close()
        for worker in workers:
            worker.wait(timeout=30)
            worker.stdout.close()

    total = Counter()
    for counter in codes.values():
        total.update(counter)
    exit_2 = total[2]
    record_property("race_exit_codes", dict(total))
    record_property("race_exit_2", exit_2)
    print(f"\nrace: {ROUNDS} rounds x {PROCESSES} processes: exit codes {dict(sorted(total.items()))}")

    for target, counter in codes.items():
        assert counter[0] == 1, f"{target}: {dict(counter)}"
        assert set(counter) <= {0, 2, 3}, f"{target}: {dict(counter)}"
        claim = json.loads((root / f"claims/acme/race/{target}.json").read_text())
        assert claim["agent_id"] == winners[target]
    assert total[3] + exit_2 == ROUNDS * (PROCESSES - 1)
    assert exit_2 <= MAX_EXIT_2_SHARE * ROUNDS * PROCESSES

    # exactly one claim.acquired per round, from the winner
    acquired = [json.loads(p.read_text()) for p in (root / "events/race").glob("*.json")]
    assert sorted((e["target"], e["agent_id"]) for e in acquired) == sorted(winners.items())

    # no partial or temp files: every file is a record or its lock
    stray = [p for p in root.rglob("*") if p.is_file() and not p.name.endswith((".json", ".json.lock"))]
    hidden = [p for p in root.rglob(".*")]
    assert stray == [] and hidden == []
