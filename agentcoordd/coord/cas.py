"""The one compare-and-swap read-modify-write loop of coord.

`cas_update(store, path, decide)` reads the record, asks `decide(current)`
what to do, and writes: create-only when nothing was there, else a replace
guarded by the version it read. A lost race (Conflict, NotFound) re-reads and
decides again after a jittered backoff; persistent contention is exit 2.
`decide` returns `Keep(result)` (nothing to write) or `Put(record, result)`;
it may raise (a refusal, a usage error) to end the loop. The blocking twin
drives the same kind of decision inline in a worker thread (the daemon's
batched keep-alive renewals on a local root).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import anyio

from agentcoordd.coord.common import CAS_ATTEMPTS, contention
from agentcoordd.model.backoff import CAS, Backoff
from agentcoordd.store.base import BlockingStore, Conflict, NotFound, Store, Versioned


class Keep(NamedTuple):
    """Write nothing; answer `result`."""

    result: Any


class Put(NamedTuple):
    """Write `record`, then answer `result`."""

    record: dict[str, Any]
    result: Any


Decision = Keep | Put


async def cas_update(store: Store, path: str,
                     decide: Callable[[Versioned | None], Awaitable[Decision]], *,
                     attempts: int = CAS_ATTEMPTS, backoff: Backoff = CAS) -> Any:
    for attempt in range(attempts):
        if attempt:
            await anyio.sleep(backoff.delay(attempt))
        current = await store.get(path)
        decision = await decide(current)
        if isinstance(decision, Keep):
            return decision.result
        try:
            if current is None:
                await store.create(path, decision.record)
            else:
                await store.replace(path, decision.record, current.version)
        except (Conflict, NotFound):
            continue  # lost a race: re-read and decide again
        return decision.result
    raise contention(path)


def cas_update_blocking(store: BlockingStore, path: str,
                        decide: Callable[[Versioned | None], Decision], *,
                        attempts: int = CAS_ATTEMPTS, backoff: Backoff = CAS) -> Any:
    for attempt in range(attempts):
        if attempt:
            time.sleep(backoff.delay(attempt))
        current = store.get_sync(path)
        decision = decide(current)
        if isinstance(decision, Keep):
            return decision.result
        try:
            store.write_sync(path, decision.record, None if current is None else current.version)
        except (Conflict, NotFound):
            continue
        return decision.result
    raise contention(path)
