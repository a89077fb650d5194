"""The daemon side of the outbox: queue what a command could not deliver, retry it.

* `queue(undelivered, resolved)` runs after every dispatched command (and
  after a keep-alive lane's end event), before the reply: each event the
  backend did not take is appended (fsync'd) with the request's backend
  *descriptor* (`descriptors.persisted_backend`: kind, location, never a token).
  An append that fails is the command's exit 2 (durable.StateDirError).
* `run()` is the background task: every due entry is retried with its own
  exponential backoff (`Outbox.flush`); a create-only write that answers
  `already_exists` means an earlier try landed, so it counts as delivered.
* An entry's backend is rebuilt from its descriptor with a token from
  `Credentials` (what callers brought, newest first, in memory only) or from
  the machine's configuration (`descriptors.resolve_persisted`). An entry for a
  backend that needs a token nobody has brought since the start *waits*: it is
  not tried (no attempt counted), `outbox` and `doctor` say so, and the first
  call that brings a token for that backend wakes a forced flush. A token
  refused for its scope (403) makes the delivery try the next one.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread

from agentcoordd.daemon import backends
from agentcoordd.daemon.credentials import Credentials
from agentcoordd.daemon.descriptors import needs_token, persisted_backend, resolve_persisted
from agentcoordd.daemon.durable import state_dir_error
from agentcoordd.daemon.outbox import Outbox, OutboxEntry, Waiting
from agentcoordd.store.base import Conflict, Forbidden

POLL_INTERVAL = 1.0  # how often the background task looks for due entries
WAITING_HINT = ("waiting for a token: run any agentcoordctl command (or `agentcoordctl outbox "
                "flush`) with the backend's token in its environment")


class Retrying:
    """An outbox and the task that retries its due entries; a subclass says how one
    entry is delivered (`deliver`). Events (Delivery) and notifications
    (notify.Notifier) each have one, so a slow webhook never delays an event."""

    label = "outbox"

    def __init__(self, outbox: Outbox, log: Any = None) -> None:
        self.outbox = outbox
        self.log = log
        self.delivered = 0
        self.queued = 0
        self._flushing = anyio.Lock()
        self._wake = anyio.Event()
        self._force = False

    async def deliver(self, entry: OutboxEntry) -> None:
        raise NotImplementedError

    def round_started(self) -> None:
        """Called before each flush (a subclass may reset per-round state)."""

    async def flush(self, *, force: bool = False) -> tuple[int, int]:
        async with self._flushing:
            self.round_started()
            delivered, remaining = await self.outbox.flush(self.deliver, force=force)
        self.delivered += delivered
        if delivered:
            self._log("info", f"{self.label} delivered", delivered=delivered, remaining=remaining)
        for warning in self.outbox.warnings:
            self._log("warning", self.label, detail=warning)
        self.outbox.warnings.clear()
        return delivered, remaining

    def wake(self, *, force: bool = False) -> None:
        self._force = self._force or force
        self._wake.set()

    async def run(self) -> None:
        """Retry due entries until cancelled (daemon shutdown); never dies of one failure."""
        while True:
            try:
                if self.outbox.path.exists():
                    force, self._force = self._force, False
                    await self.flush(force=force)
            except Exception:  # noqa: BLE001 - a bug must not stop delivery for good
                self._log("exception", f"{self.label} flush failed")
            with anyio.move_on_after(POLL_INTERVAL):
                await self._wake.wait()
            self._wake = anyio.Event()

    def _log(self, level: str, message: str, **fields: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(message, **fields)


class Delivery(Retrying):
    def __init__(self, *, pool: backends.StorePool, credentials: Credentials, state_dir: str,
                 log: Any = None, on_delivered: Callable[[str, dict[str, Any]], Awaitable[None]]
                 | None = None) -> None:
        super().__init__(Outbox(state_dir), log)
        self.pool = pool
        self.credentials = credentials
        credentials.on_new.append(self._token_arrived)
        # An event delivered late is handed on (notifications: it is this daemon's write).
        self.on_delivered = on_delivered

    # ---- queueing ------------------------------------------------------------------

    async def queue(self, undelivered: list[tuple[str, dict[str, Any]]],
                    resolved: backends.Resolved | None,
                    descriptor: dict[str, Any] | None = None) -> None:
        """Append every undelivered event durably (shielded: a reply never races it).
        Raises StateDirError when one could not be: the command must not answer exit 0
        for an event that is neither in the backend nor on disk."""
        if not undelivered or (resolved is None and descriptor is None):
            return
        backend = descriptor if descriptor is not None else persisted_backend(resolved)  # type: ignore[arg-type]
        if resolved is not None:
            self.credentials.learn(resolved)
        items = list(undelivered)
        undelivered.clear()
        lost: list[str] = []
        failure: OSError | None = None
        with anyio.CancelScope(shield=True):
            for path, record in items:
                try:
                    await anyio.to_thread.run_sync(self.outbox.append, path, record, backend)
                except OSError as exc:
                    lost.append(path)
                    failure = exc
                    self._log("error", "outbox append failed", path=path, error=str(exc))
                    continue
                self.queued += 1
                self._log("info", "event queued in the outbox", path=path,
                          backend=backend.get("key"))
        self._wake.set()
        if failure is not None:
            more = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
            raise state_dir_error(self.outbox.dir, f"event {lost[0]}{more} was not written to the "
                                  "backend and could not be queued in the outbox", failure)

    # ---- delivering -----------------------------------------------------------------

    def selections(self, backend: dict[str, Any]) -> list[backends.Resolved]:
        """Where an entry can be delivered now: callers' tokens first, then the machine's
        configuration; empty when the backend needs a token nobody brought."""
        found = self.credentials.candidates(backend.get("key", ""))
        configured = resolve_persisted(backend)
        if configured.token or not needs_token(configured.kind, configured.user):
            if all(r.token != configured.token for r in found):
                found.append(configured)
        return found

    async def deliver(self, entry: OutboxEntry) -> None:
        await self._create(entry)
        if self.on_delivered is not None:
            await self.on_delivered(entry.path, entry.record)

    async def _create(self, entry: OutboxEntry) -> None:
        candidates = self.selections(entry.backend)
        if not candidates:
            raise Waiting(WAITING_HINT)
        refused: Forbidden | None = None
        for resolved in candidates:
            store = self.pool.get(resolved)
            try:
                await store.create(entry.path, entry.record)
                return
            except Conflict as exc:
                if exc.kind != "already_exists":
                    raise
                return  # create-only: an earlier attempt (or another daemon) already wrote it
            except Forbidden as exc:  # this token's scope (or the token) is refused: try the next
                refused = exc
        assert refused is not None
        raise refused

    def _token_arrived(self, key: str) -> None:
        """A caller brought a token we did not have: deliver what waited for it now."""
        if any(e.backend.get("key") == key for e in self.outbox.entries()):
            self._force = True
            self._wake.set()

    # ---- introspection -----------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        return self._summary(self.outbox.entries())

    def _summary(self, entries: list[OutboxEntry]) -> dict[str, Any]:
        oldest = min((e.queued_at for e in entries), default=None)
        waiting = self._waiting_keys(entries)
        count = sum(1 for e in entries if e.backend.get("key") in waiting)
        out: dict[str, Any] = {
            "path": str(self.outbox.path), "depth": len(entries),
            "oldest_age_seconds": None if oldest is None else round(time.time() - oldest, 3)}
        if count:  # present only when some entries wait (the summary's shape stays otherwise)
            out["waiting_for_token"] = count
            out["hint"] = WAITING_HINT
        return out

    def _waiting_keys(self, entries: list[OutboxEntry]) -> set[str]:
        """Backends (descriptor keys) of these entries that nobody has a token for."""
        backends_by_key = {e.backend.get("key", ""): e.backend for e in entries}
        return {key for key, backend in backends_by_key.items() if not self.selections(backend)}

    def listing(self) -> dict[str, Any]:
        now = time.time()
        entries = self.outbox.entries()
        waiting = self._waiting_keys(entries)
        rows = []
        for e in entries:
            rows.append({
                "kind": "event", "path": e.path, "batch_id": e.record.get("batch_id"), "type": e.record.get("type"),
                "event_id": e.record.get("event_id"), "backend": e.backend.get("key"),
                "age_seconds": round(now - e.queued_at, 3), "attempts": e.attempts,
                "last_error": e.last_error,
                "next_try_in": round(max(0.0, self.outbox.next_try(e) - now), 3),
                "waiting_for_token": e.backend.get("key") in waiting,
            })
        summary = self._summary(entries)
        summary["entries"] = rows
        if self.outbox.quarantine_path.exists():
            summary["quarantine"] = str(self.outbox.quarantine_path)
        return summary
