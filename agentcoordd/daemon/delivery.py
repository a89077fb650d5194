"""The daemon side of the outbox: queue what a command could not deliver, retry it.

* `queue(undelivered, resolved)` runs after every dispatched command (and
  after a keep-alive lane's end event), before the reply: each event the
  backend did not take is appended (fsync'd) with the request's backend
  *descriptor* (`keeper.persisted_backend`: kind, location, never a token).
* `run()` is the background task: every due entry is retried with its own
  exponential backoff (`Outbox.flush`); a create-only write that answers
  `already_exists` means an earlier try landed, so it counts as delivered.
* The backend of an entry is the one the request used when this daemon still
  remembers it (its token stays in memory only); after a restart it is
  rebuilt from the descriptor plus the machine's configuration
  (`keeper.resolve_persisted`), exactly like a resumed keep-alive lane.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anyio

from agentcoordd.daemon import backends
from agentcoordd.daemon.keeper import persisted_backend, resolve_persisted
from agentcoordd.daemon.outbox import Outbox, OutboxEntry
from agentcoordd.store.base import Conflict

if TYPE_CHECKING:
    from agentcoordd.daemon.dispatch import Dispatcher

POLL_INTERVAL = 1.0  # how often the background task looks for due entries


class Delivery:
    def __init__(self, dispatcher: Dispatcher, state_dir: str, *, log: Any = None) -> None:
        self.d = dispatcher
        self.outbox = Outbox(state_dir)
        self.log = log
        self.known: dict[str, backends.Resolved] = {}  # descriptor key -> selection (may hold a token)
        self.delivered = 0
        self.queued = 0
        self._flushing = anyio.Lock()
        self._wake = anyio.Event()

    # ---- queueing ------------------------------------------------------------------

    async def queue(self, undelivered: list[tuple[str, dict[str, Any]]],
                    resolved: backends.Resolved | None, warnings: list[str],
                    descriptor: dict[str, Any] | None = None) -> None:
        """Append every undelivered event durably (shielded: a reply never races it)."""
        if not undelivered or (resolved is None and descriptor is None):
            return
        backend = descriptor if descriptor is not None else persisted_backend(resolved)  # type: ignore[arg-type]
        if resolved is not None:
            self.known[backend["key"]] = resolved
        items = list(undelivered)
        undelivered.clear()
        with anyio.CancelScope(shield=True):
            for path, record in items:
                try:
                    await anyio.to_thread.run_sync(self.outbox.append, path, record, backend)
                except (OSError, ValueError) as exc:
                    message = (f"event {path} could not be queued in the outbox "
                               f"{self.outbox.path}: {getattr(exc, 'strerror', None) or exc}; it is lost")
                    warnings.append(message)
                    self._log("error", "outbox append failed", path=path, error=str(exc))
                    continue
                self.queued += 1
                self._log("info", "event queued in the outbox", path=path,
                          backend=backend.get("key"))
        self._wake.set()

    # ---- delivering -----------------------------------------------------------------

    async def deliver(self, entry: OutboxEntry) -> None:
        resolved = self.known.get(entry.backend.get("key", ""))
        if resolved is None:
            resolved = resolve_persisted(entry.backend)
        store = self.d.pool.get(resolved)
        try:
            await store.create(entry.path, entry.record)
        except Conflict as exc:
            if exc.kind != "already_exists":
                raise
            # create-only: an earlier attempt (or another daemon) already wrote it

    async def flush(self, *, force: bool = False) -> tuple[int, int]:
        async with self._flushing:
            delivered, remaining = await self.outbox.flush(self.deliver, force=force)
        self.delivered += delivered
        if delivered:
            self._log("info", "outbox delivered", delivered=delivered, remaining=remaining)
        for warning in self.outbox.warnings:
            self._log("warning", "outbox", detail=warning)
        self.outbox.warnings.clear()
        return delivered, remaining

    async def run(self) -> None:
        """Retry due entries until cancelled (daemon shutdown); never dies of one failure."""
        while True:
            try:
                if self.outbox.path.exists():
                    await self.flush()
            except Exception:  # noqa: BLE001 - a bug must not stop delivery for good
                self._log("exception", "outbox flush failed")
            with anyio.move_on_after(POLL_INTERVAL):
                await self._wake.wait()
            self._wake = anyio.Event()

    # ---- introspection -----------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        entries = self.outbox.entries()
        oldest = min((e.queued_at for e in entries), default=None)
        return {"path": str(self.outbox.path), "depth": len(entries),
                "oldest_age_seconds": None if oldest is None else round(time.time() - oldest, 3)}

    def listing(self) -> dict[str, Any]:
        now = time.time()
        rows = []
        for e in self.outbox.entries():
            rows.append({
                "path": e.path, "batch_id": e.record.get("batch_id"), "type": e.record.get("type"),
                "event_id": e.record.get("event_id"), "backend": e.backend.get("key"),
                "age_seconds": round(now - e.queued_at, 3), "attempts": e.attempts,
                "last_error": e.last_error,
                "next_try_in": round(max(0.0, Outbox._next_try(e) - now), 3),
            })
        summary = self.summary()
        summary["entries"] = rows
        summary["depth"] = len(rows)
        if self.outbox.quarantine_path.exists():
            summary["quarantine"] = str(self.outbox.quarantine_path)
        return summary

    def _log(self, level: str, message: str, **fields: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(message, **fields)
