"""What the stop check adds to a heartbeat (issue 11), in-process.

The daemon checks `telemetry.stop_state(batch)` after every claim, heartbeat,
release and record-event whose batch is known. This measures, over
`CachingStore(LocalStore(root))` as the daemon opens it, the median time of

* a heartbeat (the use case alone), and
* the stop check for its batch, warm (the daemon is long-lived),

for batches of 10, 200 and 2,000 events, without and with a stop request
and with a local `events/batches/<id>.jsonl` file (the dashboard form).

    .venv/bin/python bench/stop_notice.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentcoordd.coord import telemetry  # noqa: E402
from agentcoordd.coord.context import Ctx  # noqa: E402
from agentcoordd.coord.events import write_event  # noqa: E402
from agentcoordd.coord.heartbeats import heartbeat  # noqa: E402
from agentcoordd.daemon.clock import SystemClock  # noqa: E402
from agentcoordd.model.identity import Identity  # noqa: E402
from agentcoordd.store.cache import CachingStore  # noqa: E402
from agentcoordd.store.local import LocalStore  # noqa: E402


async def median_ms(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def case(root: Path, events: int, *, stop: bool, jsonl: bool, rounds: int) -> tuple[float, float]:
    ctx = Ctx(store=CachingStore(LocalStore(root)), clock=SystemClock(),
              identity=Identity(machine_id="bench"))
    batch = f"b{events}{'s' if stop else ''}{'j' if jsonl else ''}"
    for i in range(events):
        await write_event(ctx, batch, {"type": "heartbeat", "lane": f"l{i % 50}", "agent_id": "a"})
    if stop:
        await telemetry.request_stop(ctx, batch_id=batch, message="bench")
    if jsonl:
        path = root / "events" / "batches" / f"{batch}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(
            f'{{"type": "heartbeat", "event_id": "j{i}", "timestamp": "2026-06-19T20:00:00Z"}}\n'
            for i in range(events)))
    await telemetry.stop_state(ctx, batch)  # warm the cache, as a long-lived daemon has

    async def beat() -> None:
        await heartbeat(ctx, agent_id="agent-a", repo="acme/w", target="1", batch_id=batch)

    async def check() -> None:
        state = await telemetry.stop_state(ctx, batch)
        assert state["stop_requested"] is stop

    return await median_ms(beat, rounds), await median_ms(check, rounds)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    print(f"{'events':>7} {'stop':>5} {'jsonl':>5} {'heartbeat ms':>13} {'stop check ms':>14} {'added':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for events in (10, 200, 2000):
            for stop, jsonl in ((False, False), (True, False), (False, True)):
                root = Path(tmp) / f"r{events}{stop}{jsonl}"
                root.mkdir()
                beat, check = await case(root, events, stop=stop, jsonl=jsonl, rounds=args.rounds)
                print(f"{events:>7} {str(stop):>5} {str(jsonl):>5} {beat:>13.3f} {check:>14.3f} "
                      f"{check / beat * 100:>5.0f}%")


if __name__ == "__main__":
    asyncio.run(main())
