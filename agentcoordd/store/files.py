"""Durable, private file writes shared by the local store and the daemon's own files.

`write_whole` loops over short writes (os.write may write less than asked),
`write_all` also fsyncs; `fsync_dir` makes a rename or unlink durable, and `DirSync` lets
concurrent writers in one directory share that fsync; `replace_private`
replaces a whole 0600 file atomically (temp file, fsync, rename, directory
fsync) — the daemon's lanes file and the outbox rewrite. `locked_file` is the
cross-process lock beside such a file. Temp files are named
`.<name>.tmp-<pid>-<hex>` (a random prefix per process, then a counter);
`sweep_stale_temps` removes only those whose writer process is gone, never a
live writer's.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
TEMP_NAME = re.compile(r"^\..+\.tmp-(\d+)(?:-[0-9a-f]+)?$")
STALE_TEMP_AGE = 60.0  # a temp file younger than this may belong to a write in flight


def file_mode(dir_mode: int) -> int:
    """The mode of files in a directory of `dir_mode`: the same bits, never executable."""
    return dir_mode & 0o666


def parse_mode(text: str) -> int:
    """AGENT_COORD_STATE_MODE: an octal directory mode the owner keeps full access to."""
    try:
        mode = int(text, 8)
    except ValueError:
        raise ValueError(f"not an octal mode: {text!r}") from None
    if not 0o700 <= mode <= 0o777 or mode & 0o700 != 0o700:
        raise ValueError(f"mode {text!r} must be 0700..0777 (rwx for the owner), e.g. 0750")
    return mode


# A random prefix per process, then a counter: unique among this pid's writes
# without a getrandom call per write (O_EXCL still refuses a leftover).
_TEMP_PREFIX = secrets.token_hex(4)
_temp_counter = itertools.count()


def temp_suffix() -> str:
    """`<pid>-<hex>` of a new temp name (the part TEMP_NAME's sweep reads)."""
    return f"{os.getpid()}-{_TEMP_PREFIX}{next(_temp_counter):x}"


def temp_path(path: str | os.PathLike[str]) -> str:
    directory, name = os.path.split(os.fspath(path))
    return os.path.join(directory, f".{name}.tmp-{temp_suffix()}")


def write_whole(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd`, then fsync it."""
    write_whole(fd, data)
    os.fsync(fd)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Round:
    """Writers waiting for one fsync of their directory, and how it ended."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = False
        self.error: OSError | None = None


class _Dir:
    __slots__ = ("changed", "pending", "syncing")

    def __init__(self) -> None:
        self.changed = threading.Condition(threading.Lock())
        self.pending: _Round | None = None  # joined by writers whose rename is done
        self.syncing = False


class DirSync:
    """Group commit of directory fsyncs across threads.

    A writer calls `sync(directory)` after its rename or unlink. It joins the
    directory's pending round; the first writer to find no fsync in flight
    closes the round and runs one fsync for all of it. Every member's change
    happened before that fsync started, so each caller returns only once its
    own change is durable (or raises the error of the fsync that covered it).
    Concurrent writers in one directory thus share one fsync instead of
    queueing one each behind the disk.
    """

    def __init__(self, fsync: Callable[[str], None] = fsync_dir) -> None:
        self._fsync = fsync
        self._dirs: dict[str, _Dir] = {}
        self._dirs_lock = threading.Lock()

    def sync(self, directory: str) -> None:
        state = self._dirs.get(directory)
        if state is None:
            with self._dirs_lock:
                state = self._dirs.setdefault(directory, _Dir())
        with state.changed:
            mine = state.pending
            if mine is None:
                mine = state.pending = _Round()
            while not mine.done:
                if state.syncing:
                    state.changed.wait()
                    continue
                leading, state.pending, state.syncing = state.pending, None, True
                assert leading is mine  # only a leader takes a round, and it ends it
                state.changed.release()
                try:
                    self._fsync(directory)
                except OSError as exc:
                    leading.error = exc
                except BaseException:
                    leading.error = OSError(errno.EIO, "directory fsync interrupted")
                    raise
                finally:
                    state.changed.acquire()
                    leading.done, state.syncing = True, False
                    state.changed.notify_all()
        if mine.error is not None:
            raise mine.error


def replace_private(path: Path, body: bytes) -> None:
    """Atomically replace `path` (mode 0600) with `body`; a reader sees old or new."""
    tmp = temp_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, body)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(path.parent)


@contextlib.contextmanager
def locked_file(path: Path) -> Iterator[None]:
    """flock(LOCK_EX) on `<path>.lock` (0600): one process at a time changes `path`."""
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def process_exists(pid: int) -> bool:
    if not 0 < pid < 2**31:
        return False  # not a pid (os.kill would overflow, or signal a process group)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    return True


def sweep_stale_temps(directory: str | os.PathLike[str], *, now: float | None = None) -> int:
    """Remove temp files in `directory` whose writer died; returns how many."""
    now = time.time() if now is None else now
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        match = TEMP_NAME.match(entry.name)
        if match is None or process_exists(int(match.group(1))):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime < STALE_TEMP_AGE:
                continue
            os.unlink(entry.path)
            removed += 1
        except OSError:
            continue
    return removed
