"""Fixtures for agentcoordd end to end on a real etcd: ctl subprocess -> daemon -> etcd.

Reuses the real-daemon helpers of tests/integration and the real etcd clusters
of tests/store/etcd_cluster.py (which skip locally / fail in CI without etcd).
Every test gets its own key prefix (AGENT_COORD_ETCD_PREFIX), so tests on the
shared single-member cluster never see each other's records.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))  # as tests/store sees it

from etcd_cluster import EtcdCluster, etcd_server  # noqa: E402,F401 - fixture used by name
from integration.helpers import Daemon, make_daemon  # noqa: E402

from agentcoordd.store.etcd import EtcdStore  # noqa: E402

NO_LOCAL = ("AGENT_COORD_STATE_ROOT",)


class EtcdDaemon:
    """A real agentcoordd whose callers select etcd through their environment."""

    def __init__(self, daemon: Daemon, endpoints: list[str], prefix: str,
                 user: str | None = None, password: str | None = None) -> None:
        self.daemon = daemon
        self.endpoints = endpoints
        self.prefix = prefix
        self.user = user
        self.password = password
        self.caller_env: dict[str, str] = {
            "AGENT_COORD_ETCD_ENDPOINTS": ",".join(endpoints),
            "AGENT_COORD_ETCD_PREFIX": prefix,
        }

    def ctl(self, *args: str, env: dict[str, str] | None = None, unset: tuple[str, ...] = NO_LOCAL,
            **kwargs: Any) -> Any:
        return self.daemon.ctl(*args, env={**self.caller_env, **(env or {})}, unset=unset, **kwargs)

    def store(self, **kwargs: Any) -> EtcdStore:
        kwargs.setdefault("user", self.user)
        kwargs.setdefault("password", self.password)
        kwargs.setdefault("key_prefix", self.prefix)
        return EtcdStore(self.endpoints, timeout=5.0, **kwargs)

    def read(self, path: str, **kwargs: Any) -> dict[str, Any] | None:
        """A record as etcd holds it now (read directly, not through the daemon)."""

        async def get() -> dict[str, Any] | None:
            store = self.store(**kwargs)
            try:
                found = await store.get(path)
                return None if found is None else found.data
            finally:
                await store.aclose()

        return anyio.run(get)

    def paths(self, prefix: str, **kwargs: Any) -> list[str]:
        async def listing() -> list[str]:
            store = self.store(**kwargs)
            try:
                return [e.path for e in (await store.list(prefix)).entries]
            finally:
                await store.aclose()

        return anyio.run(listing)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths must stay short (108 bytes): pytest's tmp_path can be too long."""
    path = Path(tempfile.mkdtemp(prefix="acet.", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon_factory(short_dir: Path) -> Iterator[Any]:
    made: list[Daemon] = []

    def factory(name: str = "d", **extra_env: str) -> Daemon:
        base = short_dir / name
        base.mkdir()
        d = make_daemon(base)
        d.extra_env.update(extra_env)
        made.append(d)
        return d

    yield factory
    for d in made:
        d.stop()


def new_prefix() -> str:
    return f"e2e-{uuid.uuid4().hex[:10]}/"


@pytest.fixture
def on_etcd(etcd_server: EtcdCluster, daemon_factory: Any) -> EtcdDaemon:
    """A started daemon; its callers use the session's single-member etcd under a fresh prefix."""
    d = daemon_factory()
    d.start()
    return EtcdDaemon(d, etcd_server.endpoints, new_prefix())


def write_secret(path: Path, text: str) -> Path:
    path.write_text(text)
    os.chmod(path, 0o600)
    return path
