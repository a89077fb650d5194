"""The real processes a run needs: one agentcoordd per simulated machine, and the backend.

Backends reuse the test suite's launchers (tests/ is put on sys.path): the
HTTP backend is our Worker under `wrangler dev --local` with one machine token
per simulated machine (tests/worker_fixture.py), etcd is a one-member cluster
(tests/store/etcd_cluster.py). The local backend is a state root in the run
directory. Sockets live in a short /tmp directory (sun_path limit).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ["claims", "heartbeats", "batches", "events"]


def _tests_on_path() -> None:
    tests = str(REPO_ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)


class Machine:
    """One simulated machine: its agentcoordd and the environment its agents' shells have."""

    def __init__(self, index: int, base: Path, backend_env: dict[str, str], log_dir: Path) -> None:
        self.index = index
        self.name = f"m{index}"
        self.base = base / self.name
        self.base.mkdir(parents=True, exist_ok=True)
        self.socket = self.base / "d.sock"
        self.log = log_dir / f"agentcoordd-{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.wrapper: list[str] = []  # a command the daemon runs under (faketime: a skewed clock)
        self.daemon_env: dict[str, str] = {}  # more of the daemon's own environment
        self.env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(self.base / "home"),
            "XDG_STATE_HOME": str(self.base / "xdgstate"),
            "XDG_CONFIG_HOME": str(self.base / "xdgconfig"),
            "AGENT_COORD_SOCKET": str(self.socket),
            "AGENT_COORD_NO_AUTOSTART": "1",
            "AGENT_COORD_MACHINE_ID": self.name,
            **backend_env,
        }

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.wrapper, sys.executable, "-m", "agentcoordd.daemon.main", "--foreground",
                 "--socket", str(self.socket), "--state-dir", str(self.base / "state"),
                 "--log-level", "info"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                env={k: self.env[k] for k in ("PATH", "HOME", "XDG_STATE_HOME")}
                | {"AGENT_COORD_MACHINE_ID": self.name, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
                | self.daemon_env,
                cwd=str(self.base))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agentcoordd {self.name} exited with {self.proc.returncode}; see {self.log}")
            probe = socket.socket(socket.AF_UNIX)
            try:
                probe.connect(str(self.socket))
                return
            except OSError:
                time.sleep(0.02)
            finally:
                probe.close()
        raise RuntimeError(f"agentcoordd {self.name} did not answer on {self.socket}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def backend(kind: str, run_dir: Path, machines: int) -> Iterator[tuple[list[dict[str, str]], dict[str, Any]]]:
    """Per-machine backend environments and a description, for the life of the run."""
    if kind == "local":
        root = run_dir / "root"
        root.mkdir(parents=True, exist_ok=True)
        yield [{"AGENT_COORD_STATE_ROOT": str(root)} for _ in range(machines)], {"kind": "local", "root": str(root)}
        return
    if kind == "http":
        _tests_on_path()
        from worker_fixture import launch_worker  # type: ignore[import-not-found]

        scopes: dict[str, Any] = {f"m{i}": (FAMILIES, FAMILIES) for i in range(machines)}
        base = Path(tempfile.mkdtemp(prefix="acsim-worker."))
        try:
            with launch_worker(base, scopes) as server:
                envs = [{"AGENT_COORD_API_URL": server.url, "AGENT_COORD_API_TOKEN": server.tokens[f"m{i}"]}
                        for i in range(machines)]
                yield envs, {"kind": "http", "url": server.url}
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return
    if kind == "etcd":
        _tests_on_path()
        from store.etcd_cluster import running_cluster  # type: ignore[import-not-found]

        base = Path(tempfile.mkdtemp(prefix="acsim-etcd."))
        try:
            with running_cluster(base) as cluster:
                endpoints = ",".join(cluster.endpoints)
                yield [{"AGENT_COORD_ETCD_ENDPOINTS": endpoints} for _ in range(machines)], \
                    {"kind": "etcd", "endpoints": endpoints}
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return
    raise ValueError(f"unknown backend {kind!r} (local, http, etcd)")


@contextlib.contextmanager
def machines(count: int, backend_envs: list[dict[str, str]], log_dir: Path) -> Iterator[list[Machine]]:
    base = Path(tempfile.mkdtemp(prefix="acsim."))
    started: list[Machine] = []
    try:
        for i in range(count):
            m = Machine(i, base, backend_envs[i], log_dir)
            m.start()
            started.append(m)
        yield started
    finally:
        for m in started:
            m.stop()
        shutil.rmtree(base, ignore_errors=True)
