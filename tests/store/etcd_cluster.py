"""Real etcd for tests: single- and multi-member clusters on free loopback ports.

`EtcdCluster(tmp_path, members=1|3).start()` starts `etcd` processes (each in
its own process group, data and log under `tmp_path`), waits until every
member answers `/health`, and `stop()` ends exactly those processes. A member
can be killed and restarted (`kill(i)`, `restart(i)`) for failure tests.

Fixtures (import them into a test module or conftest to use them):

* `etcd_server` — one single-member cluster per test session;
* `etcd_store`  — an `EtcdStore` on it with a fresh key prefix per test, so
  tests never see each other's records (and the store's key-prefix option is
  exercised all the time).

Without an `etcd` binary these skip locally and FAIL when `CI=true`: CI must
install it (`tests/store/etcd-ci-install.sh`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from agentcoordd.store.etcd import EtcdStore

HEALTH_TIMEOUT = 20.0


def etcd_binary() -> str | None:
    return os.environ.get("AGENT_COORD_TEST_ETCD") or shutil.which("etcd")


def require_etcd() -> str:
    """The etcd binary, or skip (locally) / fail (CI=true)."""
    binary = etcd_binary()
    if binary is None:
        message = "etcd binary not found (install: bash tests/store/etcd-ci-install.sh)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message + " — CI must run the etcd tests", pytrace=False)
        pytest.skip(message)
    return binary


def _free_ports(count: int) -> list[int]:
    """Ports the kernel just handed out (held together so they are distinct)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Member:
    def __init__(self, name: str, client_port: int, peer_port: int, data_dir: Path, log_path: Path) -> None:
        self.name = name
        self.client_port = client_port
        self.peer_port = peer_port
        self.data_dir = data_dir
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class EtcdCluster:
    """A throwaway etcd cluster of `members` processes on 127.0.0.1."""

    def __init__(self, base_dir: Path, members: int = 1, extra_args: list[str] | None = None) -> None:
        self.binary = require_etcd()
        self.base_dir = Path(base_dir)
        self.extra_args = list(extra_args or [])
        self.token = "agentcoord-test-" + uuid.uuid4().hex[:8]
        ports = _free_ports(2 * members)
        self.members = [
            Member(
                f"m{i}",
                ports[2 * i],
                ports[2 * i + 1],
                self.base_dir / f"m{i}.etcd",
                self.base_dir / f"m{i}.log",
            )
            for i in range(members)
        ]

    @property
    def endpoints(self) -> list[str]:
        return [m.client_url for m in self.members]

    def _args(self, m: Member, state: str) -> list[str]:
        initial = ",".join(f"{x.name}={x.peer_url}" for x in self.members)
        return [
            self.binary,
            "--name", m.name,
            "--data-dir", str(m.data_dir),
            "--listen-client-urls", m.client_url,
            "--advertise-client-urls", m.client_url,
            "--listen-peer-urls", m.peer_url,
            "--initial-advertise-peer-urls", m.peer_url,
            "--initial-cluster", initial,
            "--initial-cluster-token", self.token,
            "--initial-cluster-state", state,
            # Small heartbeat/election so failure tests see elections quickly.
            "--heartbeat-interval", "50",
            "--election-timeout", "500",
            "--logger", "zap",
            "--log-outputs", "stderr",
            "--log-level", "warn",
            *self.extra_args,
        ]

    def _spawn(self, m: Member, state: str) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        log = open(m.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            m.process = subprocess.Popen(
                self._args(m, state),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # own process group: stop() ends it and only it
                env={k: v for k, v in os.environ.items() if not k.startswith("ETCD")},
            )
        finally:
            log.close()

    def start(self) -> "EtcdCluster":
        for m in self.members:
            self._spawn(m, "new")
        self.wait_healthy()
        return self

    def wait_healthy(self, members: list[Member] | None = None, timeout: float = HEALTH_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        pending = list(members or [m for m in self.members if m.process is not None])
        with httpx.Client(timeout=1.0, trust_env=False) as http:
            while pending:
                for m in list(pending):
                    if not m.running:
                        raise RuntimeError(f"etcd member {m.name} exited:\n{self.log_tail(m)}")
                    with contextlib.suppress(httpx.HTTPError, ValueError):
                        if http.get(m.client_url + "/health").json().get("health") == "true":
                            pending.remove(m)
                if pending:
                    if time.monotonic() > deadline:
                        self.stop()
                        names = ", ".join(m.name for m in pending)
                        raise RuntimeError(f"etcd members not healthy after {timeout}s: {names}")
                    time.sleep(0.05)

    def log_tail(self, m: Member, lines: int = 30) -> str:
        try:
            return "\n".join(m.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Kill one member abruptly (default SIGKILL), as a crashed machine would."""
        m = self.members[index]
        if m.process is not None and m.process.poll() is None:
            os.killpg(m.process.pid, sig)
            m.process.wait(timeout=10)

    def freeze(self, index: int, frozen: bool = True) -> None:
        """SIGSTOP one member (every request to it hangs), or SIGCONT it again."""
        m = self.members[index]
        if m.process is not None and m.process.poll() is None:
            os.killpg(m.process.pid, signal.SIGSTOP if frozen else signal.SIGCONT)

    def restart(self, index: int) -> None:
        """Start a killed member again on its old data dir and ports."""
        m = self.members[index]
        self.kill(index)
        self._spawn(m, "existing")
        self.wait_healthy([m])

    def leader_index(self) -> int | None:
        with httpx.Client(timeout=1.0, trust_env=False) as http:
            for i, m in enumerate(self.members):
                if not m.running:
                    continue
                with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                    status = http.post(m.client_url + "/v3/maintenance/status", content=b"{}").json()
                    if status["leader"] == status["header"]["member_id"]:
                        return i
        return None

    def stop(self) -> None:
        for m in self.members:
            p = m.process
            if p is None or p.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)

    def __enter__(self) -> "EtcdCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_cluster(base_dir: Path, members: int = 1, extra_args: list[str] | None = None) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(base_dir, members, extra_args)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


# ---- fixtures ------------------------------------------------------------------


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with running_cluster(tmp_path_factory.mktemp("etcd")) as cluster:
        yield cluster


@pytest.fixture
async def etcd_store(etcd_server: EtcdCluster) -> AsyncIterator[EtcdStore]:
    """An EtcdStore under a key prefix no other test uses."""
    store = EtcdStore(etcd_server.endpoints, key_prefix=f"t-{uuid.uuid4().hex[:12]}/", timeout=5.0)
    try:
        yield store
    finally:
        await store.aclose()
