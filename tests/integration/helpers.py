"""Helpers for the integration suite: a real agentcoordd subprocess, ctl runs, a raw client."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from agentcoordd import protocol as p

PYTHON = sys.executable
START_WAIT = 10.0
# A bound on waiting for a long-running ctl (status --watch, wait) to show something or
# to end after SIGINT: each wait returns as soon as that happens. Generous, so a loaded
# machine (start-up and every frame several times slower) still passes; inside the
# per-test timeout (pyproject: 120 s).
OUTPUT_WAIT = 45.0


def read_until(fd: int, predicate: Callable[[bytes], bool], timeout: float = OUTPUT_WAIT,
               data: bytes = b"") -> bytes:
    """Read `fd` (a pipe or a pty) until predicate(everything read) holds."""
    deadline = time.monotonic() + timeout
    while not predicate(data):
        left = deadline - time.monotonic()
        assert left > 0, f"timed out after {timeout:g}s; got {data[-2000:]!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # pty closed
                break
            if not chunk:
                break
            data += chunk
    return data


def wait_until(check: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    """check()'s first truthy value, polled every `interval` until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout:g}s")
        time.sleep(interval)


def interrupt(proc: subprocess.Popen, timeout: float = OUTPUT_WAIT) -> tuple[Any, Any]:
    """Ctrl-C, then what is left of its output once it ended."""
    proc.send_signal(signal.SIGINT)
    return proc.communicate(timeout=timeout)


@contextlib.contextmanager
def reaped(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """However the block ends (a failed wait too), the process is gone and its pipes are
    closed: a process left running would load the machine for the rest of the run, and
    its Popen and pipes, freed at some later garbage collection, raise ResourceWarnings
    that pytest pins on whichever test is running then."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def wait_for_socket(path: Path, proc: subprocess.Popen | None = None,
                    timeout: float = START_WAIT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"daemon exited early with {proc.returncode}")
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(str(path))
            return
        except OSError:
            time.sleep(0.01)
        finally:
            probe.close()
    raise AssertionError(f"no daemon answered on {path}")


@dataclass
class Daemon:
    """One agentcoordd subprocess plus the environment a ctl caller would have."""

    base: Path
    socket: Path
    state_dir: Path
    root: Path
    log_path: Path
    proc: subprocess.Popen | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    # A command the daemon runs under (`faketime -f +300s`: a machine whose clock is off).
    wrapper: list[str] = field(default_factory=list)

    # -- life cycle --
    def start(self, *args: str) -> subprocess.Popen:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.wrapper, PYTHON, "-m", "agentcoordd.daemon.main", "--foreground", "--socket",
                 str(self.socket), "--state-dir", str(self.state_dir), "--log-level", "debug",
                 *args],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                env=self.daemon_env(),
            )
        wait_for_socket(self.socket, self.proc)
        return self.proc

    def daemon_env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(self.base / "home"),
                "XDG_STATE_HOME": str(self.base / "xdgstate"), **self.extra_env}

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log(self) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def log_events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    # -- callers --
    def env(self, **extra: str) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(self.base / "home"),
            "XDG_STATE_HOME": str(self.base / "xdgstate"),
            "XDG_CONFIG_HOME": str(self.base / "xdgconfig"),
            "AGENT_COORD_SOCKET": str(self.socket),
            "AGENT_COORD_STATE_ROOT": str(self.root),
            "AGENT_COORD_NO_AUTOSTART": "1",
        }
        env.update(extra)
        return env

    def ctl(self, *args: str, env: dict[str, str] | None = None, input: bytes | None = None,
            timeout: float = 30, unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        full = self.env(**(env or {}))
        for name in unset:
            full.pop(name, None)
        return subprocess.run([PYTHON, "-m", "agentcoordctl.cli", *args], env=full, input=input,
                              capture_output=True, timeout=timeout, cwd=str(self.base))

    def raw(self) -> RawClient:
        return RawClient(self.socket)

    def dashboard_token(self) -> str:
        """The token of its loopback HTTP server (the 0600 file beside the socket;
        empty before the server has made one)."""
        path = Path(f"{self.socket}.dashboard-token")
        return path.read_text().strip() if path.exists() else ""

    def dashboard_headers(self) -> dict[str, str]:
        token = self.dashboard_token()
        return {"Authorization": f"Bearer {token}"} if token else {}


class RawClient:
    """Speaks the wire protocol directly (and misbehaves on request)."""

    def __init__(self, path: Path, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.decoder = p.client_decoder()

    def send_frame(self, obj: Any) -> None:
        self.sock.sendall(p.frame(msgspec.msgpack.encode(obj)))

    def recv(self) -> Any:
        return self.decoder.decode(p.recv_frame(self.sock))

    def hello(self) -> p.Welcome:
        self.send_frame(p.Hello(protocol=p.PROTOCOL_VERSION, client="raw-test"))
        welcome = self.recv()
        assert isinstance(welcome, p.Welcome), welcome
        return welcome

    def call(self, request: Any) -> p.Response:
        self.send_frame(request)
        while True:
            reply = self.recv()
            if isinstance(reply, p.Response):
                return reply

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_daemon(base: Path) -> Daemon:
    root = base / "root"
    root.mkdir(exist_ok=True)
    return Daemon(base=base, socket=base / "run" / "d.sock", state_dir=base / "state",
                  root=root, log_path=base / "daemon.log")


def local_request(d: Daemon, message: Any, **env: str) -> Any:
    """Attach a caller env like ctl would (explicit local root unless overridden)."""
    message.caller = p.Caller(env={"HOME": str(d.base / "home"),
                                   "XDG_CONFIG_HOME": str(d.base / "xdgconfig"), **env},
                              cwd=str(d.base), pid=os.getpid())
    if message.selection == p.Selection() and "AGENT_COORD_LOCAL" not in env:
        message.selection = p.Selection(state_root=str(d.root))
    return message
