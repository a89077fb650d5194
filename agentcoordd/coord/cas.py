"""The one compare-and-swap read-modify-write loop of coord.

`cas_update(store, path, decide)` reads the record, asks `decide(current)`
what to do, and writes: create-only when nothing was there, else a replace
guarded by the version it read. A lost race (Conflict, NotFound) re-reads and
decides again after a jittered backoff; persistent contention is exit 2.
`decide` returns `Keep(result)` (nothing to write) or `Put(record, result)`;
it may raise (a refusal, a usage error) to end the loop. A plain-function
`decide` (one that awaits nothing) on a local root runs read, decision and
write in one of the store's write rounds, under the record's lock. The
blocking twin does the same inline in a worker thread (the daemon's batched
keep-alive renewals on a local root).
"""

from __future__ import annotations

import inspect
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


_LOST = object()  # an attempt lost a race: re-read and decide again


async def cas_update(store: Store, path: str,
                     decide: Callable[[Versioned | None], Decision | Awaitable[Decision]], *,
                     attempts: int = CAS_ATTEMPTS, backoff: Backoff = CAS) -> Any:
    """`decide` may be a plain function: on a store with blocking calls (local files)
    the read, the decision and the write then run in one of the store's rounds,
    under the record's lock, so no writer that honours the lock can race them."""
    blocking = store.capabilities.blocking
    if blocking is not None and not inspect.iscoroutinefunction(decide):
        return await blocking.in_round(cas_update_blocking, blocking, path, decide)
    for attempt in range(attempts):
        if attempt:
            await anyio.sleep(backoff.delay(attempt))
        current = await store.get(path)
        decision = decide(current)
        if inspect.isawaitable(decision):
            decision = await decision
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
                        decide: Callable[[Versioned | None], Decision]) -> Any:
    """Read, decide and write under the record's lock (one attempt is enough: a writer
    that honours the lock — this daemon, agent-coord — cannot slip in between)."""
    def locked(current: Versioned | None) -> tuple[Any, Any]:
        decision = decide(current)
        return (None if isinstance(decision, Keep) else decision.record), decision.result

    return store.update_sync(path, locked)
