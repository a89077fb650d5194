"""One thread's record writes, made durable together (group commit).

Inside a commit a record write leaves its temp file written but not yet
fsynced or renamed, and keeps holding the record's lock. `publish()` then
fsyncs all those temp files at once (fsyncs.fsync_many: their disk waits
overlap instead of queueing), renames each over its record and releases its
lock; `finish()` publishes and fsyncs each directory that changed, once
(files.DirSync). Every record is thus still written whole and durable before
the rename that shows it, and its directory fsynced before anyone is told it
is written: a crash can lose a rename, never half a record.

A failure is charged to the write's `owner` (whoever the caller names, e.g. a
round's call): a temp file that does not fsync or rename is not published and
fails its owner; a directory that does not fsync fails every owner that
changed it. Writing or reading a record this commit still holds publishes the
pending writes first, so a thread sees its own writes in order. At most
MAX_PENDING writes wait at once (each holds two file descriptors and a lock
others may wait for): the next one publishes them first.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Hashable

from agentcoordd.store.files import DirSync
from agentcoordd.store.fsyncs import fsync_many

MAX_PENDING = 32
FDS_HELD = 2 * MAX_PENDING  # a commit's open temp and lock files, at most


class _Write:
    __slots__ = ("fd", "full", "lock_fd", "owner", "shown", "tmp")

    def __init__(self, full: str, shown: str, fd: int, tmp: str, owner: Hashable) -> None:
        self.full, self.shown, self.fd, self.tmp, self.owner = full, shown, fd, tmp, owner
        self.lock_fd: int | None = None


class Commit:
    """`error(action, shown_path, exc)` makes the exception a failed step raises."""

    def __init__(self, dir_sync: DirSync, error: Callable[[str, str, OSError], Exception],
                 root: str) -> None:
        self.owner: Hashable = None
        self.failed: dict[Hashable, Exception] = {}
        self._dir_sync = dir_sync
        self._error = error
        self._root = root
        self._writes: dict[str, _Write] = {}
        self._dirs: dict[str, set[Hashable]] = {}

    def defer(self, full: str, shown: str, fd: int, tmp: str) -> None:
        """`tmp` (open as `fd`, fully written) replaces `full` when the commit publishes."""
        if len(self._writes) >= MAX_PENDING:
            self.publish()
        self._writes[full] = _Write(full, shown, fd, tmp, self.owner)

    def keep_lock(self, full: str, lock_fd: int) -> bool:
        """Hold `lock_fd` until `full`'s pending write is published; False: none is pending."""
        write = self._writes.get(full)
        if write is None or write.lock_fd is not None:
            return False
        write.lock_fd = lock_fd
        return True

    def holds(self, full: str) -> bool:
        return full in self._writes

    def changed(self, directory: str) -> None:
        """An entry of `directory` was renamed in or unlinked: fsync it at the finish."""
        self._dirs.setdefault(directory, set()).add(self.owner)

    def publish(self) -> None:
        """fsync every pending temp file together, then rename each and release its lock."""
        writes = list(self._writes.values())
        self._writes.clear()
        fds = [write.fd for write in writes]
        try:
            errors = fsync_many(fds)
        except Exception as exc:  # noqa: BLE001 - not known durable: none of them is shown
            errors = [OSError(errno.EIO, f"fsync failed: {exc}")] * len(fds)
        for write, error in zip(writes, errors, strict=True):
            try:
                os.close(write.fd)
                if error is not None:
                    raise error
                os.replace(write.tmp, write.full)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(write.tmp)
                self.failed.setdefault(write.owner, self._error("cannot write", write.shown, exc))
            else:
                self._dirs.setdefault(write.full.rpartition("/")[0], set()).add(write.owner)
            finally:
                if write.lock_fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(write.lock_fd)

    def finish(self) -> dict[Hashable, Exception]:
        """Publish, then fsync each changed directory once; the owners whose writes failed."""
        try:
            self.publish()
        finally:
            dirs, self._dirs = self._dirs, {}
            for directory in sorted(dirs):
                try:
                    self._dir_sync.sync(directory)
                except OSError as exc:
                    error = self._error("cannot sync", os.path.relpath(directory, self._root), exc)
                    for owner in dirs[directory]:
                        self.failed.setdefault(owner, error)
        return self.failed
