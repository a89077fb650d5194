"""The durable event outbox: events the backend could not take, retried until delivered.

One JSON object per line in `<state-dir>/outbox.jsonl`, appended with fsync
before the command that produced the event answers (an append that fails —
a full disk — is cut back off and raised: that command is exit 2). Each line carries the
event's final path and record (create-only writes make a retry idempotent:
`already_exists` means delivered) and the backend *selection* it belongs to —
never a token. A line that does not parse is moved to `outbox.quarantine`
with a warning and never blocks the rest. Delivered lines are dropped by an
atomic rewrite (temp file + fsync + rename). Every change holds a thread lock
and an flock on `outbox.jsonl.lock`, so processes sharing the state dir (a
second daemon, a test, an operator's tool) never lose each other's lines.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from agentcoordd.model.backoff import OUTBOX, Backoff
from agentcoordd.store.files import locked_file, replace_private, write_all



class Waiting(Exception):
    """`deliver` cannot try this entry yet (no token for its backend): not an attempt."""


class OutboxEntry(msgspec.Struct, frozen=True):
    path: str
    record: dict[str, Any]
    backend: dict[str, Any]  # the selection descriptor (kind, url/root, token hash)
    queued_at: float
    attempts: int = 0
    last_error: str | None = None
    # When the last failed attempt ended: the backoff counts from there (None: never tried).
    last_try_at: float | None = None
    # Notification entries (daemon/notify.py): the configured signal the event matched.
    signal: str | None = None


_decoder = msgspec.json.Decoder(OutboxEntry)
_encoder = msgspec.json.Encoder()


class Outbox:
    """Append-only on disk; all mutations under one lock (daemon threads and loop)."""

    def __init__(self, state_dir: str | os.PathLike[str], clock: Callable[[], float] = time.time,
                 *, name: str = "outbox", backoff: Backoff = OUTBOX) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / f"{name}.jsonl"
        self.quarantine_path = self.dir / f"{name}.quarantine"
        self.clock = clock
        self.backoff = backoff
        self._lock = threading.Lock()
        self.warnings: list[str] = []

    def append(self, path: str, record: dict[str, Any], backend: dict[str, Any], *,
               signal: str | None = None) -> OutboxEntry:
        if any("token" in k.lower() and k != "token_hash" for k in backend):
            raise ValueError("outbox entries never carry a token")
        entry = OutboxEntry(path, record, backend, self.clock(), signal=signal)
        line = _encoder.encode(entry) + b"\n"
        with self._locked():
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                # A torn last line (crash mid-append) must not swallow this one.
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line
                try:
                    write_all(fd, line)
                except OSError:  # a full disk: leave no torn line behind
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)
                    raise
            finally:
                os.close(fd)
        return entry

    def entries(self) -> list[OutboxEntry]:
        """Every parseable entry; bad lines are quarantined (once) with a warning."""
        with self._locked():
            good, bad = self._read()
            if bad:
                self._quarantine(bad)
                self._rewrite(good)
            return good

    def depth(self) -> int:
        return len(self.entries())

    def oldest_age(self) -> float | None:
        entries = self.entries()
        return self.clock() - min(e.queued_at for e in entries) if entries else None

    async def flush(
        self, deliver: Callable[[OutboxEntry], Awaitable[None]], *, now: float | None = None, force: bool = False
    ) -> tuple[int, int]:
        """Try every due entry once; returns (delivered, still queued).

        `deliver` raises on failure; an entry backs off exponentially per attempt
        unless `force` (the `outbox flush` command).
        """
        delivered: set[tuple[str, float]] = set()
        retried: dict[tuple[str, float], OutboxEntry] = {}
        moment = self.clock() if now is None else now
        for entry in self.entries():
            if not force and moment < self.next_try(entry):
                continue
            try:
                await deliver(entry)
            except Waiting:
                continue  # untouched: no attempt was made
            except Exception as exc:  # noqa: BLE001 - any failure means "retry later"
                message = getattr(exc, "message", None) or repr(exc)
                retried[(entry.path, entry.queued_at)] = msgspec.structs.replace(
                    entry, attempts=entry.attempts + 1, last_error=message[:500],
                    last_try_at=self.clock(),
                )
                continue
            delivered.add((entry.path, entry.queued_at))
        with self._locked():
            good, bad = self._read()
            if bad:
                self._quarantine(bad)
            # Lines appended while we were delivering are kept as they are.
            remaining = [
                retried.get((e.path, e.queued_at), e)
                for e in good
                if (e.path, e.queued_at) not in delivered
            ]
            if bad or delivered or retried:
                self._rewrite(remaining)
        return len(delivered), len(remaining)

    def next_try(self, entry: OutboxEntry) -> float:
        """After k failed attempts: the k-th backoff pause after the last one (capped)."""
        since = entry.queued_at if entry.last_try_at is None else entry.last_try_at
        return since + self.backoff.delay(entry.attempts)

    # ---- file handling (callers hold the lock) --------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Any:
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            with locked_file(self.path):
                yield

    def _read(self) -> tuple[list[OutboxEntry], list[bytes]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return [], []
        good: list[OutboxEntry] = []
        bad: list[bytes] = []
        for line in raw.splitlines():
            if not line.strip():
                continue
            try:
                good.append(_decoder.decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError):
                bad.append(line)
        return good, bad

    def _quarantine(self, lines: list[bytes]) -> None:
        fd = os.open(self.quarantine_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            write_all(fd, b"".join(line + b"\n" for line in lines))
        finally:
            os.close(fd)
        self.warnings.append(
            f"outbox: quarantined {len(lines)} unreadable line(s) to {self.quarantine_path}"
        )

    def _rewrite(self, entries: list[OutboxEntry]) -> None:
        # (a dead writer's temp file is swept at daemon start, never a live one's)
        replace_private(self.path, b"".join(_encoder.encode(e) + b"\n" for e in entries))
