"""The Unix-socket server: single instance, peer-uid check, framed msgpack.

Life cycle
* `bind()` first takes `<state-dir>/agentcoordd.lock` (flock, never unlinked;
  it names our pid and socket): one state dir has one daemon, whatever socket
  path a caller computed (ctl finds the owner's socket there). Then the lock
  file next to the socket, so at most one daemon serves a socket path. Holding the lock, an existing
  socket file is either answered by a live daemon (never stolen: we exit) or
  stale (left by a crash: replaced). The socket directory is 0700 and the
  socket 0600.
* Every connection: peer credentials first (another uid is refused and
  logged), then `Hello`, then request/response pairs. Each connection runs
  inside its own error boundary: whatever goes wrong while reading, decoding
  or answering its frames (a malformed frame, nesting past the decoder's
  depth bound, a bug) costs one rendered log line and that connection, never
  the server.
* `Limits` bound what clients can make the daemon hold: concurrent
  connections, the pre-hello frame size and deadline, and the bytes of large
  frames being read at once. Past a limit the newcomer is refused with a
  one-line reason (exit 2, retry) and everyone else is served as before.
* SIGTERM/SIGINT (or `daemon stop`): stop accepting, let in-flight requests
  finish (dispatch runs shielded from cancellation), close idle connections,
  exit 0. A request is never cut between its backend write and its reply;
  read-only waits are ended at once (exit 2: the client waits on with the
  next daemon).
* If the socket file is removed or replaced under us (an operator's `rm`, a
  test's temp dir going away), the daemon exits: nobody can reach it anymore.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import os
import signal
import socket
import stat
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import msgspec

from agentcoordd import protocol as p
from agentcoordd.daemon import dashboard_auth
from agentcoordd.daemon.backends import implicit_root
from agentcoordd.daemon.call import ProgressChannel
from agentcoordd.daemon.connection import Connection
from agentcoordd.daemon.dispatch import dispatch, wants_progress
from agentcoordd.daemon.logging import get_logger
from agentcoordd.daemon.services import Services
from agentcoordd.store.files import sweep_stale_temps

IDLE_TIMEOUT = 300.0
FRAME_TIMEOUT = 10.0  # a frame body, once its header arrived
SEND_TIMEOUT = 10.0
DRAIN_TIMEOUT = 30.0
WATCH_INTERVAL = 1.0


@dataclass(frozen=True)
class Limits:
    """What the daemon holds for its clients at once (`agentcoordd --help`,
    docs/reliability.md "Limits"). Frames up to `hello_frame` bytes are always
    read (their total is bounded by `max_connections`); larger ones share the
    `buffered_bytes` budget while they arrive."""

    max_connections: int = 256
    hello_frame: int = 64 * 1024
    hello_deadline: float = 10.0
    buffered_bytes: int = 16 * 1024 * 1024


class ByteBudget:
    """Bytes of large frames being read right now, across connections (event loop only)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size


class StartupError(Exception):
    """The daemon cannot serve this socket (another instance, bad path, …)."""


class AlreadyRunning(StartupError):
    """Another daemon owns this socket or state dir (a lost autostart race, say)."""


class BadClient(Exception):
    """A protocol violation: log one line, answer if possible, drop the client."""

    def __init__(self, reason: str, reply: str | None = None,
                 exit_code: int = p.EXIT_USAGE) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reply = reply
        self.exit_code = exit_code


def peer_credentials(sock: socket.socket) -> tuple[int | None, int, int | None]:
    """(pid, uid, gid) of the connected peer."""
    if hasattr(socket, "SO_PEERCRED"):
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, gid = struct.unpack("3i", raw)
        return pid, uid, gid
    uid, gid = os.getpeereid(sock.fileno())  # type: ignore[attr-defined]  # macOS/BSD
    return None, uid, gid


def _connects(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


class Daemon:
    def __init__(self, socket_path: str, state_dir: str, *, log: Any = None,
                 limits: Limits | None = None, metrics: bool = True,
                 http_port: int | None = None, config: str | None = None,
                 metrics_open: bool = False) -> None:
        self.socket_path = os.path.abspath(socket_path)
        self.state_dir = os.path.abspath(state_dir)
        self.lock_path = self.socket_path + ".lock"
        self.state_lock_path = os.path.join(self.state_dir, p.STATE_DIR_LOCK)
        self.log = log or get_logger()
        self.started_at = time.time()
        self.requests = 0
        self.in_flight = 0
        self._pipelines: set[_Pipeline] = set()  # connections' replies still to send
        self.connections = 0
        self.bad_clients = 0
        self.refused_peers = 0
        self.refused_connections = 0
        self.limits = limits or Limits()
        self.buffered = ByteBudget(self.limits.buffered_bytes)
        self._lock_fd: int | None = None
        self._state_lock_fd: int | None = None
        self._registration: str | None = None  # our entry in the user's daemon list
        self._sock: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        self._stop: anyio.Event | None = None
        self._stop_reason = ""
        self.svc = Services.build(self, self.state_dir, self.log, metrics=metrics,
                                  http_port=http_port, config=config, metrics_open=metrics_open,
                                  dashboard_token=dashboard_auth.token_path(self.socket_path))

    # ---- binding -----------------------------------------------------------------

    def bind(self, *, inherited: socket.socket | None = None) -> None:
        directory = os.path.dirname(self.socket_path)
        if len(os.fsencode(self.socket_path)) > p.MAX_SOCKET_PATH:
            raise StartupError(
                f"socket path is {len(os.fsencode(self.socket_path))} bytes, over the "
                f"{p.MAX_SOCKET_PATH}-byte limit of Unix sockets: {self.socket_path}; "
                "set AGENT_COORD_SOCKET to a shorter path"
            )
        _private_dir(directory)
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        self._lock_state_dir()
        self._lock()
        self._register()
        swept = sweep_stale_temps(self.state_dir)
        if swept:
            self.log.info("stale temp files removed", state_dir=self.state_dir, removed=swept)
        if inherited is not None:  # systemd socket activation
            self._sock = inherited
            self._owns_path = False  # systemd's socket unit owns the path: never unlink it
        else:
            self._sock = self._bind_fresh()
        st = os.stat(self.socket_path)
        self._inode = (st.st_dev, st.st_ino)

    def _lock_state_dir(self) -> None:
        fd = _try_lock(self.state_lock_path)
        if fd is None:
            owner = p.read_state_dir_owner(self.state_dir)
            raise AlreadyRunning(
                f"agentcoordd is already running on {owner.get('socket', '?')} (pid "
                f"{owner.get('pid', '?')}) with the state dir {self.state_dir}; one state dir has "
                "one daemon"
            )
        os.ftruncate(fd, 0)
        os.write(fd, msgspec.json.encode({"pid": os.getpid(), "socket": self.socket_path}) + b"\n")
        self._state_lock_fd = fd

    def _register(self) -> None:
        """Enter this daemon in the user's list (protocol.user_daemons_dir), for clients
        whose environment would resolve another socket (ctl's one-daemon-per-user check)."""
        directory = p.user_daemons_dir(os.environ)
        entry = {"pid": os.getpid(), "socket": self.socket_path, "state_dir": self.state_dir,
                 "state_root": implicit_root(os.environ)}
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            path = os.path.join(directory, f"{os.getpid()}.json")
            with open(path + ".tmp", "wb") as fh:
                fh.write(msgspec.json.encode(entry) + b"\n")
            os.replace(path + ".tmp", path)
            self._registration = path
        except OSError as exc:  # the check is advice; serving does not depend on it
            self.log.warning("daemon list entry not written", directory=directory, error=str(exc))

    def _lock(self) -> None:
        fd = _try_lock(self.lock_path)
        if fd is None:
            holder = _read_pid(self.lock_path)
            raise AlreadyRunning(
                f"agentcoordd is already running on {self.socket_path}"
                + (f" (pid {holder})" if holder else "")
            )
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _bind_fresh(self) -> socket.socket:
        path = self.socket_path
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None:
            if not stat.S_ISSOCK(st.st_mode):
                raise StartupError(f"{path} exists and is not a socket; refusing to replace it")
            if _connects(path):
                # We hold the lock, yet something answers: never steal a live socket.
                raise StartupError(f"another process is serving {path}; refusing to replace it")
            self.log.info("stale socket replaced", socket=path)
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(1024)
        return sock

    def release(self) -> None:
        """Remove our socket (only if it is still ours) and drop the lock."""
        if self._inode is not None and getattr(self, "_owns_path", True):
            with contextlib.suppress(OSError):
                st = os.stat(self.socket_path)
                if (st.st_dev, st.st_ino) == self._inode:
                    os.unlink(self.socket_path)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        if self._registration is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._registration)
            self._registration = None
        for name in ("_lock_fd", "_state_lock_fd"):
            fd = getattr(self, name)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                os.close(fd)
                setattr(self, name, None)

    # ---- serving -----------------------------------------------------------------

    def request_stop(self, reason: str, **fields: Any) -> None:
        if self._stop is not None and not self._stop.is_set():
            self._stop_reason = reason
            self.log.info("stopping", reason=reason, **fields)
            self._stop.set()
            self.svc.pollers.interrupt()

    async def serve(self, ready: Any = None) -> None:
        assert self._sock is not None, "bind() first"
        self._stop = anyio.Event()
        listener = await anyio.abc.SocketListener.from_socket(self._sock)
        self._sock = None  # the listener owns it now
        self.log.info("listening", socket=self.socket_path, pid=os.getpid(), version=p.DAEMON_VERSION,
                      protocol=p.PROTOCOL_VERSION)
        if ready is not None:
            ready()
        async with anyio.create_task_group() as connections:
            async with anyio.create_task_group() as control:
                control.start_soon(self._signals)
                control.start_soon(self._watch_socket)
                self.svc.start(control)  # renewals, outbox retries, services on demand
                control.start_soon(self._accept, listener, connections)
                await self._stop.wait()
                control.cancel_scope.cancel()
            await listener.aclose()
            self.release()
            self._inode = None
            # Idle connections are waiting for a frame: close them. In-flight
            # requests are shielded and finish before their task ends.
            with anyio.move_on_after(DRAIN_TIMEOUT):
                while self.in_flight or any(pipeline.outstanding for pipeline in self._pipelines):
                    await anyio.sleep(0.02)
            connections.cancel_scope.cancel()
        await self.svc.aclose()  # final save of the keep-alive lanes, stores closed
        self.log.info("stopped", reason=self._stop_reason, requests=self.requests)

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self.request_stop(signal.Signals(signum).name)
                return

    async def _watch_socket(self) -> None:
        while True:
            await anyio.sleep(WATCH_INTERVAL)
            try:
                st = os.stat(self.socket_path)
                current: tuple[int, int] | None = (st.st_dev, st.st_ino)
            except OSError:
                current = None
            if current != self._inode:
                self._inode = None  # not ours anymore: never unlink it
                self.request_stop("socket file removed or replaced", socket=self.socket_path)
                return

    async def _accept(self, listener: Any, connections: anyio.abc.TaskGroup) -> None:
        while True:
            try:
                stream = await listener.accept()
            except (anyio.BrokenResourceError, OSError) as exc:
                # EMFILE and friends: back off instead of spinning.
                self.log.warning("accept failed", error=str(exc))
                await anyio.sleep(0.1)
                continue
            if self.connections >= self.limits.max_connections:
                await self._refuse(stream, f"agentcoordd is busy: {self.connections} connections "
                                   f"open (limit {self.limits.max_connections}); retry shortly")
                continue
            self.connections += 1
            connections.start_soon(self._connection, stream)

    async def _refuse(self, stream: Any, reason: str) -> None:
        """Answer a connection we will not serve with one line, never waiting on it."""
        self.refused_connections += 1
        if self.refused_connections in (1, 10, 100) or self.refused_connections % 1000 == 0:
            self.log.warning("connection refused", reason=reason, refused=self.refused_connections)
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        reply = p.frame(msgspec.msgpack.encode(p.Response(exit_code=p.EXIT_OPERATIONAL,
                                                          error=reason)))
        with contextlib.suppress(OSError):
            raw.send(reply, socket.MSG_DONTWAIT)
            # Closing with unread input makes the peer's next read fail (ECONNRESET)
            # before it sees the reply: take what already arrived first.
            raw.recv(p.MAX_REQUEST_FRAME, socket.MSG_DONTWAIT)
        with contextlib.suppress(Exception):
            await stream.aclose()

    async def _connection(self, stream: Any) -> None:
        """One client, inside the error boundary: nothing it causes escapes to the server."""
        log = self.log
        connection: Connection | None = None
        try:
            raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
            pid, uid, _gid = peer_credentials(raw)
            log = self.log.bind(peer_pid=pid, peer_uid=uid)
            connection = await Connection.attach(raw)
            connection.peer = (pid, uid)
            if uid != os.getuid():
                self.refused_peers += 1
                log.warning("peer refused", reason="peer uid differs from the daemon's",
                            daemon_uid=os.getuid())
                with contextlib.suppress(Exception):
                    with anyio.move_on_after(1.0):
                        await self._send(connection, p.Response(
                            exit_code=p.EXIT_OPERATIONAL,
                            error=f"agentcoordd refused the connection: peer uid {uid} is not the "
                            f"daemon's user ({os.getuid()}); run your own agentcoordd",
                        ))
                return
            await self._session(connection, log)
        except BadClient as exc:
            self.bad_clients += 1
            log.warning("bad client", reason=exc.reason)
            if exc.reply is not None and connection is not None:
                with contextlib.suppress(Exception):
                    with anyio.move_on_after(1.0):
                        await self._send(connection, p.Response(exit_code=exc.exit_code,
                                                                error=exc.reply))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError) as exc:
            self.bad_clients += 1
            log.warning("bad client", reason=f"connection lost: {exc.__class__.__name__}")
        except Exception:  # noqa: BLE001 - the boundary: one connection's failure is its own
            self.bad_clients += 1
            log.exception("connection failed; dropped it")
        finally:
            if connection is not None:
                connection.close()  # the transport owns the socket now
            with contextlib.suppress(Exception):
                await stream.aclose()
            self.connections -= 1

    async def _send(self, stream: Connection, message: Any) -> None:
        if isinstance(message, p.Response):
            message = p.one_line_texts(message)  # every reply's lines stay lines
        await stream.send(p.encode_frame(message), SEND_TIMEOUT)

    async def _read_frame(self, reader: Connection, cap: int, timeout: float,
                          *, first: bool) -> bytes | None:
        """One frame, or None on a clean end of stream at a frame boundary."""
        try:
            header = await reader.receive_exactly(p.HEADER, timeout)
        except anyio.IncompleteRead:
            if reader.buffer:
                raise BadClient("truncated frame header") from None
            return None
        except TimeoutError:
            if first:
                raise BadClient(f"no hello within {timeout:g}s") from None
            return None  # an idle client: close quietly
        try:
            size = p.frame_length(header, cap)
        except p.FrameError as exc:
            raise BadClient(str(exc), reply=f"agentcoordd: {exc}") from None
        budgeted = size if size > self.limits.hello_frame else 0
        if budgeted and not self.buffered.take(budgeted):
            raise BadClient(
                f"buffered-bytes limit: {size}-byte frame refused ({self.buffered.used} bytes "
                "being read)",
                reply=f"agentcoordd is busy: a {size}-byte request would exceed the limit of "
                f"{self.limits.buffered_bytes} bytes read at once across connections; retry shortly",
                exit_code=p.EXIT_OPERATIONAL,
            )
        try:
            return await reader.receive_exactly(size, FRAME_TIMEOUT)
        except anyio.IncompleteRead:
            raise BadClient(f"truncated frame (expected {size} bytes)") from None
        except TimeoutError:
            raise BadClient(f"stalled mid-frame (expected {size} bytes)") from None
        finally:
            if budgeted:
                self.buffered.give(budgeted)

    async def _session(self, stream: Connection, log: Any) -> None:
        reader = stream
        decoder = p.server_decoder()
        body = await self._read_frame(reader, self.limits.hello_frame, self.limits.hello_deadline,
                                      first=True)
        if body is None:
            log.debug("client left before hello")
            return
        hello = _decode(decoder, body)
        if not isinstance(hello, p.Hello):
            raise BadClient("first frame is not hello",
                            reply="agentcoordd: protocol error: the first frame must be Hello")
        if hello.protocol != p.PROTOCOL_VERSION:
            log.warning("protocol mismatch", client=hello.client, client_protocol=hello.protocol)
            await self._send(stream, p.Response(
                exit_code=p.EXIT_OPERATIONAL,
                error=f"agentcoordd {p.DAEMON_VERSION} speaks protocol {p.PROTOCOL_VERSION}, "
                f"{hello.client or 'the client'} {hello.client_version} speaks {hello.protocol}; "
                "restart the daemon with the same version: agentcoordctl daemon stop "
                "(the next call starts it again) or systemctl --user restart agentcoordd",
            ))
            return
        # A client that vanished right after sending its request still gets the
        # request done (an agent killed after `release` must not lose it).
        gone = False
        try:
            await self._send(stream, p.Welcome(protocol=p.PROTOCOL_VERSION,
                                               daemon_version=p.DAEMON_VERSION, pid=os.getpid()))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            gone = True
        pipeline = _Pipeline(gone)
        failure: Exception | None = None
        self._pipelines.add(pipeline)
        try:
            async with anyio.create_task_group() as tg:  # waits for the started requests' replies
                try:
                    await self._requests(reader, decoder, stream, pipeline, tg, log)
                except Exception as exc:  # noqa: BLE001 - raised below, after the replies before it
                    failure = exc
        except BaseExceptionGroup as group:
            raise _single(group) from None  # the connection's boundary sees what a plain read raised
        finally:
            self._pipelines.discard(pipeline)
        if failure is not None:
            raise failure
        if pipeline.gone:
            raise BadClient("client went away before its reply (request completed)")

    async def _requests(self, reader: Connection, decoder: msgspec.msgpack.Decoder,
                        stream: Any, pipeline: _Pipeline, tg: anyio.abc.TaskGroup, log: Any) -> None:
        """Read and run a connection's requests; replies go back in request order.

        Heartbeats of different lanes pipelined on one connection run together
        (PIPELINED at most), as they would from separate connections; any other
        request waits until everything before it is answered and runs alone, so a
        client that pipelines `claim` then `release` sees them in that order."""
        while True:
            body = await self._read_frame(reader, p.MAX_REQUEST_FRAME, IDLE_TIMEOUT, first=False)
            if body is None:
                return
            if self._stop is not None and self._stop.is_set():
                # Shutting down: finish what is in flight, start nothing new. The
                # client sees the connection close without a reply (not acknowledged).
                return
            request = _decode(decoder, body)
            if isinstance(request, p.Hello):
                raise BadClient("second hello", reply="agentcoordd: protocol error: repeated Hello")
            # Small frames only: what a connection holds decoded at once stays bounded.
            touches = _independent(request) if len(body) <= self.limits.hello_frame else None
            # Every request a client sent is run, also after it left (unanswered).
            if touches is None or touches & pipeline.touched:
                await pipeline.drained()
                if self._stop is not None and self._stop.is_set():
                    return
            if touches is not None:
                await pipeline.room()
                slot = pipeline.start(touches)
                tg.start_soon(self._run_pipelined, request, slot, stream, pipeline, log)
                continue
            if wants_progress(request) and not pipeline.gone:
                response = await self._dispatch_with_progress(stream, request, log)
            else:
                response = await self._dispatch(request, log, peer=stream.peer)
            if pipeline.gone:
                continue
            try:
                await self._send(stream, _as_sent(request, response))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                pipeline.gone = True

    async def _run_pipelined(self, request: Any, slot: _Slot, stream: Connection,
                             pipeline: _Pipeline, log: Any) -> None:
        try:
            slot.response = _as_sent(request, await self._dispatch(request, log, peer=stream.peer))
        finally:
            pipeline.touched -= slot.touches
            slot.done = True
        await self._reply_in_order(stream, pipeline)

    async def _reply_in_order(self, stream: Connection, pipeline: _Pipeline) -> None:
        """Send the finished replies at the head of the line. One task sends at a time:
        a request finishing meanwhile leaves its reply to that sender, which checks the
        head again after each send (no await between that check and its leaving)."""
        if pipeline.sending:
            return
        pipeline.sending = True
        try:
            while pipeline.slots and pipeline.slots[0].done:
                slot = pipeline.slots[0]
                if slot.response is None:
                    pipeline.gone = True  # no reply to send: a later one must not take its place
                elif not pipeline.gone:
                    try:
                        await self._send(stream, slot.response)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                        pipeline.gone = True  # the rest still completes, unanswered
                pipeline.answered()
        finally:
            pipeline.sending = False

    async def _dispatch_with_progress(self, stream: Any, request: Any, log: Any) -> p.Response:
        """Forward Progress frames while the request runs (call.ProgressChannel: dropped
        if the client lags, or awaited); after a failed send nothing more is forwarded,
        so a streaming handler's next `send` learns that the client is gone."""
        sender, receiver = anyio.create_memory_object_stream[p.Progress](256)

        async def forward() -> None:
            with receiver:
                async for frame in receiver:
                    try:
                        await self._send(stream, frame)
                    except Exception:  # noqa: BLE001 - the client went away (or stalled)
                        return

        async with anyio.create_task_group() as tg:
            tg.start_soon(forward)
            with sender:
                response = await self._dispatch(request, log, ProgressChannel(sender), peer=stream.peer)
        return response

    async def _dispatch(self, request: Any, log: Any, progress: Any = None, *,
                        peer: tuple[int | None, int] | None = None) -> p.Response:
        """Run one request to completion, shielded from shutdown cancellation. `peer` is
        the connection's (pid, uid) from the socket: who the caller really is."""
        self.in_flight += 1
        started = time.perf_counter()
        try:
            with anyio.CancelScope(shield=True):
                try:
                    response = await dispatch(request, self.svc, progress, peer)
                except Exception as exc:  # noqa: BLE001 - one bad request never kills the daemon
                    log.exception("request failed", op=type(request).__name__)
                    response = p.Response(exit_code=p.EXIT_OPERATIONAL,
                                          error=f"agentcoordd internal error: {exc}")
        finally:
            self.in_flight -= 1
            self.requests += 1
        elapsed = time.perf_counter() - started
        self.svc.metrics.request(request, response.exit_code, elapsed,
                                 timed_out=isinstance(response.payload, dict) and
                                 response.payload.get("timed_out") is True)
        log.debug("request", op=type(request).__name__, exit_code=response.exit_code,
                  ms=round(elapsed * 1000, 2))
        return response

    # ---- introspection -----------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "version": p.DAEMON_VERSION,
            "protocol": p.PROTOCOL_VERSION,
            "socket": self.socket_path,
            "state_dir": self.state_dir,
            "started_at": self.started_at,
            "uptime_seconds": round(time.time() - self.started_at, 3),
            "connections": self.connections,
            "requests": self.requests,
            "bad_clients": self.bad_clients,
            "refused_peers": self.refused_peers,
            "refused_connections": self.refused_connections,
            "buffered_bytes": self.buffered.used,
            "limits": {"max_connections": self.limits.max_connections,
                       "hello_frame": self.limits.hello_frame,
                       "hello_deadline": self.limits.hello_deadline,
                       "buffered_bytes": self.limits.buffered_bytes},
            "python": sys.version.split()[0],
        }


PIPELINED = 64  # requests of one connection running at once


def _independent(request: Any) -> frozenset[tuple[str, ...]] | None:
    """What a request that may run alongside its connection's others touches
    (None: it runs alone). A heartbeat touches its lane and the claim it names."""
    if isinstance(request, p.Heartbeat):
        touches = {("agent", request.agent_id)}
        if request.repo is not None or request.target is not None:
            touches.add(("target", request.repo or "", request.target or ""))
        return frozenset(touches)
    return None


def _single(group: BaseExceptionGroup) -> BaseException:
    """A task group's only error itself (a group of several stays a group)."""
    while len(group.exceptions) == 1 and isinstance(group.exceptions[0], BaseExceptionGroup):
        group = group.exceptions[0]
    return group.exceptions[0] if len(group.exceptions) == 1 else group


def _as_sent(request: Any, response: p.Response) -> p.Response:
    return p.payload_as_json(response) if getattr(request, "json_payload", False) else response


class _Slot:
    __slots__ = ("touches", "done", "response")

    def __init__(self, touches: frozenset[tuple[str, ...]]) -> None:
        self.touches = touches
        self.done = False
        self.response: p.Response | None = None


class _Pipeline:
    """One connection's requests running together, and their replies in order."""

    def __init__(self, gone: bool) -> None:
        self.gone = gone
        self.touched: frozenset[tuple[str, ...]] = frozenset()
        self.slots: collections.deque[_Slot] = collections.deque()  # started, not yet answered
        self.sending = False  # a task is sending the replies at the head of `slots`
        self._answer: anyio.Event | None = None  # set at the next answer (someone waits)

    @property
    def outstanding(self) -> int:
        return len(self.slots)

    def start(self, touches: frozenset[tuple[str, ...]]) -> _Slot:
        slot = _Slot(touches)
        self.touched |= touches
        self.slots.append(slot)
        return slot

    def answered(self) -> None:
        """The head's reply went out (or its client is gone)."""
        self.slots.popleft()
        if self._answer is not None:
            self._answer.set()
            self._answer = None

    async def _next_answer(self) -> None:
        if self._answer is None:
            self._answer = anyio.Event()
        await self._answer.wait()

    async def room(self) -> None:
        """Fewer than PIPELINED requests of this connection are running."""
        while len(self.slots) >= PIPELINED:
            await self._next_answer()

    async def drained(self) -> None:
        """Every request started so far has been answered (or found its client gone)."""
        while self.slots:
            await self._next_answer()


def _decode(decoder: msgspec.msgpack.Decoder, body: bytes) -> Any:
    """The typed request, or BadClient. Nesting depth is bounded: msgspec counts
    every level (also inside skipped unknown fields) against the interpreter's
    recursion limit and raises RecursionError past it."""
    try:
        return decoder.decode(body)
    except RecursionError:
        raise BadClient(f"frame nested deeper than {sys.getrecursionlimit()} levels",
                        reply="agentcoordd: invalid request: nested too deeply") from None
    except msgspec.ValidationError as exc:
        raise BadClient(f"invalid request: {exc}",
                        reply=f"agentcoordd: invalid request: {exc}") from None
    except msgspec.DecodeError as exc:
        raise BadClient(f"undecodable frame: {exc}",
                        reply=f"agentcoordd: undecodable frame: {exc}") from None


def _private_dir(directory: str) -> None:
    """Create the socket directory 0700; tighten it only if we own it and it is ours by name."""
    try:
        os.makedirs(directory, mode=0o700)
        return
    except FileExistsError:
        pass
    st = os.stat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise StartupError(f"socket directory {directory} is not a directory")
    if st.st_uid == os.getuid() and st.st_mode & 0o077 and os.path.basename(directory) in (
        "agentcoord", "run"
    ):
        os.chmod(directory, 0o700)


def _try_lock(path: str) -> int | None:
    """An fd holding flock(LOCK_EX) on `path`, or None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def _read_pid(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip() or None
    except (OSError, UnicodeDecodeError):
        return None
