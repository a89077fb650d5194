"""End to end on the HTTP backend: ctl subprocesses -> a real agentcoordd ->
our Worker under `wrangler dev` (tests/worker_fixture.py), each caller with
AGENT_COORD_API_URL + AGENT_COORD_API_TOKEN in its environment, like an agent
on a machine whose shell exports them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from integration.helpers import Daemon, make_daemon
from worker_fixture import Scopes, WorkerServer, launch_worker

FAMILIES = ["claims", "heartbeats", "batches", "events"]
ADMISSION = ["host_limits", "capacity_profiles", "inboxes", "lane_occupancies",
             "capacity_reservations", "capacity_holds"]
PARTIAL_BATCH = "partial-b1"

# Machines of the session's Worker.
E2E_MACHINES: dict[str, Scopes] = {
    "m-a": (FAMILIES, FAMILIES),
    "m-b": (FAMILIES, FAMILIES),
    "ops": None,  # --all-state: seeding and inspection
    "widgets-only": (["claims/acme/widgets"], ["claims/acme/widgets"]),
    # sees the batch and one of its events: the events listing is filtered
    "audit-partial": ([f"batches/{PARTIAL_BATCH}.json", f"events/{PARTIAL_BATCH}/e-visible.json"], []),
    "to-revoke": (FAMILIES, FAMILIES),
    # planners: admission records only (docs/capacity.md)
    "planner-a": (ADMISSION, ADMISSION),
    "planner-b": (ADMISSION, ADMISSION),
}


@pytest.fixture(scope="session")
def e2e_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerServer]:
    with launch_worker(tmp_path_factory.mktemp("e2e-worker"), E2E_MACHINES) as server:
        yield server


@dataclass
class Node:
    """One machine: its daemon, and the Worker URL + token its agents' shells export."""

    daemon: Daemon
    url: str
    token: str

    def env(self, **extra: str) -> dict[str, str]:
        return {"AGENT_COORD_API_URL": self.url, "AGENT_COORD_API_TOKEN": self.token, **extra}

    def ctl(self, *args: str, timeout: float = 60, **extra: str) -> Any:
        return self.daemon.ctl(*args, env=self.env(**extra), timeout=timeout,
                               unset=("AGENT_COORD_STATE_ROOT",))

    def argv(self) -> tuple[list[str], dict[str, str]]:
        """Command prefix and environment for a ctl run started by the test itself."""
        from integration.helpers import PYTHON

        env = self.daemon.env(**self.env())
        env.pop("AGENT_COORD_STATE_ROOT", None)
        return [PYTHON, "-m", "agentcoordctl.cli"], env


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths must stay short (108 bytes): pytest's tmp_path can be too long."""
    path = Path(tempfile.mkdtemp(prefix="ache2e.", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def node_factory(short_dir: Path) -> Iterator[Any]:
    """node(name, worker, machine): a started daemon whose callers use `machine`'s token."""
    made: list[Daemon] = []

    def factory(name: str, worker: WorkerServer, machine: str) -> Node:
        base = short_dir / name
        base.mkdir()
        daemon = make_daemon(base)
        made.append(daemon)
        daemon.start()
        return Node(daemon, worker.url, worker.tokens[machine])

    yield factory
    for daemon in made:
        daemon.stop()


@pytest.fixture
def repo() -> str:
    """A repository no other test uses (tests share the session's Worker)."""
    return f"o{uuid.uuid4().hex[:10]}/r"


def record(worker: WorkerServer, path: str, machine: str = "ops") -> dict[str, Any] | None:
    """The Worker's entry for `path` ({path, data, version, updated_by}) or None."""
    from urllib.parse import quote

    resp = httpx.get(f"{worker.url}/v1/state/{quote(path, safe='')}", timeout=10,
                     headers={"Authorization": f"Bearer {worker.tokens[machine]}"})
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    return json.loads(resp.content)


def out(result: Any) -> str:
    return result.stdout.decode()


def err(result: Any) -> str:
    return result.stderr.decode()
