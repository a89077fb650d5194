"""Leases on every backend, with real daemons: a local root, our Worker under
`wrangler dev`, and etcd (issue 40). The pieces the fixtures (conftest.py) and the
tests share.

A `Backend` is what the machines of a test share, with a direct way to its records
(`read`/`plant`, as another writer would); a `Machine` is one daemon and the
environment its agents' shells export (`machine.ctl(...)` runs agentcoordctl as
such an agent). Every test gets its own repository and agent ids (the Worker and
etcd are shared by a module).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))  # as tests/store sees it

from etcd_cluster import EtcdCluster  # noqa: E402
from integration.helpers import Daemon, wait_until  # noqa: E402,F401 - wait_until: re-exported
from worker_fixture import WorkerServer  # noqa: E402

from agentcoordd.store.etcd import EtcdStore  # noqa: E402

BACKENDS = ("local", "http", "etcd")
FAMILIES = ["claims", "heartbeats", "batches", "events"]


@dataclass
class Backend:
    """One backend the machines of a test share, and a direct way to its records."""

    kind: str
    env: dict[str, str]  # what an agent's shell on any machine exports for it
    store: Callable[[], Any]  # a Store reaching it directly (another writer)
    root: Path | None = None

    def _run(self, work: Callable[[Any], Any]) -> Any:
        async def go() -> Any:
            store = self.store()
            try:
                return await work(store)
            finally:
                await store.aclose()

        return anyio.run(go)

    def read(self, path: str) -> Any:
        async def get(store: Any) -> Any:
            found = await store.get(path)
            return None if found is None else found.data
        return self._run(get)

    def plant(self, path: str, data: Any) -> None:
        """Write `path` whatever is there (a record another tool or an older run left)."""
        async def put(store: Any) -> None:
            found = await store.get(path)
            if found is None:
                await store.create(path, data)
            else:
                await store.replace(path, data, found.version)
        self._run(put)

    def events(self, batch_id: str) -> list[dict[str, Any]]:
        async def listing(store: Any) -> list[dict[str, Any]]:
            from agentcoordd.store.base import list_all

            page = await list_all(store, f"events/{batch_id}")
            return [entry.data for entry in page.entries]
        return self._run(listing)


@dataclass
class Machine:
    """One daemon, and the environment of the agents that call it."""

    daemon: Daemon
    backend: Backend
    env: dict[str, str] = field(default_factory=dict)

    def ctl(self, *args: str, timeout: float = 60, **extra: str) -> subprocess.CompletedProcess:
        unset = () if self.backend.kind == "local" else ("AGENT_COORD_STATE_ROOT",)
        return self.daemon.ctl(*args, env={**self.backend.env, **self.env, **extra},
                               timeout=timeout, unset=unset)

    def json(self, *args: str, **extra: str) -> Any:
        result = self.ctl(*args, "--json", **extra)
        assert result.returncode == 0, result.stderr.decode()
        return json.loads(result.stdout)

    def argv(self, *args: str) -> tuple[list[str], dict[str, str]]:
        """Command and environment for a ctl the test runs itself (in the background)."""
        from integration.helpers import PYTHON

        env = self.daemon.env(**self.backend.env, **self.env)
        if self.backend.kind != "local":
            env.pop("AGENT_COORD_STATE_ROOT", None)
        return [PYTHON, "-m", "agentcoordctl.cli", *args], env


def make_backend(kind: str, request: pytest.FixtureRequest, base: Path) -> Backend:
    if kind == "local":
        root = base / "shared-root"
        root.mkdir()
        from agentcoordd.store.local import LocalStore

        return Backend(kind, {"AGENT_COORD_STATE_ROOT": str(root)}, lambda: LocalStore(root), root)
    if kind == "http":
        worker: WorkerServer = request.getfixturevalue("lease_worker")
        return Backend(kind, {"AGENT_COORD_API_URL": worker.url,
                              "AGENT_COORD_API_TOKEN": worker.tokens["m"]},
                       lambda: worker.store("ops"))
    cluster: EtcdCluster = request.getfixturevalue("lease_etcd")
    prefix = f"lease-{uuid.uuid4().hex[:10]}/"
    return Backend(kind, {"AGENT_COORD_ETCD_ENDPOINTS": ",".join(cluster.endpoints),
                          "AGENT_COORD_ETCD_PREFIX": prefix},
                   lambda: EtcdStore(cluster.endpoints, key_prefix=prefix, timeout=5.0))
