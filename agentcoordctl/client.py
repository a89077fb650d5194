"""Talking to agentcoordd: connect, autostart, one request, the final response.

Only the standard library, msgspec and agentcoordd.protocol are imported here;
`subprocess` is imported only when a daemon has to be started.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from agentcoordd import protocol as p
from agentcoordd.model.backoff import AUTOSTART, CONNECT

CLIENT_NAME = "agentcoordctl"
CLIENT_VERSION = p.DAEMON_VERSION  # one package, one version
DEFAULT_TIMEOUT = 30.0
AUTOSTART_WAIT = 10.0
FORWARD_PREFIXES = ("AGENT_COORD_", "XDG_")
FORWARD_NAMES = ("CODEX_THREAD_ID", "HOME")
# What an autostarted daemon inherits: never session ids, tokens or backend
# selections of the first caller (those travel with each request instead).
# XDG_CONFIG_HOME: where the machine's config (agentcoordd.toml, env files) lives; no secret.
CLEAN_ENV_NAMES = ("PATH", "HOME", "LANG", "LC_ALL", "XDG_RUNTIME_DIR", "XDG_STATE_HOME",
                   "XDG_CONFIG_HOME")
_TRUE = ("1", "true", "yes")


class ClientError(Exception):
    """ctl could not get an answer: exit 2 with a one-line message."""

    exit_code = p.EXIT_OPERATIONAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CallTimedOut(ClientError):
    """The daemon did not answer within the call's timeout (state UNKNOWN)."""


def caller(env: Mapping[str, str] | None = None) -> p.Caller:
    env = os.environ if env is None else env
    forwarded = {
        k: v for k, v in env.items() if k.startswith(FORWARD_PREFIXES) or k in FORWARD_NAMES
    }
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    return p.Caller(env=forwarded, cwd=cwd, pid=os.getpid())


def timeout_from_env(env: Mapping[str, str] | None = None) -> float:
    env = os.environ if env is None else env
    raw = env.get("AGENT_COORD_TIMEOUT", "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if math.isfinite(value) and value > 0 else DEFAULT_TIMEOUT


def socket_path(env: Mapping[str, str] | None = None) -> str:
    """$AGENT_COORD_SOCKET, else the default path — unless no socket is there and the
    daemon that owns our state dir serves another one (a caller without
    XDG_RUNTIME_DIR computes a different path): then that one, never a second daemon."""
    env = os.environ if env is None else env
    path = p.default_socket_path(env)
    if env.get("AGENT_COORD_SOCKET") or os.path.exists(path):
        return path
    other = p.read_state_dir_owner(p.default_state_dir(env)).get("socket")
    if isinstance(other, str) and other != path and os.path.exists(other):
        return other
    return path


def _connect(path: str, timeout: float) -> socket.socket:
    """Connect within `timeout`; a full listen backlog (EAGAIN: the daemon is busy
    accepting) is waited out rather than reported."""
    deadline = time.monotonic() + timeout
    retry = 0
    while True:
        retry += 1
        delay = CONNECT.delay(retry)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            return sock
        except BlockingIOError:
            sock.close()
            if time.monotonic() + delay > deadline:
                raise
        except BaseException:
            sock.close()
            raise
        time.sleep(delay)


def _unreachable(exc: OSError) -> bool:
    return isinstance(exc, (FileNotFoundError, ConnectionRefusedError)) or exc.errno in (
        errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK,
    )


def start_daemon(path: str, env: Mapping[str, str]) -> tuple[Any, str]:
    """Start agentcoordd detached for this user; returns (the child, log path)."""
    import subprocess

    state_dir = p.default_state_dir(env)
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    log_path = os.path.join(state_dir, "agentcoordd.log")
    clean = {k: env[k] for k in CLEAN_ENV_NAMES if env.get(k)}
    clean.setdefault("PATH", os.defpath)
    command = [sys.executable, "-m", "agentcoordd.daemon.main", "--foreground",
               "--socket", path, "--state-dir", state_dir]
    with open(log_path, "ab", buffering=0) as log, open(os.devnull, "rb") as devnull:
        os.chmod(log_path, 0o600)
        child = subprocess.Popen(
            command, stdin=devnull, stdout=subprocess.DEVNULL, stderr=log, env=clean,
            cwd="/", start_new_session=True, close_fds=True,
        )
    return child, log_path


class Connection:
    """A connected socket, and the daemon this call started (if it had to)."""

    def __init__(self, sock: socket.socket, spawned: Any = None) -> None:
        self.sock = sock
        self.spawned = spawned

    def settle(self, daemon_pid: int) -> None:
        """Another daemon answered (a racing ctl's won): our own start-up, still
        booting, must not take over once that one stops. It serves nobody yet."""
        child = self.spawned
        if child is not None and daemon_pid and daemon_pid != child.pid and child.poll() is None:
            with contextlib.suppress(OSError):
                child.terminate()


def connect(path: str, *, timeout: float, autostart: bool = True,
            env: Mapping[str, str] | None = None,
            notify: Callable[[str], None] | None = None) -> Connection:
    """A connected socket to the daemon, starting one if allowed and needed."""
    env = os.environ if env is None else env
    notify = notify or _stderr
    try:
        return Connection(_connect(path, timeout))
    except OSError as exc:
        if not _unreachable(exc):
            raise ClientError(f"cannot reach agentcoordd at {path}: {exc.strerror or exc}") from None
    if not autostart:
        raise ClientError(f"agentcoordd is not running (socket {path})")
    other = _running_elsewhere(path, env)
    if other is not None and env.get("AGENT_COORD_SOCKET"):  # asked for this socket: say, don't override
        raise ClientError(
            f"agentcoordd already runs for this user ({_described(other)}); AGENT_COORD_SOCKET "
            f"names another socket, {path}: use that daemon with AGENT_COORD_SOCKET="
            f"{other['socket']}, or stop it first (kill {other['pid']}) to start one here")
    if other is not None:
        notify(f"notice: using the running agentcoordd ({_described(other)}); this environment "
               f"would have started a second one on {path} (its XDG_RUNTIME_DIR or XDG_STATE_HOME "
               f"differ): set AGENT_COORD_SOCKET={other['socket']} to use it without this notice")
        try:
            return Connection(_connect(other["socket"], timeout))
        except OSError as exc:
            raise ClientError(f"cannot reach agentcoordd at {other['socket']}: "
                              f"{exc.strerror or exc}") from None
    if (env.get("AGENT_COORD_NO_AUTOSTART") or "").strip().lower() in _TRUE:
        raise ClientError(
            f"agentcoordd is not running (socket {path}) and AGENT_COORD_NO_AUTOSTART is set: "
            "start it with `systemctl --user start agentcoordd.socket` (or run `agentcoordd`)"
        )
    child, log_path = start_daemon(path, env)
    pid = child.pid
    notify(f"agentcoordctl: started agentcoordd (pid {pid}, socket {path}, log {log_path})")
    deadline = time.monotonic() + min(timeout, AUTOSTART_WAIT)
    retry = 0
    while True:
        try:
            return Connection(_connect(path, max(deadline - time.monotonic(), 0.05)), child)
        except OSError as exc:
            if not _unreachable(exc) or time.monotonic() >= deadline:
                raise ClientError(
                    f"started agentcoordd (pid {pid}) but it did not answer on {path} within "
                    f"{min(timeout, AUTOSTART_WAIT):g}s; see {log_path}"
                ) from None
        if child.poll() is not None:
            # It exited: a racing ctl's daemon may serve now; otherwise say why at once.
            with contextlib.suppress(OSError):
                return Connection(_connect(path, 1.0))
            raise ClientError(
                f"agentcoordd (pid {pid}) exited with {child.returncode} before answering on "
                f"{path}: {_last_line(log_path)}"
            )
        retry += 1
        time.sleep(AUTOSTART.delay(retry))


def _running_elsewhere(path: str, env: Mapping[str, str]) -> dict[str, Any] | None:
    """One daemon per user: another of this user's daemons that runs on a socket other than
    `path` (this environment's XDG_RUNTIME_DIR, XDG_STATE_HOME or AGENT_COORD_SOCKET
    differ from its). Starting a second would split the user's state without a word."""
    running = [d for d in p.running_daemons(env) if d["socket"] != path]
    return running[0] if running else None  # none, or ours still starting (a racing ctl's)


def _described(daemon: dict[str, Any]) -> str:
    return (f"pid {daemon['pid']}, socket {daemon['socket']}, state dir {daemon['state_dir']}, "
            f"local state root {daemon['state_root']}")


def _last_line(log_path: str) -> str:
    """The daemon's own last word (its stderr line `agentcoordd: …`), for the error."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 8192))
            lines = [line for line in fh.read().decode("utf-8", "replace").splitlines()
                     if line.startswith("agentcoordd:")]
    except OSError:
        lines = []
    return lines[-1] if lines else f"see {log_path}"


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def version_notice(daemon_version: str, pid: int) -> str | None:
    if daemon_version == CLIENT_VERSION:
        return None
    relation = "older" if _vkey(daemon_version) < _vkey(CLIENT_VERSION) else "newer"
    return (
        f"notice: agentcoordd {daemon_version} (pid {pid}) is {relation} than agentcoordctl "
        f"{CLIENT_VERSION}; restart it: `agentcoordctl daemon stop` (the next call starts the "
        "installed version) or `systemctl --user restart agentcoordd`"
    )


def _vkey(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def request(message: Any, *, timeout: float | None = None, autostart: bool = True,
            env: Mapping[str, str] | None = None, path: str | None = None,
            on_progress: Callable[[p.Progress], None] | None = None,
            notify: Callable[[str], None] | None = None,
            idle: float | None = None) -> tuple[p.Response, p.Welcome | None]:
    """Send one request and return the final response (and the daemon's welcome).
    `idle`: a streaming request's bound on the silence between two frames."""
    env = os.environ if env is None else env
    timeout = timeout if timeout is not None else timeout_from_env(env)
    path = path or socket_path(env)
    notify = notify or _stderr
    deadline = time.monotonic() + timeout
    message.timeout = timeout
    encoder = p.encoder()
    decoder = p.client_decoder()
    body = encoded(message, encoder)
    connection = connect(path, timeout=timeout, autostart=autostart, env=env, notify=notify)
    sock = connection.sock
    try:
        hello = p.Hello(protocol=p.PROTOCOL_VERSION, client=CLIENT_NAME,
                        client_version=CLIENT_VERSION)
        # Pipelined: hello and request in one write, one round trip.
        try:
            sock.sendall(p.frame(encoder.encode(hello)) + p.frame(body))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused unread (a busy daemon): its one-line reason may be waiting below
        welcome: p.Welcome | None = None
        silent = False
        while True:
            wait = max(deadline - time.monotonic(), 0.001)
            silent = idle is not None and idle < wait
            sock.settimeout(min(wait, idle) if silent and idle is not None else wait)
            reply = decoder.decode(p.recv_frame(sock))
            if isinstance(reply, p.Welcome):
                welcome = reply
                connection.settle(reply.pid)
                note = version_notice(reply.daemon_version, reply.pid)
                if note:
                    notify(note)
            elif isinstance(reply, p.Progress):
                if on_progress is not None:
                    on_progress(reply)
            else:
                return reply, welcome
    except (socket.timeout, TimeoutError):
        if silent:
            raise CallTimedOut(f"agentcoordd sent nothing for {idle:g}s (socket {path}); coordination "
                               "state is UNKNOWN") from None
        raise CallTimedOut(
            f"agentcoordd did not answer within {timeout:g}s (socket {path}); coordination state "
            "is UNKNOWN"
        ) from None
    except (ConnectionError, OSError) as exc:
        raise ClientError(
            f"lost the connection to agentcoordd ({exc}); coordination state is UNKNOWN"
        ) from None
    except (p.FrameError, ValueError, RecursionError) as exc:  # msgspec errors are ValueErrors
        raise ClientError(f"unreadable reply from agentcoordd: {exc}") from None
    finally:
        sock.close()


def _usage(message: str) -> ClientError:
    error = ClientError(f"agentcoordctl: {message}")
    error.exit_code = p.EXIT_USAGE
    return error


def encoded(message: Any, encoder: Any) -> bytes:
    """The request's frame body, checked as the daemon will check it: a value out of
    the wire bounds names its option, non-UTF-8 text and oversized requests are
    usage errors here (exit 1) rather than a refused or dropped connection."""
    try:
        msgspec.convert(msgspec.to_builtins(message), type(message))
        body = encoder.encode(message)
    except UnicodeEncodeError:  # an argument that is not UTF-8 (undecodable argv bytes)
        raise _usage("invalid argument: not valid UTF-8 (agentcoordctl takes UTF-8 text only)") from None
    except msgspec.ValidationError as exc:
        reason, _, where = str(exc).partition(" - at `$.")
        option = "--" + where.rstrip("`").split(".")[-1].split("[")[0].replace("_", "-")
        raise _usage(f"invalid value for {option}: {_bound_text(reason)}") from None
    if len(body) > p.MAX_REQUEST_FRAME:
        raise _usage(f"request of {len(body)} bytes exceeds the {p.MAX_REQUEST_FRAME}-byte limit; "
                     "an argument is too long")
    return body


def _bound_text(reason: str) -> str:
    if "`int`" in reason or "`float`" in reason:
        return "must be a finite number of reasonable size (" + reason + ")"
    return reason


def daemon_running(path: str, timeout: float = 2.0) -> bool:
    try:
        _connect(path, timeout).close()
        return True
    except OSError:
        return False
