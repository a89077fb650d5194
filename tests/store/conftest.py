"""Store fixtures: a real LocalStore in a temp dir and a real HttpStore against
our Worker under `wrangler dev --local` (workerd + local D1), started once per
session on a free loopback port (helpers: tests/worker_fixture.py).

Without the Node toolchain (`bash worker/ci-install.sh` installs it) the http
backend is skipped locally; with CI=true it is a failure instead.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcoordd.store.http import HttpStore
from agentcoordd.store.local import LocalStore
from worker_fixture import (  # noqa: F401 - re-exported for the store tests
    MACHINES,
    WorkerServer,
    free_port,
    launch_worker,
    require_toolchain,
    toolchain_missing,
)


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


def _open(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "local":
        return LocalStore(tmp_path / "state")
    if request.param == "http":
        return request.getfixturevalue("worker_server").store()
    from agentcoordd.store.etcd import EtcdStore

    return EtcdStore(request.getfixturevalue("etcd_server").endpoints,
                     key_prefix=f"t-{uuid.uuid4().hex[:10]}")


@pytest.fixture(params=["local", "http"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LocalStore | HttpStore]:
    """Every backend, real: the conformance suite runs once per param."""
    backend = _open(request, tmp_path)
    try:
        yield backend
    finally:
        await backend.aclose()


@pytest.fixture(params=["local", "http", "etcd"])
async def every_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """A local root, the session's Worker, or etcd under a key prefix of its own (a test
    module using it imports the `etcd_server` fixture from etcd_cluster)."""
    backend = _open(request, tmp_path)
    try:
        yield backend
    finally:
        await backend.aclose()


@pytest.fixture
def ns() -> str:
    """A fresh claims directory per test, so tests sharing one Worker never meet."""
    return f"claims/o{uuid.uuid4().hex[:12]}/repo"
