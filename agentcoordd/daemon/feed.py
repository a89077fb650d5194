"""The live event feed: one source per (backend, batch), shared by every follower.

A `BatchSource` runs in the daemon's task group while someone follows its
batch (and `LINGER` seconds after the last one left, so a reconnecting
follower finds it warm). It listens to the store's change notices (the
`changes` capability: an etcd watch, inotify or a stat poll locally, the Worker listing
poll) and, after each notice, reads the batch once (`coord.feed.read_batch`;
notices that arrive during a read are folded into one more read). New events
are appended to its arrival log; followers (`Follower`) take from that log.
So 100 followers of one batch cost one read per change, not 100 — `reads`
and `ticks` in `daemon status --json` (`feed`) show it.

Order and late arrivals: the backlog a follower starts with is in (at,
ident) order after its cursor; after that, events are delivered in the order
they reached the daemon. An event that arrives with a key at or below the
follower's high-water mark (another machine's clock was behind) is still
delivered, once; the cursor printed with it stays the high-water mark, so
resuming from the last printed cursor repeats nothing. It is marked `late` only
when its `at` is earlier than the high-water mark's: within one second (the
resolution of `at`) the order of ids that are not time-sortable (lane_closed
reservations, JSON Lines paths) says nothing about lateness.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc

from agentcoordd.coord import feed as use
from agentcoordd.coord.context import Ctx
from agentcoordd.model import cursor as cur
from agentcoordd.model import ids
from agentcoordd.model.errors import CoordError

LINGER = 30.0  # seconds a source stays after its last follower left
FALLBACK_POLL = 0.5  # a store without change notices is re-read this often


class BatchSource:
    def __init__(self, store: Any, batch_id: str, clock: Any, log: Any) -> None:
        self.store = store
        self.batch_id = batch_id
        self.clock = clock
        self.log = log
        self.events: list[use.Event] = []  # arrival order
        self._known: set[str] = set()
        self.loaded = anyio.Event()
        self._arrived = anyio.Event()
        self._dirty = anyio.Event()
        self.followers = 0
        self.idle_since = time.monotonic()
        self.reads = 0  # reads of the batch that reached the store
        self.ticks = 0  # change notices received
        self.mechanism = ""
        self.error: str | None = None
        self.scope: anyio.CancelScope | None = None

    def describe(self) -> dict[str, Any]:
        return {"backend": self.store.name, "batch_id": self.batch_id, "followers": self.followers,
                "reads": self.reads, "ticks": self.ticks, "events": len(self.events),
                "mechanism": self.mechanism, "error": self.error}

    async def run(self, on_end: Any, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            with anyio.CancelScope() as self.scope:
                task_status.started()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._watch)
                    tg.start_soon(self._read_loop)
                    tg.start_soon(self._linger, tg.cancel_scope)
        finally:
            on_end(self)

    async def _watch(self) -> None:
        changes = self.store.capabilities.changes
        prefix = ids.events_prefix(self.batch_id)
        while True:
            try:
                async for how in changes.changes(prefix) if changes is not None else _timer():
                    self.mechanism = how
                    self.ticks += 1
                    self._dirty.set()
            except (CoordError, OSError) as exc:
                self.error = f"change detection failed: {exc}"
                self.log.warning("feed change detection failed", batch=self.batch_id, error=str(exc))
            await anyio.sleep(FALLBACK_POLL)
            self._dirty.set()

    async def _read_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()  # a notice during this read means one more read
            await self._read()

    async def _read(self) -> None:
        self.reads += 1
        try:
            events, self.error = await use.read_batch(Ctx(store=self.store, clock=self.clock),
                                                      self.batch_id)
        except (CoordError, OSError) as exc:
            self.error = str(getattr(exc, "message", exc))
            self.loaded.set()  # followers start with what there is (and see the error)
            return
        fresh = [e for e in events if cur.ident(e) not in self._known]
        self._known.update(cur.ident(e) for e in fresh)
        self.events.extend(fresh)
        self.loaded.set()
        if fresh:
            self._arrived.set()
            self._arrived = anyio.Event()

    async def _linger(self, scope: anyio.CancelScope) -> None:
        while True:
            await anyio.sleep(1.0)
            if self.followers == 0 and time.monotonic() - self.idle_since > LINGER:
                scope.cancel()
                return

    async def arrivals(self, index: int, timeout: float) -> bool:
        """Wait up to `timeout` for events past `index` of the log; True when there are."""
        if len(self.events) > index:
            return True
        with anyio.move_on_after(timeout):
            await self._arrived.wait()
        return len(self.events) > index


async def _timer() -> AsyncIterator[str]:
    while True:
        yield "poll"
        await anyio.sleep(FALLBACK_POLL)


class Follower:
    """One reader of a source: its backlog after a cursor, then what arrives."""

    def __init__(self, source: BatchSource, after: cur.Key, filters: use.Filters,
                 from_end: bool = False) -> None:
        self.source = source
        self.high = after
        self.filters = filters
        self.from_end = from_end  # no backlog: only what arrives from now on (the dashboard)
        self._index: int | None = None

    @property
    def cursor(self) -> str:
        return cur.encode(self.high)

    async def backlog(self) -> list[use.Event]:
        await self.source.loaded.wait()
        self._index = len(self.source.events)
        ordered = sorted(self.source.events[:self._index], key=cur.key)
        if self.from_end:
            self.high = max(self.high, cur.key(ordered[-1])) if ordered else self.high
            return []
        rows, self.high = use.events_after(ordered, self.high, self.filters)
        return rows

    async def next(self, timeout: float) -> list[use.Event]:
        """The rows of events that arrived since the last call (maybe none by `timeout`)."""
        assert self._index is not None, "backlog() first"
        if not await self.source.arrivals(self._index, timeout):
            return []
        fresh = self.source.events[self._index:]
        self._index += len(fresh)
        rows = []
        for event in sorted(fresh, key=cur.key):
            k = cur.key(event)
            behind = k <= self.high
            if not behind:
                self.high = k
            if self.filters.shows(event):
                rows.append(use.row(event, self.high, late=behind and k[0] < self.high[0]))
        return rows


class Feed:
    """The daemon's sources, one per (backend, batch)."""

    def __init__(self, *, background: Any, clock: Any, log: Any) -> None:
        self.background = background
        self.clock = clock
        self.log = log
        self._sources: dict[tuple[Any, str], BatchSource] = {}
        self._started: dict[tuple[Any, str], anyio.Event] = {}

    def describe(self) -> dict[str, Any]:
        return {"sources": [s.describe() for s in self._sources.values()]}

    async def _source(self, backend_key: Any, store: Any, batch_id: str) -> BatchSource:
        """The batch's source, counting the caller as a follower (before any await, so a
        lingering source cannot end in between)."""
        key = (backend_key, batch_id)
        source = self._sources.get(key)
        if source is None:
            source = self._sources[key] = BatchSource(store, batch_id, self.clock, self.log)
            source.followers += 1
            started = self._started[key] = anyio.Event()

            def ended(gone: BatchSource) -> None:
                if self._sources.get(key) is gone:
                    del self._sources[key]
                    self._started.pop(key, None)

            try:
                await self.background.start(source.run, ended)
            except BaseException:
                source.followers -= 1
                ended(source)
                started.set()
                raise
            started.set()
        else:
            source.followers += 1
            try:
                await self._started[key].wait()
            except BaseException:
                source.followers -= 1
                raise
        return source

    def follow(self, backend_key: Any, store: Any, batch_id: str, after: cur.Key,
               filters: use.Filters, *, from_end: bool = False) -> Any:
        """`async with feed.follow(...) as follower:` — counted while inside."""
        return _Following(self, backend_key, store, batch_id, after, filters, from_end)


class _Following:
    def __init__(self, feed: Feed, backend_key: Any, store: Any, batch_id: str,
                 after: cur.Key, filters: use.Filters, from_end: bool) -> None:
        self.args = (feed, backend_key, store, batch_id)
        self.after = after
        self.filters = filters
        self.from_end = from_end
        self.source: BatchSource | None = None

    async def __aenter__(self) -> Follower:
        feed, backend_key, store, batch_id = self.args
        self.source = await feed._source(backend_key, store, batch_id)
        return Follower(self.source, self.after, self.filters, self.from_end)

    async def __aexit__(self, *exc: object) -> None:
        assert self.source is not None
        self.source.followers -= 1
        self.source.idle_since = time.monotonic()
