"""Reads shared between concurrent callers: single flight, and pollers' recent reads.

Hundreds of agents running `wait --until-unblocked` on one batch each poll the
same manifest and the same few dependency records. Within `MAX_AGE` seconds a
record read by one poller answers the others, and a read already in flight is
awaited instead of repeated. Only pollers get this view (dispatch's
`shared_reads` routes): a decision that writes always reads the store itself.
Errors are never shared: the next caller reads again. A command of this daemon
that writes makes them forget everything read before it finished (Call.wrote):
a caller's next poll sees its own writes; another machine's take up to MAX_AGE.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from agentcoordd.store.base import Capabilities, Page, Versioned

T = TypeVar("T")

MAX_AGE = 0.25
MAX_ENTRIES = 4096


class SingleFlight:
    """Concurrent callers with one key share one call; a failure is not shared
    (each waiter of a failed call makes its own)."""

    def __init__(self) -> None:
        self._calls: dict[Any, tuple[anyio.Event, list[Any]]] = {}

    async def do(self, key: Any, call: Callable[[], Awaitable[T]]) -> T:
        while (running := self._calls.get(key)) is not None:
            done, result = running
            await done.wait()
            if result:
                return result[0]
        done, result = anyio.Event(), []
        self._calls[key] = (done, result)
        try:
            value = await call()
            result.append(value)
            return value
        finally:
            del self._calls[key]
            done.set()


class SharedResults:
    """Concurrent callers computing the same answer from one store's reads (a batch's
    `ready` classification) share it for `max_age`: one computation per tick, however
    many pollers. A failure is not shared."""

    def __init__(self, *, max_age: float = MAX_AGE, timer: Callable[[], float] = time.monotonic) -> None:
        self.max_age = max_age
        self.timer = timer
        self._fresh: dict[Any, tuple[float, Any]] = {}
        self._flight = SingleFlight()
        self.computed = 0  # for tests and benchmarks
        # Bumped by forget(): answers begun before it are neither cached nor joined.
        self.epoch = 0

    async def share(self, key: Any, compute: Callable[[], Awaitable[T]]) -> T:
        hit = self._fresh.get(key)
        if hit is not None and self.timer() - hit[0] < self.max_age:
            return hit[1]
        return await self._flight.do((self.epoch, key), lambda: self._compute(key, compute))

    async def _compute(self, key: Any, compute: Callable[[], Awaitable[T]]) -> T:
        self.computed += 1
        epoch = self.epoch
        value = await compute()
        if epoch == self.epoch:
            if len(self._fresh) >= MAX_ENTRIES:
                self._fresh.clear()
            self._fresh[key] = (self.timer(), value)
        return value

    def forget(self) -> None:
        self.epoch += 1
        self._fresh.clear()


class SharedReads:
    """A store whose `get` answers from a read younger than `max_age` when it can;
    `results` shares whole answers computed from those reads the same way."""

    def __init__(self, store: Any, *, max_age: float = MAX_AGE,
                 timer: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.max_age = max_age
        self.timer = timer
        self._fresh: dict[str, tuple[float, Versioned | None]] = {}
        self._listed: dict[tuple[str, str, int | None, str | None], tuple[float, Page]] = {}
        self._flight = SingleFlight()
        self.reads = 0  # reads that reached the store (for tests and benchmarks)
        self.results = SharedResults(max_age=max_age, timer=timer)

    async def get(self, path: str) -> Versioned | None:
        hit = self._fresh.get(path)
        if hit is not None and self.timer() - hit[0] < self.max_age:
            return hit[1]
        return await self._flight.do((self.results.epoch, path), lambda: self._read(path))

    async def _read(self, path: str) -> Versioned | None:
        self.reads += 1
        epoch = self.results.epoch
        value = await self.store.get(path)
        if epoch == self.results.epoch:  # not begun before a write of this daemon
            if len(self._fresh) >= MAX_ENTRIES:
                self._prune()
            self._fresh[path] = (self.timer(), value)
        return value

    def forget(self) -> None:
        """This daemon wrote to the store: reads made before are not shared any more."""
        self.results.forget()  # bumps the epoch this view shares
        self._fresh.clear()
        self._listed.clear()

    def _prune(self) -> None:
        now = self.timer()
        for key, (at, _) in list(self._fresh.items()):
            if now - at >= self.max_age:
                del self._fresh[key]
        if len(self._fresh) >= MAX_ENTRIES:
            self._fresh.clear()

    # The rest of the Store protocol goes to the store itself (writes never share).

    @property
    def name(self) -> str:
        return self.store.name

    @property
    def capabilities(self) -> Capabilities:
        return self.store.capabilities

    async def create(self, path: str, data: Any) -> str:
        return await self.store.create(path, data)

    async def replace(self, path: str, data: Any, version: str) -> str:
        return await self.store.replace(path, data, version)

    async def delete(self, path: str, version: str) -> None:
        await self.store.delete(path, version)

    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Page:
        """Listings are shared like gets (`wait --until-answered` lists a batch's
        recent events; waiters of one batch use one cursor, coord.answers)."""
        key = ("list", prefix, limit, cursor)
        hit = self._listed.get(key)
        if hit is not None and self.timer() - hit[0] < self.max_age:
            return hit[1]
        return await self._flight.do((self.results.epoch, key), lambda: self._list(key))

    async def _list(self, key: tuple[str, str, int | None, str | None]) -> Page:
        self.reads += 1
        epoch = self.results.epoch
        page = await self.store.list(key[1], key[2], key[3])
        if epoch == self.results.epoch:
            if len(self._listed) >= MAX_ENTRIES:
                self._listed.clear()
            self._listed[key] = (self.timer(), page)
        return page

    async def aclose(self) -> None:
        await self.store.aclose()


class RecentReads:
    """One SharedReads view per backend store of the daemon's pool."""

    def __init__(self) -> None:
        self._views: dict[int, SharedReads] = {}

    def reads_of(self, store: Any) -> SharedReads:
        view = self._views.get(id(store))
        if view is None or view.store is not store:
            view = self._views[id(store)] = SharedReads(store)
        return view

    def forget(self, store: Any) -> None:
        """After this daemon wrote to `store` (Call.wrote)."""
        view = self._views.get(id(store))
        if view is not None and view.store is store:
            view.forget()
