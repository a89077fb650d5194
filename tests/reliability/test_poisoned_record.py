"""Issue 41, finding 3: one bad record never breaks anyone else's read.

A Worker holds a good batch and records no client can read (nested 1,000 and
100,000 deep, just over 1 MiB), put straight into its D1 as the finding's machine (whose
token may write only claims/acme/widgets) got one stored. Another machine's
daemon runs every reader: each names the records it reads, serves the rest, and
exits with its documented code — never an internal error. The same records in a
local root read the same way. Our Worker refuses the finding's write."""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from integration.helpers import Daemon, make_daemon
from worker_fixture import WorkerServer, launch_worker

from . import poisoned

FAMILIES = ["claims", "heartbeats", "batches", "events"]
MACHINES = {"ops": None, "reader": (FAMILIES + ["archive"], FAMILIES),
            "widgets-only": (["claims/acme/widgets"], ["claims/acme/widgets"])}


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def poisoned_worker() -> Iterator[WorkerServer]:
    with launch_worker(Path(tempfile.mkdtemp(prefix="acpoison.", dir="/tmp")), MACHINES) as server:
        poisoned.seed(server, _now())
        yield server


@pytest.fixture
def reader(poisoned_worker: WorkerServer, daemon: Daemon) -> Any:
    env = {"AGENT_COORD_API_URL": poisoned_worker.url,
           "AGENT_COORD_API_TOKEN": poisoned_worker.tokens["reader"]}
    return lambda *args: daemon.ctl(*args, env=env, unset=("AGENT_COORD_STATE_ROOT",), timeout=120)


def _assert_every_reader_degrades(reads: dict[str, dict[str, Any]]) -> None:
    for name, got in reads.items():
        assert not got["internal_error"], (name, got)
        assert got["named"] and got["served"], (name, got)
        assert got["exit"] == poisoned.EXPECTED_EXIT[name], (name, got)


def test_every_reader_of_another_machine_names_the_records_and_serves_the_rest(reader: Any) -> None:
    _assert_every_reader_degrades(poisoned.read_everything(reader))


def test_the_record_itself_stays_unknown_and_is_never_granted(reader: Any) -> None:
    status = reader("status", "--repo", "acme/widgets", "--target", "666")
    assert status.returncode == 2 and poisoned.DEEP_CLAIM in status.stderr.decode()
    claim = reader("claim", "--agent-id", "taker", "--repo", "acme/widgets", "--target", "666")
    assert claim.returncode == 2 and poisoned.DEEP_CLAIM in claim.stderr.decode()
    ready = json.loads(reader("ready", "--batch-id", poisoned.BATCH, "--json").stdout)
    lane3 = next(row for row in ready["lanes"] if row["name"] == "lane3")
    assert lane3["state"] == "held" and lane3["held_by"][0]["liveness"] == "unreadable"


def test_the_dashboard_names_the_records_and_serves_the_rest(reader: Any, daemon: Daemon) -> None:
    url = json.loads(reader("dashboard", "--json").stdout)["url"]
    reads = poisoned.dashboard_reads(
        lambda route: httpx.get(url + route, headers=daemon.dashboard_headers(), timeout=60))
    for route, got in reads.items():
        assert got == {"exit": 200, "named": True, "served": True, "internal_error": False}, route


def test_our_worker_refuses_the_findings_write(poisoned_worker: WorkerServer) -> None:
    """The finding's write: a 2 KB record 1,000 deep under the machine's own prefix."""
    body = b'{"data":{"repo":"acme/widgets","target":"667","meta":' + b"[" * 1000 + b"]" * 1000 + b"}}"
    with poisoned_worker.client("widgets-only") as client:
        response = client.put("/v1/state/claims%2Facme%2Fwidgets%2F667.json", content=body,
                              headers={"If-None-Match": "*", "Content-Type": "application/json"})
    assert (response.status_code, response.json()) == (413, {"error": "too_deep"})


def test_a_local_root_reads_the_same_records_the_same_way(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory()
    d.start()
    for path, raw in _seeded_local(d):
        full = d.root / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(raw)
    reads = poisoned.read_everything(lambda *args: d.ctl(*args, timeout=120))
    _assert_every_reader_degrades(reads)


def _seeded_local(d: Daemon) -> list[tuple[str, bytes]]:
    """The good batch written through the daemon, then the poisoned files."""
    manifest = d.base / "pb1.json"
    manifest.write_text(json.dumps({
        "batch_id": poisoned.BATCH, "repo": poisoned.REPO, "launch_prompt": "Batch id: pb1",
        "lanes": [{"name": f"lane{n}", "owner": f"agent-{n}", "targets": [str(n)]} for n in (1, 2, 3)]}))
    assert d.ctl("register-batch", "--file", str(manifest)).returncode == 0
    for n in (1, 2):
        assert d.ctl("claim", "--agent-id", f"agent-{n}", "--repo", poisoned.REPO, "--target", str(n),
                     "--batch-id", poisoned.BATCH).returncode == 0
        assert d.ctl("heartbeat", "--agent-id", f"agent-{n}", "--batch-id", poisoned.BATCH).returncode == 0
    return [(path, raw) for path, raw, _by in poisoned.poisoned_rows()]
