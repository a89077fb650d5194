"""The client against both Workers: ours (batch + events, issue 23) and the one
before them (tests/fixtures/worker-v1: no capabilities, like the existing
agent-coord Worker). The same operations give the same outcomes on both; only
the number of requests differs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentcoordd.store.base import Conflict, Create, Delete, Forbidden, Get, Replace, Versioned, list_all
from agentcoordd.store.http import HttpStore
from http_e2e.conftest import E2E_MACHINES
from worker_fixture import WORKER_V1_DIR, WorkerServer, launch_worker

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def v1_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerServer]:
    with launch_worker(tmp_path_factory.mktemp("worker-v1"), E2E_MACHINES, worker_dir=WORKER_V1_DIR) as server:
        yield server


@pytest.fixture(params=["ours", "v1"])
def worker(request: pytest.FixtureRequest) -> WorkerServer:
    return request.getfixturevalue("e2e_worker" if request.param == "ours" else "v1_worker")


class Counting(httpx.AsyncBaseTransport):
    """Real requests to the Worker, counted by route."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.routes: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.routes.append(f"{request.method} {request.url.path.split('/')[2]}")
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def store(worker: WorkerServer, machine: str = "ops") -> tuple[HttpStore, Counting]:
    counting = Counting()
    return HttpStore(worker.url, worker.tokens[machine], timeout=30, transport=counting), counting


def shown(outcome: Any) -> Any:
    """An outcome as compared across Workers: versions and data, or the error kind."""
    if isinstance(outcome, Versioned):
        return ("record", outcome.data, outcome.version)
    if isinstance(outcome, Conflict):
        return ("Conflict", outcome.kind)
    if isinstance(outcome, Exception):
        return type(outcome).__name__
    return outcome


async def scenario(worker: WorkerServer) -> tuple[list[Any], Counting]:
    s, counting = store(worker)
    async with s:
        repo = f"cap{uuid.uuid4().hex[:8]}"
        a, b, c, d, e = (f"claims/{repo}/r/{x}.json" for x in "abcde")
        await s.create(a, {"n": 1})
        await s.create(e, {"n": 0})
        version_b = await s.create(b, {"n": 2})
        await s.replace(b, {"n": 3}, version_b)
        version_d = await s.create(d, {"n": 4})
        counting.routes.clear()
        outcomes = await s.run_batch([
            Get(a), Get(f"claims/{repo}/r/missing.json"),
            Create(c, {"n": 5}), Create(e, {"n": 6}),
            Replace(b, {"n": 7}, version_b),  # stale
            Replace(f"claims/{repo}/r/gone.json", {"n": 8}, "1"),  # missing
            Delete(d, version_d),
            Get("claims/../x.json"),  # refused before any I/O
        ])
        after = [shown(x) for x in await s.run_batch([Get(c), Get(d), Get(b)])]
    return [shown(x) for x in outcomes] + after, counting


async def test_a_batch_gives_the_single_calls_outcomes_on_both_workers(
        e2e_worker: WorkerServer, v1_worker: WorkerServer) -> None:
    ours, ours_requests = await scenario(e2e_worker)
    old, old_requests = await scenario(v1_worker)
    assert ours == old
    assert ours[:8] == [
        ("record", {"n": 1}, "1"), None, "1", ("Conflict", "already_exists"),
        ("Conflict", "version_conflict"), "NotFound", None, "InvalidPath"]
    assert ours[8:] == [("record", {"n": 5}, "1"), None, ("record", {"n": 3}, "2")]
    # ours: the health check, one batch, one batch telling stale from missing, the reads after
    assert ours_requests.routes == ["GET health", "POST batch", "POST batch", "POST batch"]
    # v1: health once, then one request per op (and the GETs telling stale from missing)
    assert old_requests.routes.count("POST batch") == 0
    assert len(old_requests.routes) == 1 + 7 + 2 + 3


async def test_scoped_batch_refuses_exactly_the_forbidden_ops(worker: WorkerServer) -> None:
    allowed = f"claims/acme/widgets/{uuid.uuid4().hex[:8]}.json"
    other = f"claims/acme/gadgets/{uuid.uuid4().hex[:8]}.json"
    existing = f"claims/acme/widgets/{uuid.uuid4().hex[:8]}.json"
    s, _ = store(worker, "widgets-only")
    async with s:
        await s.create(existing, {"ok": True})
        outcomes = await s.run_batch([Create(allowed, {"ok": True}), Create(other, {"ok": False}),
                                      Get(f"heartbeats/{uuid.uuid4().hex[:8]}.json"), Get(existing)])
        assert isinstance(outcomes[0], str)
        assert isinstance(outcomes[1], Forbidden) and isinstance(outcomes[2], Forbidden)
        assert isinstance(outcomes[3], Versioned) and outcomes[3].data == {"ok": True}
        assert await s.get(allowed) is not None
    ops, _ = store(worker)
    async with ops:
        assert await ops.get(other) is None


async def seed_batch(s: HttpStore, batch: str, count: int) -> list[str]:
    paths = [f"events/{batch}/e{n:04d}.json" for n in range(count)]
    for start in range(0, count, 64):
        outcomes = await s.run_batch([Create(p, {"batch_id": batch, "event_id": p.split("/")[2][:-5],
                                                 "type": "lane.progress", "at": f"2026-12-02T10:00:{n % 60:02d}Z"})
                                      for n, p in enumerate(paths[start:start + 64], start)])
        assert all(isinstance(o, str) for o in outcomes), outcomes
    return paths


async def test_event_listings_agree_and_cost_one_request_when_warm(
        e2e_worker: WorkerServer, v1_worker: WorkerServer) -> None:
    batch = f"cap{uuid.uuid4().hex[:8]}"
    listings = {}
    for name, worker in (("ours", e2e_worker), ("v1", v1_worker)):
        writer, _ = store(worker)  # ops: deleting needs archive/ scope too
        reader, counting = store(worker, "m-b")  # another machine's view
        async with writer, reader:
            paths = await seed_batch(writer, batch, 2100)
            first = await list_all(reader, f"events/{batch}")
            assert [e.path for e in first.entries] == paths and not first.partial
            # changes by the other machine: a delete, a rewrite, a new event
            gone = await writer.get(paths[5])
            assert gone is not None
            await writer.delete(paths[5], gone.version)
            kept = await writer.get(paths[7])
            assert kept is not None
            await writer.replace(paths[7], {**kept.data, "message": "rewritten"}, kept.version)
            await writer.create(f"events/{batch}/late.json", {"batch_id": batch, "at": "2026-01-01T00:00:00Z"})
            counting.routes.clear()
            second = await list_all(reader, f"events/{batch}")
            listings[name] = [(e.path, e.data, e.version) for e in second.entries]
            warm = list(counting.routes)
            counting.routes.clear()
            third = await list_all(reader, f"events/{batch}")
            assert [(e.path, e.data, e.version) for e in third.entries] == listings[name]
            if name == "ours":
                assert warm == ["GET events"] and counting.routes == ["GET events"]
            else:
                assert warm == ["GET state"] * 3
    assert listings["ours"] == listings["v1"]
    paths = [p for p, _, _ in listings["ours"]]
    assert f"events/{batch}/e0005.json" not in paths and f"events/{batch}/late.json" in paths
    assert dict((p, d) for p, d, _ in listings["ours"])[f"events/{batch}/e0007.json"]["message"] == "rewritten"


async def test_a_partly_readable_batch_is_listed_filtered(worker: WorkerServer) -> None:
    """The events view needs the whole batch in scope; otherwise the filtered state
    listing answers, marked partial, as before."""
    from http_e2e.conftest import PARTIAL_BATCH

    ops, _ = store(worker)
    async with ops:
        for name in ("e-visible", "e-hidden"):
            path = f"events/{PARTIAL_BATCH}/{name}.json"
            if await ops.get(path) is None:
                await ops.create(path, {"batch_id": PARTIAL_BATCH, "type": "lane.progress"})
    s, counting = store(worker, "audit-partial")
    async with s:
        page = await list_all(s, f"events/{PARTIAL_BATCH}")
    assert [e.path for e in page.entries] == [f"events/{PARTIAL_BATCH}/e-visible.json"]
    assert page.partial
    assert counting.routes[-1] == "GET state"


def test_fixture_worker_has_no_capabilities(v1_worker: WorkerServer, e2e_worker: WorkerServer) -> None:
    assert httpx.get(v1_worker.url + "/v1/health").json() == {"status": "ok"}
    ours = httpx.get(e2e_worker.url + "/v1/health")
    assert sorted(ours.json()["capabilities"]) == ["batch", "events", "time"]
    assert Path(WORKER_V1_DIR, "src", "index.ts").exists()


def test_our_worker_stamps_every_answer_with_its_clock(e2e_worker: WorkerServer) -> None:
    """X-Agentcoord-Time (Unix ms) on every response, errors too: clients measure how far
    their clock is from the Worker's (docs/backends.md#clocks)."""
    import time

    for response in (httpx.get(e2e_worker.url + "/v1/health"),
                     httpx.get(e2e_worker.url + "/v1/whoami"),  # 401: no token
                     httpx.get(e2e_worker.url + "/nowhere")):
        stamp = int(response.headers["x-agentcoord-time"])
        assert abs(stamp / 1000 - time.time()) < 5, response


def test_keep_alive_renewals_fence_and_keep_the_agents_writes_on_both_workers(
        worker: WorkerServer, node_factory: Any, repo: str) -> None:
    """Batched renewals (ours) and single ones (v1) behave alike: every lane renews,
    a lane whose claim was taken over is fenced and renewed no more, and what the
    agent writes between renewals stays."""
    import time

    from http_e2e.conftest import record
    from keepalive.support import lane, wait_until

    node = node_factory("ka", worker, "m-a")
    agents = [f"k{uuid.uuid4().hex[:6]}{n}" for n in range(6)]
    for n, agent in enumerate(agents):
        result = node.ctl("claim", "--agent-id", agent, "--repo", repo, "--target", str(n),
                          "--keep-alive", "--heartbeat-ttl", "3", "--renew-every", "0.5")
        assert result.returncode == 0, result.stderr
    first = {a: record(worker, f"heartbeats/{a}.json") for a in agents}
    taken = record(worker, f"claims/{repo}/0.json")
    assert taken is not None
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    resp = httpx.put(f"{worker.url}/v1/state/claims%2F{repo.replace('/', '%2F')}%2F0.json",
                     headers={"Authorization": f"Bearer {worker.tokens['ops']}", "If-Match": str(taken["version"])},
                     json={"data": {**taken["data"], "agent_id": "new", "claimed_at": now}}, timeout=10)
    assert resp.status_code == 200, resp.text
    wrote = node.ctl("heartbeat", "--agent-id", agents[1], "--phase", "validating")
    assert wrote.returncode == 0, wrote.stderr
    row = wait_until(lambda: (r := lane(node.daemon, agents[0])) and r["state"] == "fenced" and r, 10.0)
    assert row["new_holder"] == "new"
    frozen = record(worker, f"heartbeats/{agents[0]}.json")

    def renewed_twice() -> bool:
        return all(record(worker, f"heartbeats/{a}.json")["version"] >= first[a]["version"] + 2  # type: ignore[index]
                   for a in agents[1:])

    wait_until(renewed_twice, 15.0, 0.25)
    assert record(worker, f"heartbeats/{agents[0]}.json") == frozen  # no renewal after the fence
    kept = record(worker, f"heartbeats/{agents[1]}.json")
    assert kept is not None and kept["data"]["phase"] == "validating"
    assert kept["data"]["expires_at"] > first[agents[1]]["data"]["expires_at"]  # type: ignore[index]
