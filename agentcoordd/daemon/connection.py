"""A client connection of the daemon, its socket registered with the event loop once.

anyio's socket stream registers the socket with the loop before each wait for
data and unregisters it after (two epoll_ctl calls, and asyncio formats the
socket's repr — getsockname, getpeername — looking for an earlier
registration), and yields to the loop before every read and write. Each such
system call lets the store's round thread take the GIL, which the event loop
then waits to get back: on a busy daemon those hand-offs, not the work, set the
pace. Here an asyncio transport keeps the socket registered for the
connection's life, reads what arrives into a buffer and writes at once.

Bounds: the transport reads into a buffer we hand it (a BufferedProtocol), never
more than what the current read needs or READ_AHEAD bytes, whichever is more,
and stops reading at that mark — the rest waits in the kernel — so a
connection holds what anyio's did: the frame being read (a large one counted
against the daemon's buffered-bytes budget) or at most 16 KiB of pipelined
ones. A write that the kernel does not take at once waits until it has, as
anyio's did; it goes to the transport SEND_CHUNK bytes at a time, because the
transport copies what the kernel did not take (a multi-megabyte status would
otherwise be held twice). Every wait has a timeout (TimeoutError),
kept with a timer of the loop's own: an anyio cancel scope per read and per
write cost more than the rest of a heartbeat's socket work.

The daemon runs on asyncio (anyio.run's default backend).
"""

from __future__ import annotations

import asyncio
import socket
import threading

import anyio

READ_AHEAD = 16 * 1024  # bytes read before anyone asks for them (pipelined frames)
SEND_CHUNK = 256 * 1024
# Where transports read into: the loop calls get_buffer, reads, then buffer_updated, with
# nothing in between, so one chunk per thread (per event loop) serves every connection.
_chunks = threading.local()


def _chunk() -> memoryview:
    chunk: memoryview | None = getattr(_chunks, "chunk", None)
    if chunk is None:
        chunk = _chunks.chunk = memoryview(bytearray(READ_AHEAD))
    return chunk


class Connection(asyncio.BufferedProtocol):
    """`receive_exactly`, `buffer`, `send` and `close`: what the server's session uses."""

    def __init__(self) -> None:
        # (pid, uid) from the socket's credentials, set by the server once accepted
        self.peer: tuple[int | None, int] | None = None
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._wanted = READ_AHEAD  # the buffer never holds more (reading pauses there)
        self._reading_paused = False
        self._writing_paused = False
        self._eof = False
        self._lost = False
        self._error: BaseException | None = None
        self._readers: set[asyncio.Future[bool]] = set()  # waiting for bytes (or the end)
        self._writers: set[asyncio.Future[bool]] = set()  # waiting for the kernel to take theirs

    @classmethod
    async def attach(cls, sock: socket.socket) -> Connection:
        """Serve the accepted `sock` through a transport (which then owns it)."""
        _transport, connection = await asyncio.get_running_loop().connect_accepted_socket(cls, sock)
        return connection

    # ---- the transport's side ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.set_write_buffer_limits(high=0)  # anything unsent: pause_writing

    def get_buffer(self, sizehint: int) -> memoryview:
        # Reading pauses when the buffer is full, so there is always room here.
        return _chunk()[:max(1, min(READ_AHEAD, self._wanted - len(self._buffer)))]

    def buffer_updated(self, nbytes: int) -> None:
        self._buffer += _chunk()[:nbytes]
        self._read_up_to(self._wanted)
        _wake(self._readers)

    def eof_received(self) -> bool:
        self._eof = True
        _wake(self._readers)
        return True  # half-closed: replies to what the client sent still go out

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = self._lost = True
        self._error = exc
        _wake(self._readers)
        _wake(self._writers)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        _wake(self._writers)

    # ---- the server's side --------------------------------------------------------------

    @property
    def buffer(self) -> bytearray:
        """Bytes received and not yet taken (the caller only looks)."""
        return self._buffer

    async def receive_exactly(self, size: int, timeout: float) -> bytes:
        """`size` bytes within `timeout` seconds (else TimeoutError); anyio.IncompleteRead
        when the stream ends first (what arrived stays in `buffer`),
        anyio.BrokenResourceError when the connection broke."""
        deadline = None
        while len(self._buffer) < size:
            if self._error is not None:
                raise anyio.BrokenResourceError from self._error
            if self._eof:
                raise anyio.IncompleteRead
            self._read_up_to(max(READ_AHEAD, size))
            if deadline is None:
                deadline = asyncio.get_running_loop().time() + timeout
            await _changed(self._readers, deadline)
        chunk = bytes(self._buffer[:size])
        del self._buffer[:size]
        self._read_up_to(READ_AHEAD)
        return chunk

    def _read_up_to(self, wanted: int) -> None:
        """Let the buffer fill to `wanted` bytes: reading paused there, resumed below."""
        self._wanted = wanted
        full = len(self._buffer) >= wanted
        if full != self._reading_paused and self._transport is not None and not self._eof:
            self._reading_paused = full
            if full:
                self._transport.pause_reading()
            else:
                self._transport.resume_reading()

    async def send(self, data: bytes, timeout: float) -> None:
        """Returns once the kernel took every byte, within `timeout` seconds (else
        TimeoutError); anyio.BrokenResourceError when the connection is gone (or this
        write broke it)."""
        deadline = None
        transport = self._transport
        if self._lost or transport is None or transport.is_closing():
            raise anyio.BrokenResourceError from self._error
        view = memoryview(data)
        for start in range(0, len(view), SEND_CHUNK):
            transport.write(view[start:start + SEND_CHUNK])
            while True:
                if transport.is_closing():  # the write failed (EPIPE, ECONNRESET): closed under us
                    raise anyio.BrokenResourceError from self._error
                if not self._writing_paused:
                    break
                if deadline is None:
                    deadline = asyncio.get_running_loop().time() + timeout
                await _changed(self._writers, deadline)

    def close(self) -> None:
        """Close now; bytes a client never read are dropped, not waited for."""
        if self._transport is not None and not self._transport.is_closing():
            if self._transport.get_write_buffer_size():
                self._transport.abort()
            else:
                self._transport.close()


def _wake(waiters: set[asyncio.Future[bool]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(True)


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


async def _changed(waiters: set[asyncio.Future[bool]], deadline: float) -> None:
    """Until the transport's next callback for `waiters`' side; TimeoutError at `deadline`."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()
    waiters.add(waiter)
    timer = loop.call_at(deadline, _expire, waiter)
    try:
        woken = await waiter
    finally:
        waiters.discard(waiter)
        timer.cancel()
    if not woken:
        raise TimeoutError
