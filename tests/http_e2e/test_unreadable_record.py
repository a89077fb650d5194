"""A record another Worker stored that is not well-formed Unicode (a string
holding a lone UTF-16 surrogate, JSON `"x\\ud800"`): the existing Worker
accepts such writes, ours refuses them, but after a takeover (or from a
shared database) ours may still serve one. The client treats it as a torn
local file is treated: unreadable, named, and everything else still read.

The row is put straight into the Worker's local D1 with `wrangler d1 execute
--local`, so the real Worker serves it (its own PUT would refuse it).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentcoordd.store.base import InvalidRecord, UnreadableEntries, list_all
from agentcoordd.store.cache import scan
from worker_fixture import WorkerServer, launch_worker

from .conftest import E2E_MACHINES, err, out

BAD_CLAIM = "claims/acme/torn/1.json"
GOOD_CLAIM = "claims/acme/torn/2.json"
BAD_EVENT = "events/torn-b1/e-bad.json"


def _claim(target: str) -> dict[str, Any]:
    return {"schema_version": 1, "repo": "acme/torn", "target": target, "agent_id": "a-codex",
            "status": "active", "branch": "main", "claimed_at": "2026-06-13T00:00:00Z",
            "updated_at": "2026-06-13T00:00:00Z", "expires_at": "2099-01-01T00:00:00Z"}


@pytest.fixture(scope="module")
def torn_worker() -> Iterator[WorkerServer]:
    """A Worker of its own (full listings here see the bad records)."""
    base = Path(tempfile.mkdtemp(prefix="acunread."))
    with launch_worker(base, E2E_MACHINES) as server:
        good = json.dumps(_claim("2"))
        bad_claim = json.dumps(_claim("1")).replace('"a-codex"', '"a-codex\\ud800"')
        bad_event = '{"schema_version":1,"event_id":"e-bad","batch_id":"torn-b1","type":"note","message":"\\udc00"}'
        assert "\\ud800" in bad_claim
        server.execute(
            "INSERT INTO state (path, data, version, updated_by, updated_at) VALUES "
            f"('{BAD_CLAIM}', '{bad_claim}', 4, 'agent-coord', '2026-06-13T00:00:00Z'), "
            f"('{GOOD_CLAIM}', '{good}', 2, 'agent-coord', '2026-06-13T00:00:00Z'), "
            f"('{BAD_EVENT}', '{bad_event}', 1, NULL, '2026-06-13T00:00:00Z');"
        )
        yield server


def test_the_worker_serves_the_row_as_stored(torn_worker: WorkerServer) -> None:
    resp = httpx.get(f"{torn_worker.url}/v1/state/claims%2Facme%2Ftorn%2F1.json", timeout=10,
                     headers={"Authorization": f"Bearer {torn_worker.tokens['ops']}"})
    assert resp.status_code == 200 and b"a-codex\\ud800" in resp.content


async def test_get_of_the_record_is_invalid_record_naming_it(torn_worker: WorkerServer) -> None:
    async with torn_worker.store("ops") as store:
        with pytest.raises(InvalidRecord) as info:
            await store.get(BAD_CLAIM)
        assert info.value.message.endswith(f"in record {BAD_CLAIM}")
        assert "lone UTF-16 surrogate" in info.value.message
        assert (await store.get(GOOD_CLAIM)).version == "2"


async def test_listing_names_it_and_carries_every_other_record(torn_worker: WorkerServer) -> None:
    async with torn_worker.store("ops") as store:
        with pytest.raises(UnreadableEntries) as info:
            await store.list("claims/acme/torn")
        assert [p for p, _ in info.value.unreadable] == [BAD_CLAIM]
        assert [(e.path, e.version) for e in info.value.page.entries] == [(GOOD_CLAIM, "2")]
        # across pages (one record each), the cursor still moves past it
        with pytest.raises(UnreadableEntries) as paged:
            await list_all(_OnePerPage(store), "claims/acme/torn")
        assert [e.path for e in paged.value.page.entries] == [GOOD_CLAIM]
        assert [p for p, _ in paged.value.unreadable] == [BAD_CLAIM]
        found = await scan(store, "claims", lambda path, data: data["target"], "t")
        assert (GOOD_CLAIM, "2") in found.rows
        assert [p for p, _ in found.unreadable] == [BAD_CLAIM]


class _OnePerPage:
    def __init__(self, store: Any) -> None:
        self.store = store

    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Any:
        return await self.store.list(prefix, 1, cursor)


def test_status_names_the_record_and_shows_the_rest(torn_worker: WorkerServer, node_factory: Any) -> None:
    n = node_factory("n", torn_worker, "ops")
    result = n.ctl("status", "--json")
    payload = json.loads(out(result))
    assert f"unreadable records: {BAD_CLAIM}" in payload["section_notes"]["claims"]
    assert [c["path"] for c in payload["claims"] if c["repo"] == "acme/torn"] == [GOOD_CLAIM]
    assert BAD_EVENT in payload["section_notes"]["events"]
    # one bad record is its own problem: the rest served, exit 0, the record named
    assert result.returncode == 0
    assert f"warning: unreadable records left out (see the degraded notes): {BAD_CLAIM}" in err(result)
    assert "backend" not in err(result) and "unexpected response" not in err(result)
    text = n.ctl("status")
    assert f"- unreadable records: {BAD_CLAIM}" in out(text)
    # the status of that very target cannot be known: UNKNOWN
    target = n.ctl("status", "--repo", "acme/torn", "--target", "1")
    assert target.returncode == 2 and BAD_CLAIM in err(target)


def test_gc_dry_run_leaves_it_untouched_and_succeeds(torn_worker: WorkerServer, node_factory: Any) -> None:
    n = node_factory("n", torn_worker, "ops")
    result = n.ctl("gc", "--dry-run")
    assert result.returncode == 0, out(result) + err(result)
    assert f"{BAD_CLAIM} is not a readable record" in err(result)
    assert f"{BAD_EVENT} is not a readable record" in err(result)


def test_deep_doctor_names_it_as_invalid_and_checks_the_rest(
        torn_worker: WorkerServer, node_factory: Any) -> None:
    n = node_factory("n", torn_worker, "ops")
    result = n.ctl("doctor", "--deep", "--json")
    report = json.loads(out(result))
    families = {f["prefix"]: f for f in report["families"]}
    assert families["claims"]["status"] == "invalid"
    assert families["claims"]["records"] == 2, families["claims"]
    assert families["claims"]["invalid_count"] == 1, families["claims"]
    assert families["claims"]["failing_path"] == BAD_CLAIM
    assert families["events"]["failing_path"] == BAD_EVENT
    assert families["heartbeats"]["status"] == "ok"
    assert report["failing_path"] == BAD_CLAIM
    assert result.returncode == 2  # as a torn local file: the named record needs repair
