"""Record bounds (model.bounds, docs/backends.md): every store reads with the same
depth and size bounds our Worker writes with. A record outside them — put there
by another tool, an older Worker, or by hand — is unreadable *for that record*:
`get` names it, a listing names it and carries every other record.

Each backend is real: files in a temp root, our Worker under wrangler (rows put
straight into its D1), etcd (values put straight through its gateway)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentcoordd.model import bounds
from agentcoordd.store.base import InvalidRecord, UnreadableEntries, list_all
from agentcoordd.store.cache import scan
from agentcoordd.store.etcd import EtcdStore
from agentcoordd.store.local import LocalStore
from etcd_cluster import etcd_server  # noqa: F401 - a fixture, used by name
from test_etcd_store import put_raw

BOUND = bounds.MAX_DEPTH


def nested(depth: int) -> bytes:
    """A record whose arrays nest `depth` levels (the object itself is one)."""
    return b'{"x":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


OUTSIDE = {
    "one-level-too-deep": (nested(BOUND + 1), f"JSON nested {BOUND + 1} levels deep (the bound is {BOUND})"),
    "100000-deep": (nested(100_000), f"JSON nested 100000 levels deep (the bound is {BOUND})"),
    "over-1-MiB": (b'{"x":"' + b"a" * bounds.MAX_BYTES + b'"}', "(the bound is 1 MiB)"),
}


class Planted:
    """A backend with a way to put raw JSON text under a path, bypassing every check."""

    def __init__(self, store: Any, put: Any, ns: str) -> None:
        self.store, self.put, self.ns = store, put, ns


@pytest.fixture(params=["local", "http", "etcd"])
async def planted(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Planted]:
    ns = f"claims/o{uuid.uuid4().hex[:12]}/repo"
    if request.param == "local":
        store: Any = LocalStore(tmp_path / "state")

        async def put(path: str, raw: bytes) -> None:
            full = tmp_path / "state" / path
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_bytes(raw)
    elif request.param == "http":
        worker = request.getfixturevalue("worker_server")
        store = worker.store()

        async def put(path: str, raw: bytes) -> None:
            worker.put_raw([(path, raw, "elsewhere")])
    else:
        server = request.getfixturevalue("etcd_server")
        store = EtcdStore(server.endpoints, key_prefix=f"t-{uuid.uuid4().hex[:12]}/", timeout=5.0)

        async def put(path: str, raw: bytes) -> None:
            await put_raw(store, path, raw)
    try:
        yield Planted(store, put, ns)
    finally:
        await store.aclose()


@pytest.mark.parametrize("case", list(OUTSIDE))
async def test_a_record_outside_the_bounds_is_unreadable_and_named_alone(planted: Planted, case: str) -> None:
    raw, reason = OUTSIDE[case]
    bad, good = f"{planted.ns}/bad.json", f"{planted.ns}/good.json"
    await planted.store.create(good, {"x": [[[1]]]})
    await planted.put(bad, raw)

    with pytest.raises(InvalidRecord) as got:
        await planted.store.get(bad)
    assert reason in got.value.message and got.value.message.endswith(f"in record {bad}")
    with pytest.raises(UnreadableEntries) as listed:
        await list_all(planted.store, planted.ns)
    assert [e.path for e in listed.value.page.entries] == [good]
    assert [(p, reason in why) for p, why in listed.value.unreadable] == [(bad, True)]
    found = await scan(planted.store, planted.ns, lambda path, data: data, "bounds-test")
    assert [p for p, _ in found.rows] == [good] and [p for p, _ in found.unreadable] == [bad]


async def test_a_record_at_the_bounds_round_trips(planted: Planted) -> None:
    path = f"{planted.ns}/deep.json"
    data: Any = 1
    for _ in range(BOUND):
        data = [data]
    await planted.store.create(path, data)
    assert (await planted.store.get(path)).data == data


@pytest.mark.parametrize("case", ["one-level-too-deep", "over-1-MiB"])
async def test_no_store_writes_what_it_could_not_read(planted: Planted, case: str) -> None:
    import json

    data = json.loads(OUTSIDE[case][0])
    path = f"{planted.ns}/refused.json"
    with pytest.raises(InvalidRecord) as got:
        await planted.store.create(path, data)
    assert f"record {path} not written" in got.value.message
    assert await planted.store.get(path) is None


@pytest.mark.parametrize(("depth", "status", "code"), [
    (BOUND, 201, None), (BOUND + 1, 413, "too_deep"), (100_000, 413, "too_deep")])
def test_the_worker_refuses_what_no_client_could_read(worker_server: Any, depth: int, status: int,
                                                      code: str | None) -> None:
    path = f"claims/o{uuid.uuid4().hex[:12]}/repo/raw.json"
    response = httpx.put(f"{worker_server.url}/v1/state/{path.replace('/', '%2F')}",
                         content=b'{"data":' + nested(depth) + b"}", timeout=30,
                         headers={"Authorization": f"Bearer {worker_server.tokens['ref-all']}",
                                  "If-None-Match": "*", "Content-Type": "application/json"})
    assert response.status_code == status, response.text
    if code:
        assert response.json() == {"error": code}
