"""Fixtures of the lease tests: a module's Worker and etcd, a backend per test
(local, http, etcd), machines on it (tests/leases/support.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from leases.support import BACKENDS, Backend, Machine, make_backend
from etcd_cluster import EtcdCluster, running_cluster
from integration.conftest import short_dir  # noqa: F401 - a fixture: short socket paths
from integration.helpers import Daemon, make_daemon
from worker_fixture import WorkerServer, launch_worker


@pytest.fixture(scope="module")
def lease_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerServer]:
    with launch_worker(tmp_path_factory.mktemp("lease-worker"),
                       {"m": None, "ops": None}) as server:
        yield server


@pytest.fixture(scope="module")
def lease_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with running_cluster(tmp_path_factory.mktemp("lease-etcd")) as cluster:
        yield cluster


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, short_dir: Path) -> Backend:
    return make_backend(request.param, request, short_dir)


@pytest.fixture
def machines(backend: Backend, short_dir: Path) -> Iterator[Callable[..., Machine]]:
    """machines(name, wrapper=[...], **daemon_env): a started daemon on the test's backend,
    configured for it as a service would be (a remote backend's URL and token in its own
    environment: a restarted daemon resumes its lanes with them)."""
    made: list[Daemon] = []

    def start(name: str = "m1", *, wrapper: tuple[str, ...] = (), **daemon_env: str) -> Machine:
        base = short_dir / name
        base.mkdir()
        daemon = make_daemon(base)
        daemon.wrapper = list(wrapper)
        if backend.kind != "local":
            daemon.extra_env.update(backend.env)
        daemon.extra_env.update(daemon_env)
        made.append(daemon)
        daemon.start()
        return Machine(daemon, backend)

    yield start
    for daemon in made:
        daemon.stop()


@pytest.fixture
def repo() -> str:
    """A repository no other test uses (the Worker and etcd outlive a test)."""
    return f"o{uuid.uuid4().hex[:10]}/r"


@pytest.fixture
def agent(repo: str) -> Callable[[str], str]:
    """agent("x"): an agent id no other test uses (heartbeats/<id>.json is global)."""
    return lambda name: f"{name}-{repo.split('/')[0]}"


