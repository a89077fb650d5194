"""Linux inotify through ctypes (the standard library has none).

Two users: the local store's change notices (`watch` + `drain`: a wake-up,
the caller still compares its stat stamp, so a spurious or coalesced event
never changes what is reported) and the directory index of the parsed-record
cache (`add_watch` + `read_events`: which names of which directory changed).

`open_inotify()` is None where it is unavailable (not Linux, no libc symbol, the
per-user instance limit reached); the caller then polls or stats.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
import sys
import weakref

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = 0o2000000
WATCHED = (IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
           | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
# The directory index also needs permission and owner changes of records.
INDEXED = WATCHED | IN_ATTRIB

_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


class Inotify:
    def __init__(self, libc: ctypes.CDLL) -> None:
        self._libc = libc
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd
        # Instances are few per user (128 by default): one dropped unclosed still frees its own.
        self._close = weakref.finalize(self, os.close, fd)

    def watch(self, path: str) -> bool:
        """Watch the directory `path` (again: a no-op); False when it does not exist."""
        return self._libc.inotify_add_watch(self.fd, os.fsencode(path), WATCHED) >= 0

    def add_watch(self, path: str) -> int:
        """Watch the directory `path` for the index: its watch descriptor, or -errno."""
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), INDEXED)
        return wd if wd >= 0 else -(ctypes.get_errno() or errno.EIO)

    def rm_watch(self, wd: int) -> None:
        self._libc.inotify_rm_watch(self.fd, wd)  # a watch already gone: EINVAL, harmless

    def read_events(self) -> list[tuple[int, int, str]]:
        """Every pending event as (wd, mask, name); name is "" for the directory itself.
        An overflowed queue shows as one event with IN_Q_OVERFLOW (wd -1)."""
        events: list[tuple[int, int, str]] = []
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except (BlockingIOError, InterruptedError):
                return events
            if not buf:
                return events
            offset = 0
            while offset < len(buf):
                wd, mask, _cookie, size = _EVENT.unpack_from(buf, offset)
                offset += _EVENT.size
                name = buf[offset:offset + size].rstrip(b"\0")
                offset += size
                events.append((wd, mask, os.fsdecode(name)))

    def drain(self) -> None:
        """Consume every pending event (their content does not matter: see the module doc)."""
        while True:
            try:
                if not os.read(self.fd, 65536):
                    return
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EINTR):
                    return
                raise

    def close(self) -> None:
        self._close()


def open_inotify() -> Inotify | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        return Inotify(libc)
    except (OSError, AttributeError):
        return None
