"""One store contract, every backend: the same tests run on LocalStore and on
HttpStore against our Worker (fixture `store`, tests/store/conftest.py).

Backend-specific behaviour (versions that never repeat after a delete, scopes,
timeouts, wire details) lives in the backend's own test module.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcoordd.store.base import Conflict, InvalidPath, NotFound, list_all
from agentcoordd.store.http import HttpStore

ACTIVE_CAP = 256 * 1024


class IoProbe:
    """Counts what reached the backend: HTTP requests, or files under the root."""

    def __init__(self, store: object) -> None:
        self.store = store
        self.requests = 0
        if isinstance(store, HttpStore):
            store._client.event_hooks["request"].append(self._count)

    async def _count(self, request: object) -> None:
        self.requests += 1

    def touched(self) -> bool:
        if isinstance(self.store, HttpStore):
            return self.requests > 0
        root: Path = self.store.root  # type: ignore[attr-defined]
        return root.exists()


async def test_get_missing_record_returns_none(store, ns):
    assert await store.get(f"{ns}/missing.json") is None


async def test_create_then_get_returns_data_and_the_same_version(store, ns):
    path = f"{ns}/t1.json"
    version = await store.create(path, {"status": "active", "n": 1})
    got = await store.get(path)
    assert isinstance(version, str) and version
    assert got is not None
    assert got.data == {"status": "active", "n": 1}
    assert got.version == version


async def test_create_on_existing_record_is_conflict_already_exists(store, ns):
    path = f"{ns}/t1.json"
    await store.create(path, {"who": "first"})
    with pytest.raises(Conflict) as info:
        await store.create(path, {"who": "second"})
    assert info.value.kind == "already_exists"
    assert info.value.exit_code == 2
    assert path in info.value.message
    assert (await store.get(path)).data == {"who": "first"}


async def test_replace_with_current_version_writes_and_returns_new_version(store, ns):
    path = f"{ns}/t1.json"
    v1 = await store.create(path, {"n": 1})
    v2 = await store.replace(path, {"n": 2}, v1)
    got = await store.get(path)
    assert v2 != v1
    assert got.data == {"n": 2} and got.version == v2


async def test_replace_with_stale_version_is_conflict_version_conflict(store, ns):
    path = f"{ns}/t1.json"
    v1 = await store.create(path, {"n": 1})
    await store.replace(path, {"n": 2}, v1)
    with pytest.raises(Conflict) as info:
        await store.replace(path, {"n": 3}, v1)
    assert info.value.kind == "version_conflict"
    assert path in info.value.message
    assert (await store.get(path)).data == {"n": 2}


async def test_replace_missing_record_is_not_found(store, ns):
    path = f"{ns}/never.json"
    with pytest.raises(NotFound) as info:
        await store.replace(path, {"n": 1}, (await _some_version(store, ns)))
    assert path in info.value.message
    assert await store.get(path) is None


async def _some_version(store, ns) -> str:
    """A real version token of this backend, taken from another record."""
    return await store.create(f"{ns}/other.json", {"n": 0})


async def test_delete_with_current_version_removes_the_record(store, ns):
    path = f"{ns}/t1.json"
    version = await store.create(path, {"n": 1})
    await store.delete(path, version)
    assert await store.get(path) is None


async def test_delete_with_stale_version_is_conflict_and_keeps_the_record(store, ns):
    path = f"{ns}/t1.json"
    v1 = await store.create(path, {"n": 1})
    await store.replace(path, {"n": 2}, v1)
    with pytest.raises(Conflict) as info:
        await store.delete(path, v1)
    assert info.value.kind == "version_conflict"
    assert (await store.get(path)).data == {"n": 2}


async def test_delete_missing_record_is_not_found(store, ns):
    path = f"{ns}/t1.json"
    version = await store.create(path, {"n": 1})
    await store.delete(path, version)
    with pytest.raises(NotFound):
        await store.delete(path, version)


async def test_record_can_be_created_again_after_delete(store, ns):
    path = f"{ns}/t1.json"
    version = await store.create(path, {"n": 1})
    await store.delete(path, version)
    again = await store.create(path, {"n": 2})
    assert (await store.get(path)).version == again


# ---- listing ----------------------------------------------------------------


async def _seed(store, ns: str, count: int = 5) -> list[str]:
    paths = [f"{ns}/t{i}.json" for i in range(1, count + 1)]
    for i, path in enumerate(paths, 1):
        await store.create(path, {"n": i})
    # A sibling whose name merely starts with the prefix must never be listed.
    await store.create(f"{ns}x/t1.json", {"n": "sibling"})
    return paths


async def test_list_returns_every_record_below_prefix_in_path_order(store, ns):
    paths = await _seed(store, ns)
    page = await store.list(ns)
    assert [e.path for e in page.entries] == paths
    assert [e.data for e in page.entries] == [{"n": i} for i in range(1, 6)]
    assert page.next_cursor is None
    assert page.partial is False


async def test_list_entries_carry_the_versions_get_returns(store, ns):
    paths = await _seed(store, ns, 2)
    page = await store.list(ns)
    for entry, path in zip(page.entries, paths, strict=True):
        assert entry.version == (await store.get(path)).version


async def test_list_with_limit_pages_through_next_cursor(store, ns):
    paths = await _seed(store, ns)
    first = await store.list(ns, 2)
    second = await store.list(ns, 2, first.next_cursor)
    last = await store.list(ns, 2, second.next_cursor)
    assert [e.path for e in first.entries] == paths[0:2]
    assert first.next_cursor == paths[1]
    assert [e.path for e in second.entries] == paths[2:4]
    assert second.next_cursor == paths[3]
    assert [e.path for e in last.entries] == paths[4:]
    assert last.next_cursor is None


async def test_list_limit_equal_to_count_has_no_next_cursor(store, ns):
    await _seed(store, ns)
    page = await store.list(ns, 5)
    assert len(page.entries) == 5
    assert page.next_cursor is None


async def test_list_cursor_is_exclusive_and_need_not_exist(store, ns):
    paths = await _seed(store, ns)
    # Byte order: "t3.5.json" < "t3.json" ('5' < 'j'), as the notes' capture shows.
    page = await store.list(ns, None, f"{ns}/t3.5.json")
    assert [e.path for e in page.entries] == paths[2:]
    page = await store.list(ns, None, paths[2])
    assert [e.path for e in page.entries] == paths[3:]


async def test_list_of_a_parent_prefix_includes_descendants_at_any_depth(store, ns):
    owner = ns.rsplit("/", 1)[0]
    await store.create(f"{owner}/a/t.json", {"n": 1})
    await store.create(f"{owner}/b/t.json", {"n": 2})
    page = await store.list(owner)
    assert [e.path for e in page.entries] == [f"{owner}/a/t.json", f"{owner}/b/t.json"]


async def test_list_of_an_empty_prefix_is_empty(store, ns):
    page = await store.list(ns)
    assert page.entries == [] and page.next_cursor is None


async def test_list_all_follows_cursors_to_the_end(store, ns):
    paths = await _seed(store, ns)
    page = await list_all(store, ns)
    assert [e.path for e in page.entries] == paths
    assert page.partial is False


async def test_list_with_zero_limit_is_invalid(store, ns):
    with pytest.raises(InvalidPath):
        await store.list(ns, 0)


# ---- paths --------------------------------------------------------------------

INVALID_PATHS = [
    "",
    "claims/../x.json",
    "claims/o/../t.json",
    "claims/o/./r/t.json",
    "claims//r/t.json",
    "/claims/o/r/t.json",
    "claims/o/r/t",
    "etc/passwd.json",
    "archive/etc/x.json",
    "claims/o/r/.hidden.json",
    "claims\\o\\r\\t.json",
    "claims/o/r/t\x00.json",
    "claims/o/r/" + "x" * 600 + ".json",
]
INVALID_PREFIXES = ["", "claims/", "../claims", "claims/..", "etc", "/claims", "claims//o"]


@pytest.mark.parametrize("path", INVALID_PATHS, ids=repr)
async def test_invalid_path_is_refused_before_any_io(store, path):
    probe = IoProbe(store)
    with pytest.raises(InvalidPath) as info:
        await store.get(path)
    with pytest.raises(InvalidPath):
        await store.create(path, {"n": 1})
    assert info.value.exit_code == 1
    assert not probe.touched()


@pytest.mark.parametrize("prefix", INVALID_PREFIXES, ids=repr)
async def test_invalid_prefix_is_refused_before_any_io(store, prefix):
    probe = IoProbe(store)
    with pytest.raises(InvalidPath):
        await store.list(prefix)
    assert not probe.touched()


# ---- data -------------------------------------------------------------------


async def test_unicode_data_round_trips_exactly(store, ns):
    path = f"{ns}/unicode.json"
    data = {
        "name": "ünïcødé ✓ 漢字 🚀",
        "quote": 'a "quoted" \\ back\\slash\nnew line\ttab',
        "values": [1, -2.5, None, True, False, {"nested": []}],
    }
    version = await store.create(path, data)
    got = await store.get(path)
    assert got.data == data and got.version == version


async def test_non_object_data_round_trips(store, ns):
    for i, value in enumerate(["text", 42, [1, 2], None]):
        path = f"{ns}/v{i}.json"
        await store.create(path, value)
        assert (await store.get(path)).data == value


async def test_record_at_the_active_size_cap_round_trips(store, ns):
    path = f"{ns}/big.json"
    overhead = len('{"blob":""}')
    data = {"blob": "x" * (ACTIVE_CAP - overhead)}  # compact JSON exactly 256 KiB
    version = await store.create(path, data)
    got = await store.get(path)
    assert got.data == data and got.version == version
    page = await store.list(ns)
    assert page.entries[0].data == data
