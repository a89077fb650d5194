"""Stop requests reach agents: the notice on claim, heartbeat, release and record-event.

After one of those commands succeeded, its handler asks `StopNotices.annotate`
whether the lane's batch has a stop request. The batch id is the request's
(`--batch-id`) or, when the request names none, the stored record's (a
heartbeat keeps its `batch_id`; a release's claim carries it). When
`telemetry.stop_state` says a stop was requested, the JSON payload gains
`stop_requested: true` (and `stop`: requested_at, message, stopped) and the
response a one-line notice for stderr. It never changes the exit code, and a
stop state that cannot be read is not a stop request (no notice, no failure).

Cost (bench/stop_notice.py): `stop_state` lists `events/<batch>/` only; a warm
scan of a local root is a scandir plus cached digests — about 0.2 ms for a
batch of 10 events, 0.5-1 ms for 200, 5-7 ms for 2,000 (a heartbeat itself
takes 2-4 ms). So answers are cached per (backend, batch): on a local root while
the batch's event directory and JSONL file are unchanged (two stats), on a
remote store (HTTP, etcd: a listing round trip) for `CACHE_SECONDS`. Concurrent
misses for one batch share one check (200 agents calling in the same second
after the cache expired make one listing, not 200).
A stop recorded through this daemon (`batch stop`, `record-event --type
batch.stop_requested`, the dashboard) forgets the cached answer at once, so
only a stop written elsewhere can take up to `CACHE_SECONDS` to show.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio

from agentcoordd import protocol as p
from agentcoordd.coord import telemetry
from agentcoordd.coord.context import Ctx
from agentcoordd.daemon.recent import SingleFlight
from agentcoordd.model.errors import CoordError

CHECKED = (p.Claim, p.Heartbeat, p.Release, p.RecordEvent)
RECORD_KEYS = ("claim", "heartbeat", "event")
CACHE_SECONDS = 5.0
STOP_TYPES = (telemetry.STOP_REQUESTED, telemetry.STOPPED)
# `lanes` waits at most this long for every lane's stop check together.
LANES_CHECK_SECONDS = 2.0


def batch_of(request: Any, payload: Any) -> str | None:
    """The batch id the request names, else the stored record's."""
    batch = getattr(request, "batch_id", None)
    if isinstance(batch, str) and batch:
        return batch
    if isinstance(payload, dict):
        for key in RECORD_KEYS:
            record = payload.get(key)
            if isinstance(record, dict) and isinstance(record.get("batch_id"), str) and record["batch_id"]:
                return record["batch_id"]
    return None


class StopNotices:
    """Per-daemon: the stop check and its per-batch cache."""

    def __init__(self, cache_seconds: float = CACHE_SECONDS, clock: Any = time.monotonic) -> None:
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._cache: dict[tuple[Any, str], tuple[float, dict[str, Any], Any]] = {}
        self._flight = SingleFlight()
        self.checks = 0  # for tests and `daemon status`
        self.cache_hits = 0

    def forget(self, batch_id: str) -> None:
        """A stop was just recorded through this daemon: drop cached answers for it."""
        for key in [k for k in self._cache if k[1] == batch_id]:
            del self._cache[key]

    async def state(self, ctx: Ctx, backend_key: Any, batch_id: str) -> dict[str, Any]:
        key = (backend_key, batch_id)
        files = ctx.store.capabilities.files
        # Local roots: an answer stays valid while the batch's event directory and
        # its dashboard JSONL file are unchanged (a new event file changes the
        # directory's mtime) — exact, and independent of how loaded the machine is.
        # Remote stores: a listing is a round trip, so answers live CACHE_SECONDS.
        stamp = files.events_fingerprint(batch_id) if files is not None else None
        hit = self._cache.get(key)
        if hit is not None and hit[0] > self.clock() and hit[2] == stamp:
            self.cache_hits += 1
            return hit[1]
        return await self._flight.do((key, stamp), lambda: self._check(ctx, key, batch_id, stamp))

    async def _check(self, ctx: Ctx, key: tuple[Any, str], batch_id: str, stamp: Any) -> dict[str, Any]:
        self.checks += 1
        state = await telemetry.stop_state(ctx, batch_id)
        self._cache.pop(key, None)
        if self.cache_seconds > 0 and not state.get("error"):
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = (self.clock() + self.cache_seconds, state, stamp)
        return state

    async def annotate_lanes(self, listing: dict[str, Any],
                             backend_of: Callable[[str, str | None], Any],
                             ctx_for: Callable[[Any], Ctx]) -> None:
        """`lanes`: `stop_requested` on every keep-alive lane row (true when its batch has a
        stop request; false otherwise, also when the check could not be made in time).
        `backend_of(agent_id, backend key)` is the lane's selection, `ctx_for` a context on it."""
        answers: dict[tuple[Any, str], bool] = {}
        with anyio.move_on_after(LANES_CHECK_SECONDS):
            for row in listing.get("lanes") or []:
                resolved = backend_of(row.get("agent_id"), row.get("backend"))
                batch = row.get("batch_id")
                if resolved is None or not batch or (resolved.key, batch) in answers:
                    continue
                answers[(resolved.key, batch)] = False
                try:
                    state = await self.state(ctx_for(resolved), resolved.key, batch)
                except (CoordError, OSError):
                    continue  # unreadable: not a stop request
                answers[(resolved.key, batch)] = bool(state.get("stop_requested"))
        for row in listing.get("lanes") or []:
            resolved = backend_of(row.get("agent_id"), row.get("backend"))
            batch = row.get("batch_id")
            row["stop_requested"] = bool(
                resolved is not None and batch and answers.get((resolved.key, batch)))

    async def annotate(self, request: Any, ctx: Ctx, backend_key: Any, payload: Any,
                       notices: list[str]) -> None:
        """Add `stop_requested` and the notice when the lane's batch has a stop request."""
        if isinstance(request, (p.BatchStop, p.BatchStopped)):
            self.forget(request.batch_id)
            return
        if not isinstance(request, CHECKED) or not isinstance(payload, dict):
            return
        if isinstance(request, p.RecordEvent) and request.type in STOP_TYPES:
            self.forget(request.batch_id)
        batch = batch_of(request, payload)
        if batch is None:
            return
        try:
            state = await self.state(ctx, backend_key, batch)
        except CoordError:
            return  # an unsafe id or unreadable listing: not a stop request
        if not state.get("stop_requested"):
            return
        payload["stop_requested"] = True
        payload["stop"] = {k: v for k, v in state.items() if k != "error"}
        line = telemetry.stop_notice(state)
        if line:
            notices.append(line)
