"""Durable, private file writes shared by the local store and the daemon's own files.

`write_all` loops over short writes (os.write may write less than asked) and
fsyncs; `fsync_dir` makes a rename or unlink durable; `replace_private`
replaces a whole 0600 file atomically (temp file, fsync, rename, directory
fsync) — the daemon's lanes file and the outbox rewrite. `locked_file` is the
cross-process lock beside such a file. Temp files are named
`.<name>.tmp-<pid>-<random>`; `sweep_stale_temps` removes only those whose
writer process is gone, never a live writer's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import time
from collections.abc import Iterator
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


def temp_path(path: str | os.PathLike[str]) -> str:
    directory, name = os.path.split(os.fspath(path))
    return os.path.join(directory, f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd`, then fsync it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
