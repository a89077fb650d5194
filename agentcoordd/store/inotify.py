"""Linux inotify through ctypes (the standard library has none), for the local store's
change notices: a wake-up when something lands in a watched directory.

`open_inotify()` is None where it is unavailable (not Linux, no libc symbol, the
per-user instance limit reached); the caller then polls. A watch is only a
wake-up: the caller still compares its stat stamp, so a spurious or coalesced
event never changes what is reported.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys

IN_MODIFY = 0x002
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = 0o2000000
WATCHED = (IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
           | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)


class Inotify:
    def __init__(self, libc: ctypes.CDLL) -> None:
        self._libc = libc
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd

    def watch(self, path: str) -> bool:
        """Watch the directory `path` (again: a no-op); False when it does not exist."""
        return self._libc.inotify_add_watch(self.fd, os.fsencode(path), WATCHED) >= 0

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
        os.close(self.fd)


def open_inotify() -> Inotify | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return Inotify(libc)
    except (OSError, AttributeError):
        return None
