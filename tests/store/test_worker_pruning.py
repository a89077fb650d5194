"""The Worker's scheduled pruning (run through `wrangler dev --test-scheduled`,
with a retention of PRUNE_AFTER_SECONDS = 1): tombstones and event deletion
markers older than the window go, and what they guarded still holds — a
re-created path continues above any version a stale writer can hold, and a
change sync from before the pruned markers is told to resync
(docs/backends.md, "Worker batch and events endpoints").
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from worker_fixture import WorkerServer, launch_worker

WINDOW = 1  # seconds


@pytest.fixture(scope="module")
def pruning_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerServer]:
    with launch_worker(tmp_path_factory.mktemp("pruning"), prune_after_seconds=WINDOW) as server:
        yield server


def uniq() -> str:
    return uuid.uuid4().hex[:10]


def url(path: str) -> str:
    return "/v1/state/" + quote(path, safe="")


def create(client: httpx.Client, path: str, data: Any = None) -> int:
    resp = client.put(url(path), json={"data": data or {}}, headers={"If-None-Match": "*"})
    assert resp.status_code == 201, resp.text
    return resp.json()["version"]


def replace(client: httpx.Client, path: str, version: int) -> httpx.Response:
    return client.put(url(path), json={"data": {"from": version}}, headers={"If-Match": str(version)})


def delete(client: httpx.Client, path: str, version: int) -> None:
    resp = client.delete(url(path), headers={"If-Match": str(version)})
    assert resp.status_code == 200, resp.text


def past_the_window() -> None:
    time.sleep(WINDOW + 0.3)


def meta(server: WorkerServer) -> dict[str, int]:
    [[row]] = server.query("SELECT events_seq, version_floor, events_pruned_seq FROM meta")
    return row


def tombstone(server: WorkerServer, path: str) -> list[dict[str, Any]]:
    [rows] = server.query(f"SELECT last_version, deleted_at FROM state_tombstones WHERE path = '{path}'")
    return rows


def test_a_recreated_path_stays_above_every_version_held_before_its_tombstone_was_pruned(pruning_worker):
    path = f"claims/o{uniq()}/r/aba.json"
    with pruning_worker.client() as client:
        held = [create(client, path)]
        for _ in range(3):
            resp = replace(client, path, held[-1])
            held.append(resp.json()["version"])
        delete(client, path, held[-1])
        assert tombstone(pruning_worker, path)[0]["last_version"] == held[-1]
        past_the_window()
        pruning_worker.run_scheduled()
        assert tombstone(pruning_worker, path) == []  # pruned ...
        assert meta(pruning_worker)["version_floor"] >= held[-1]  # ... under the floor

        again = create(client, path)
        assert again > max(held)
        for stale in held:
            resp = replace(client, path, stale)
            assert (resp.status_code, resp.json()) == (409, {"error": "version_conflict"})
            resp = client.delete(url(path), headers={"If-Match": str(stale)})
            assert (resp.status_code, resp.json()) == (409, {"error": "version_conflict"})
            [result] = client.post("/v1/batch", json={"ops": [
                {"op": "put", "path": path, "data": {}, "if_match": stale}]}).json()["results"]
            assert result == {"status": 409, "body": {"error": "version_conflict"}}
        # a batch create starts above the floor too
        other = f"claims/o{uniq()}/r/new.json"
        [result] = client.post("/v1/batch", json={"ops": [
            {"op": "put", "path": other, "data": {}, "if_none_match": "*"}]}).json()["results"]
        assert result["status"] == 201 and result["body"]["version"] > max(held)


def test_tombstones_inside_the_window_are_kept(pruning_worker):
    path = f"claims/o{uniq()}/r/recent.json"
    with pruning_worker.client() as client:
        version = create(client, path)
        delete(client, path, version)
        pruning_worker.run_scheduled()
        assert tombstone(pruning_worker, path)[0]["last_version"] == version


def test_a_since_older_than_the_pruned_deletion_markers_must_resync(pruning_worker):
    batch = f"b{uniq()}"
    old, recent, kept = (f"events/{batch}/{name}.json" for name in ("old", "recent", "kept"))
    with pruning_worker.client() as client:
        # (versions start above the floor earlier tests' pruning raised)
        versions = {path: create(client, path, {"at": "2026-01-01T00:00:00Z"}) for path in (old, recent, kept)}
        start = client.get("/v1/events", params={"batch_id": batch}).json()["seq"]
        delete(client, old, versions[old])
        old_marker = client.get("/v1/events", params={"batch_id": batch, "since": start}).json()["changes"][0]
        assert old_marker == {"path": old, "deleted": True, "seq": old_marker["seq"]}
        past_the_window()
        delete(client, recent, versions[recent])  # inside the window at pruning time
        pruning_worker.run_scheduled()
        assert meta(pruning_worker)["events_pruned_seq"] >= old_marker["seq"]

        current = client.get("/v1/events", params={"batch_id": batch}).json()["seq"]
        answer = client.get("/v1/events", params={"batch_id": batch, "since": start}).json()
        assert answer == {"resync": True, "seq": current}
        # the marker left is still served to a copy that is new enough
        answer = client.get("/v1/events", params={"batch_id": batch, "since": old_marker["seq"]}).json()
        assert [(c["path"], c.get("deleted")) for c in answer["changes"]] == [(recent, True)]
        # since=0 never needs a resync: the batch whole, without the pruned marker
        answer = client.get("/v1/events", params={"batch_id": batch, "since": 0}).json()
        assert not answer.get("resync")
        assert [c["path"] for c in answer["changes"] if not c.get("deleted")] == [kept]
        assert old not in [c["path"] for c in answer["changes"]]


def test_pruning_keeps_live_events_and_the_listing(pruning_worker):
    batch = f"b{uniq()}"
    with pruning_worker.client() as client:
        for i in range(3):
            create(client, f"events/{batch}/e{i}.json", {"at": f"2026-01-0{i + 1}T00:00:00Z"})
        past_the_window()
        pruning_worker.run_scheduled()
        feed = client.get("/v1/events", params={"batch_id": batch}).json()["events"]
        assert [e["path"] for e in feed] == [f"events/{batch}/e{i}.json" for i in range(3)]
        listed = client.get("/v1/state", params={"prefix": f"events/{batch}"}).json()["entries"]
        assert len(listed) == 3
