"""fsync many files at once, so their disk waits overlap while one thread waits.

A write round (store/commit.py) fsyncs every temp file it wrote together,
before renaming any. On Linux the kernel's AIO interface takes the whole list
in one `io_submit` (IOCB_CMD_FSYNC, Linux 4.18+), runs the fsyncs in parallel
on its own workers, and one `io_getevents` collects them: two system calls
and no Python thread per file. Threads would cost a GIL hand-off around every
fsync, and on two cores those hand-offs, not the disk, bounded a daemon's
writes. Where the kernel has no AIO fsync (another OS, an old kernel, a
sandbox that refuses it, aio-max-nr reached) a small thread pool fsyncs them.

`fsync_many(fds)` answers, per descriptor, None (durable) or the OSError its
fsync raised. Each thread has its own AIO context: one thread never collects
another's completions. A thread that cannot get a context (aio-max-nr
reached) uses the pool; a kernel that refuses AIO fsync sends every thread
there. If collecting the completions fails, their outcomes are unknown: each
is reported as an error (EIO), never retried — a second fsync after a failed
writeback may succeed without the data being on disk.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import errno
import os
import platform
import threading
from collections.abc import Sequence

IOCB_CMD_FSYNC = 2
AIO_EVENTS = 128  # fsyncs in flight per thread; a longer list goes in turns
POOL_THREADS = 8
# (io_setup, io_destroy, io_getevents, io_submit) by machine; others use the pool.
_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2), "arm64": (0, 1, 4, 2)}


class _Iocb(ctypes.Structure):
    """struct iocb (linux/aio_abi.h); the two u32s before the opcode stay zero,
    so their order (it depends on endianness) does not matter."""

    _fields_ = [("data", ctypes.c_uint64), ("key", ctypes.c_uint32), ("rw_flags", ctypes.c_uint32),
                ("opcode", ctypes.c_uint16), ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
                ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64), ("offset", ctypes.c_int64),
                ("reserved2", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32)]


class _IoEvent(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64),
                ("res", ctypes.c_int64), ("res2", ctypes.c_int64)]


class _Unsupported(Exception):
    """The kernel refuses AIO fsync: use the pool from now on."""


class _NoContext(Exception):
    """This thread cannot have an AIO context (aio-max-nr reached): it uses the pool."""


class _AioContext:
    """One thread's AIO context (destroyed with the thread's local storage)."""

    def __init__(self, syscall: ctypes._CFuncPtr, numbers: tuple[int, int, int, int]) -> None:
        self._syscall = syscall
        self._setup, self._destroy, self._getevents, self._submit = numbers
        self._ctx: ctypes.c_ulong | None = None
        ctx = ctypes.c_ulong(0)
        if syscall(self._setup, AIO_EVENTS, ctypes.byref(ctx)) != 0:
            code = ctypes.get_errno()
            raise (_NoContext if code == errno.EAGAIN else _Unsupported)(os.strerror(code))
        self._ctx = ctx

    def fsync(self, fds: Sequence[int]) -> list[OSError | None]:
        results: list[OSError | None] = []
        for start in range(0, len(fds), AIO_EVENTS):
            results.extend(self._fsync_turn(fds[start:start + AIO_EVENTS]))
        return results

    def _fsync_turn(self, fds: Sequence[int]) -> list[OSError | None]:
        count = len(fds)
        blocks = (_Iocb * count)()
        pointers = (ctypes.POINTER(_Iocb) * count)()
        for index, fd in enumerate(fds):
            blocks[index].data, blocks[index].opcode, blocks[index].fildes = index, IOCB_CMD_FSYNC, fd
            pointers[index] = ctypes.pointer(blocks[index])
        submitted = 0
        while submitted < count:
            done = self._syscall(self._submit, self._ctx, count - submitted,
                                 ctypes.byref(pointers, submitted * ctypes.sizeof(pointers[0])))
            if done < 0:
                code = ctypes.get_errno()
                if code == errno.EINTR:
                    continue
                if submitted == 0 and code in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
                    raise _Unsupported(os.strerror(code))
                # Cannot submit the rest: wait for what is in flight, then fsync the rest here.
                results = self._collect(submitted)
                return results[:submitted] + [_fsync_one(fd) for fd in fds[submitted:]]
            submitted += done
        return self._collect(count)

    def _collect(self, count: int) -> list[OSError | None]:
        results: list[OSError | None] = [None] * count
        events = (_IoEvent * max(count, 1))()
        got = 0
        while got < count:
            done = self._syscall(self._getevents, self._ctx, count - got, count - got,
                                 ctypes.byref(events, got * ctypes.sizeof(_IoEvent)), None)
            if done < 0:
                code = ctypes.get_errno()
                if code == errno.EINTR:
                    continue
                unknown = OSError(errno.EIO, f"fsync outcome unknown: io_getevents: {os.strerror(code)}")
                return [unknown] * count
            got += done
        for event in events[:count]:
            if event.res < 0:
                results[event.data] = OSError(-event.res, os.strerror(-event.res))
        return results

    def __del__(self) -> None:
        if self._ctx is not None:  # (no module globals here: it may run at interpreter exit)
            self._syscall(self._destroy, self._ctx)


def _fsync_one(fd: int) -> OSError | None:
    try:
        os.fsync(fd)
    except OSError as exc:
        return exc
    return None


class _Fsyncs:
    def __init__(self) -> None:
        self._local = threading.local()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        numbers = _SYSCALLS.get(platform.machine()) if os.uname().sysname == "Linux" else None
        self._aio: tuple[ctypes._CFuncPtr, tuple[int, int, int, int]] | None = None
        if numbers is not None and os.environ.get("AGENT_COORD_NO_AIO") != "1":
            syscall = ctypes.CDLL(None, use_errno=True).syscall
            syscall.restype = ctypes.c_long
            self._aio = (syscall, numbers)

    @property
    def uses_aio(self) -> bool:
        return self._aio is not None

    def fsync_many(self, fds: Sequence[int]) -> list[OSError | None]:
        if len(fds) <= 1:
            return [_fsync_one(fd) for fd in fds]
        ctx = self._context()
        if ctx is not None:
            try:
                return ctx.fsync(fds)
            except _Unsupported:
                self._aio = None
        return list(self._thread_pool().map(_fsync_one, fds))

    def _context(self) -> _AioContext | None:
        """This thread's AIO context; None where there is none (the pool serves)."""
        ctx: _AioContext | None | bool = getattr(self._local, "aio", None)
        if ctx is None and self._aio is not None:
            try:
                ctx = _AioContext(*self._aio)
            except _NoContext:
                ctx = False
            except _Unsupported:
                self._aio, ctx = None, False
            self._local.aio = ctx
        return ctx if isinstance(ctx, _AioContext) and self._aio is not None else None

    def _thread_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    POOL_THREADS, thread_name_prefix="agentcoord-fsync")
            return self._pool


_fsyncs = _Fsyncs()
fsync_many = _fsyncs.fsync_many


def uses_aio() -> bool:
    """Whether this process fsyncs many files with Linux AIO (else: a thread pool)."""
    return _fsyncs.uses_aio
