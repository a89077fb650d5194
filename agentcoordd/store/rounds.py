"""Record calls of a local store on a few threads of its own, in rounds.

Through the shared thread pool every record call costs a hop: a worker woken,
the event loop woken for the result, and GIL hand-offs between them — on two
cores that, not the disk, bounded heartbeats per second. Here a thread takes
*every* call queued since its last round, runs them one after another under
one group commit (each record still written whole and fsynced; each touched
directory fsynced once, at the end of the round) and wakes each event loop
once for the whole round. A caller's result arrives only after its round's
directory fsyncs, so an acknowledged write is durable; when they fail, every
call of the round fails with that error (its writes are not known to be
durable).

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

T = TypeVar("T")

IDLE_SECONDS = 10.0  # a round thread with nothing to do for this long ends


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
    """Up to `threads` round threads for one store; `group_commit()` wraps each round."""

    def __init__(self, group_commit: Callable[[], contextlib.AbstractContextManager[None]], *,
                 threads: int = 4, name: str = "agentcoord-rounds") -> None:
        self._group_commit = group_commit
        self._max_threads = threads
        self._name = name
        self._queued: collections.deque[_Call] = collections.deque()
        self._changed = threading.Condition(threading.Lock())
        self._threads = 0
        self._idle = 0
        self.rounds = 0  # rounds run (benchmarks and tests read it)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): the portable way
            return await anyio.to_thread.run_sync(fn, *args)
        call = _Call(loop, fn, args)
        with self._changed:
            self._queued.append(call)
            self._wake_one()
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
                self._threads -= 1
            raise

    def _next_calls(self) -> list[_Call] | None:
        """The calls of this thread's next round; None when it has been idle too long (and ends)."""
        with self._changed:
            while not self._queued:
                self._idle += 1
                woken = self._changed.wait(IDLE_SECONDS)
                self._idle -= 1
                if not woken and not self._queued:
                    self._threads -= 1
                    return None
            # Share the queue with the other round threads: their fsyncs run in parallel.
            take = -(-len(self._queued) // self._max_threads)
            calls = [self._queued.popleft() for _ in range(take)]
            if self._queued:
                self._wake_one()
            return calls

    def _wake_one(self) -> None:
        """With the lock held: an idle round thread takes the queue, or a new one starts."""
        if self._idle:
            self._changed.notify()
        elif self._threads < self._max_threads:
            self._threads += 1
            threading.Thread(target=self._work, name=self._name, daemon=True).start()

    def _round(self, calls: list[_Call]) -> None:
        self.rounds += 1
        try:
            with self._group_commit():
                for call in calls:
                    try:
                        call.result, call.ok = call.fn(*call.args), True
                    except Exception as exc:  # noqa: BLE001 - the caller's outcome, raised there
                        call.result = exc
        except Exception as exc:  # noqa: BLE001 - the round's directory fsync failed
            for call in calls:
                call.result, call.ok = exc, False
        by_loop: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
        for call in calls:
            by_loop.setdefault(call.loop, []).append(call)
        for loop, settled in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits
                loop.call_soon_threadsafe(_settle, settled)
