"""Record calls of a local store on one thread of its own, in rounds.

Through the shared thread pool every record call costs a hop: a worker woken,
the event loop woken for the result, and GIL hand-offs between them — on two
cores that, not the disk, bounded heartbeats per second. Here the store's
round thread takes *every* call queued since its last round and runs them one
after another inside one group commit (store/commit.py: the round's temp
files fsynced together, then renamed, each touched directory fsynced once),
then wakes each event loop once for the whole round. Calls that arrive during
a round wait for the next one, so the busier the store, the more each round
shares. A caller's result arrives only after its writes are durable; a write
the commit could not make durable fails the call it belongs to.

One thread, not several: their fsyncs overlap inside the commit anyway, and
more threads only added GIL hand-offs (39 context switches per heartbeat with
four threads, 7–12 with one). A round takes at most ROUND_CALLS calls, so the
first of them is not kept waiting for an unbounded number behind it.

A busy record lock is not waited for here (one foreign holder must not stall a
round): the call fails with LockBusy at once and the async caller retries
between rounds, as it does for the pool's threads.

Event loops other than asyncio's fall back to anyio's thread pool.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from agentcoordd.store.base import GroupCommit

T = TypeVar("T")

IDLE_SECONDS = 10.0  # a round thread with nothing to do for this long ends
ROUND_CALLS = 32


class _Call:
    __slots__ = ("args", "fn", "future", "loop", "ok", "result")

    def __init__(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        self.fn = fn
        self.args = args
        self.ok = False
        self.result: Any = None


def _settle(calls: list[_Call]) -> None:
    """In the event loop: hand each call its outcome (a cancelled waiter is gone)."""
    for call in calls:
        if call.future.done():
            continue
        if call.ok:
            call.future.set_result(call.result)
        else:
            call.future.set_exception(call.result)


class Rounds:
    """One round thread for one store (started on demand, ended when idle);
    `commit()` wraps each round; each call's writes are charged to its index."""

    def __init__(self, commit: Callable[[], contextlib.AbstractContextManager[GroupCommit]], *,
                 name: str = "agentcoord-rounds") -> None:
        self._commit = commit
        self._name = name
        self._queued: collections.deque[_Call] = collections.deque()
        self._changed = threading.Condition(threading.Lock())
        self._running = False  # the round thread exists
        self._idle = False  # ... and waits for calls
        self.rounds = 0  # rounds run (benchmarks and tests read it)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): the portable way
            return await anyio.to_thread.run_sync(fn, *args)
        call = _Call(loop, fn, args)
        with self._changed:
            self._queued.append(call)
            if self._idle:
                self._changed.notify()
            elif not self._running:
                self._running = True
                threading.Thread(target=self._work, name=self._name, daemon=True).start()
        # Like a pool thread's call, a started call is waited for even when cancelled:
        # its write may already be on disk, and the caller must not report otherwise.
        with anyio.CancelScope(shield=True):
            result: T = await call.future
        return result

    def _work(self) -> None:
        try:
            while (calls := self._next_calls()) is not None:
                self._round(calls)
        except BaseException:
            with self._changed:
                self._running = False
            raise

    def _next_calls(self) -> list[_Call] | None:
        """The calls queued first (ROUND_CALLS at most); None when idle too long (the
        thread then ends)."""
        with self._changed:
            while not self._queued:
                self._idle = True
                woken = self._changed.wait(IDLE_SECONDS)
                self._idle = False
                if not woken and not self._queued:
                    self._running = False
                    return None
            take = min(len(self._queued), ROUND_CALLS)
            return [self._queued.popleft() for _ in range(take)]

    def _round(self, calls: list[_Call]) -> None:
        self.rounds += 1
        try:
            with self._commit() as commit:
                for index, call in enumerate(calls):
                    commit.owner = index
                    try:
                        call.result, call.ok = call.fn(*call.args), True
                    except Exception as exc:  # noqa: BLE001 - the caller's outcome, raised there
                        call.result = exc
            for index, error in commit.failed.items():
                calls[index].result, calls[index].ok = error, False  # type: ignore[index]
        except Exception as exc:  # noqa: BLE001 - the commit itself broke: no write is known durable
            for call in calls:
                call.result, call.ok = exc, False
        by_loop: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
        for call in calls:
            by_loop.setdefault(call.loop, []).append(call)
        for loop, settled in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits
                loop.call_soon_threadsafe(_settle, settled)
