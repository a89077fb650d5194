"""Exit 0 means durable: what the daemon promises but the backend does not hold yet.

Three things a command can answer exit 0 for before the backend has them: an
event in the outbox (`outbox.jsonl`), a notification in its outbox
(`notifications.jsonl`), a keep-alive lane in the registry (`lanes.json`). Each
is fsynced in the daemon's state directory before the reply; when it cannot be
(ENOSPC, EIO, EROFS, …) the command is exit 2 with `StateDirError`, naming the
directory. Nothing is kept failing: the next write tries again, so the daemon
recovers by itself once the directory can take writes.

`Saves` is the registry's side: whole-file saves coalesced in the background,
and `durable()` for a caller that must not answer before its change is on disk
(one save covers every change made before it started).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread

from agentcoordd.model.errors import OperationalError

T = TypeVar("T")

_PLAIN = {errno.ENOSPC: "is full", errno.EDQUOT: "is over its quota", errno.EROFS: "is read-only",
          errno.EIO: "has an I/O error", errno.EFBIG: "cannot take a file that large"}


class StateDirError(OperationalError):
    """The daemon's state directory did not take a write that an exit 0 would promise."""


def _os_error(exc: Exception) -> OSError:
    return exc if isinstance(exc, OSError) else OSError(errno.EINVAL, str(exc))


def state_dir_error(directory: str | os.PathLike[str], what: str, exc: OSError) -> StateDirError:
    reason = exc.strerror or str(exc)
    plain = _PLAIN.get(exc.errno or 0)
    return StateDirError(
        f"{what}: agentcoordd's state directory {os.fspath(directory)} "
        f"{plain + ' (' + reason + ')' if plain else 'failed: ' + reason}; free space or fix it "
        "and run the command again")


class Saves(Generic[T]):
    """Coalesced whole-file saves of `snapshot()` by `write(snapshot)` (blocking, in a
    thread). `changed()` marks the state dirty; `durable()` waits until a save that
    began after the last change has finished, and raises StateDirError when it failed.
    A failed save is tried again every `retry` seconds, so the file catches up once
    the directory can take writes, with or without further changes."""

    def __init__(self, snapshot: Callable[[], T], write: Callable[[T], None], *,
                 directory: str | os.PathLike[str], what: str, interval: float,
                 cost_factor: float, retry: float = 2.0, log: Any = None) -> None:
        self.snapshot = snapshot
        self.write = write
        self.directory = directory
        self.what = what
        self.interval = interval
        self.cost_factor = cost_factor
        self.retry = retry
        self.log = log
        self.generation = 0  # changes made
        self.saved = 0  # the generation the last successful save covered
        self.error: OSError | None = None  # the last save's failure (None: it succeeded)
        self._attempted = 0  # the generation the last finished save (either way) covered
        self._wake = anyio.Event()
        self._done = anyio.Event()  # set (and replaced) whenever a save finishes
        self._waiters = 0
        self._running = False  # run() is serving; else durable() saves by itself
        # One save at a time: a durable() that saves by itself (run() not started yet, or
        # stopped) could otherwise race run()'s own save of the same file, and the older
        # snapshot could land last while `saved` claims the newer one.
        self._writing = anyio.Lock()

    def changed(self) -> None:
        self.generation += 1
        self._wake.set()

    async def durable(self) -> None:
        target = self.generation
        while self.saved < target:
            if not self._running:  # not started yet, or stopped (shutdown): save here
                await self._save_here()
                continue
            done = self._done
            self._waiters += 1
            self._wake.set()
            try:
                await done.wait()
            finally:
                self._waiters -= 1
            if self._attempted >= target and self.saved < target and self.error is not None:
                raise state_dir_error(self.directory, self.what, self.error)

    def save_now(self) -> None:
        """A blocking save of the current state (at shutdown); failures are logged."""
        if self.saved == self.generation:
            return
        generation = self.generation
        try:
            self.write(self.snapshot())
        except (OSError, ValueError) as exc:
            self._log(exc)
            return
        self.saved = generation

    async def _save_here(self) -> None:
        async with self._writing:
            generation = self.generation
            if self.saved >= generation:
                return
            try:
                await anyio.to_thread.run_sync(self.write, self.snapshot())
            except (OSError, ValueError) as exc:
                self._log(exc)
                raise state_dir_error(self.directory, self.what, _os_error(exc)) from None
            self.saved = max(self.saved, generation)

    async def run(self) -> None:
        self._running = True
        try:
            await self._serve()
        finally:  # waiters of a save that will not come save by themselves
            self._running = False
            done, self._done = self._done, anyio.Event()
            done.set()

    async def _serve(self) -> None:
        while True:
            if self.saved == self.generation:
                await self._wake.wait()
            self._wake = anyio.Event()
            async with self._writing:
                generation = self.generation
                started = anyio.current_time()
                try:
                    await anyio.to_thread.run_sync(self.write, self.snapshot())
                except (OSError, ValueError) as exc:
                    self.error = _os_error(exc)
                    self._log(exc)
                else:
                    self.error = None
                    self.saved = max(self.saved, generation)
            self._attempted = generation
            done, self._done = self._done, anyio.Event()
            done.set()
            pause = self.retry if self.error is not None else max(
                self.interval, self.cost_factor * (anyio.current_time() - started))
            # A caller waiting for durability does not wait out the pause: the next
            # save starts at once and covers everything changed meanwhile.
            with anyio.move_on_after(pause):
                while not self._waiters or self.saved >= self.generation:
                    await self._wake.wait()
                    self._wake = anyio.Event()

    def _log(self, exc: Exception) -> None:
        if self.log is not None:
            self.log.warning(f"{self.what} not saved", error=str(exc))
