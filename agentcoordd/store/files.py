"""Durable file writes shared by the local store and the daemon's own files.

`write_all` loops over short writes (os.write may write less than asked) and
fsyncs; `fsync_dir` makes a rename or unlink durable; `replace_private`
replaces a whole 0600 file atomically (temp file, fsync, rename, directory
fsync) — the daemon's lanes file and the outbox rewrite.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


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
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, body)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(path.parent)
