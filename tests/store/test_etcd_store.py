"""EtcdStore against a real etcd: the Store contract, RBAC, re-auth, rotation, archive moves."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentcoordd.store import etcd as etcd_mod
from agentcoordd.store.base import (
    Conflict,
    Forbidden,
    InvalidPath,
    InvalidRecord,
    NotFound,
    Unavailable,
    list_all,
)
from agentcoordd.store.etcd import EtcdStore, _b64
from agentcoordd.store.etcd_admin import EtcdAdmin, scope_range
from etcd_cluster import (  # noqa: F401 - fixtures are used by name
    EtcdCluster,
    _free_ports,
    etcd_server,
    etcd_store,
    running_cluster,
)

CLAIM = "claims/acme/widgets/issue-1.json"


def dead_endpoint() -> str:
    (port,) = _free_ports(1)  # nothing listens there once the probe socket closed
    return f"http://127.0.0.1:{port}"


async def put_raw(store: EtcdStore, path: str, value: bytes) -> None:
    await store.client.call("/v3/kv/put", {"key": _b64(store._key(path)), "value": _b64(value)}, "test put")


# ---- get / create / replace / delete -------------------------------------------


async def test_get_missing_record_is_none(etcd_store: EtcdStore) -> None:
    assert await etcd_store.get(CLAIM) is None


async def test_create_then_get_returns_data_and_mod_revision(etcd_store: EtcdStore) -> None:
    version = await etcd_store.create(CLAIM, {"holder": "a", "n": 1})
    got = await etcd_store.get(CLAIM)
    assert got is not None
    assert got.data == {"holder": "a", "n": 1}
    assert got.version == version
    assert version.isdigit()


async def test_create_existing_record_conflicts_already_exists(etcd_store: EtcdStore) -> None:
    await etcd_store.create(CLAIM, {"holder": "a"})
    with pytest.raises(Conflict) as err:
        await etcd_store.create(CLAIM, {"holder": "b"})
    assert err.value.kind == "already_exists"
    assert CLAIM in err.value.message
    assert (await etcd_store.get(CLAIM)).data == {"holder": "a"}


async def test_replace_with_current_version_returns_new_version(etcd_store: EtcdStore) -> None:
    v1 = await etcd_store.create(CLAIM, {"n": 1})
    v2 = await etcd_store.replace(CLAIM, {"n": 2}, v1)
    assert int(v2) > int(v1)
    got = await etcd_store.get(CLAIM)
    assert (got.data, got.version) == ({"n": 2}, v2)


async def test_replace_with_stale_version_conflicts(etcd_store: EtcdStore) -> None:
    v1 = await etcd_store.create(CLAIM, {"n": 1})
    await etcd_store.replace(CLAIM, {"n": 2}, v1)
    with pytest.raises(Conflict) as err:
        await etcd_store.replace(CLAIM, {"n": 3}, v1)
    assert err.value.kind == "version_conflict"
    assert (await etcd_store.get(CLAIM)).data == {"n": 2}


async def test_replace_with_foreign_version_token_conflicts(etcd_store: EtcdStore) -> None:
    await etcd_store.create(CLAIM, {"n": 1})
    with pytest.raises(Conflict) as err:
        await etcd_store.replace(CLAIM, {"n": 2}, "ab" * 32)  # a LocalStore sha256
    assert err.value.kind == "version_conflict"


async def test_replace_missing_record_is_not_found(etcd_store: EtcdStore) -> None:
    with pytest.raises(NotFound):
        await etcd_store.replace(CLAIM, {"n": 1}, "5")


async def test_delete_with_current_version_removes_record(etcd_store: EtcdStore) -> None:
    v1 = await etcd_store.create(CLAIM, {"n": 1})
    await etcd_store.delete(CLAIM, v1)
    assert await etcd_store.get(CLAIM) is None


async def test_delete_with_stale_version_conflicts_and_keeps_record(etcd_store: EtcdStore) -> None:
    v1 = await etcd_store.create(CLAIM, {"n": 1})
    await etcd_store.replace(CLAIM, {"n": 2}, v1)
    with pytest.raises(Conflict) as err:
        await etcd_store.delete(CLAIM, v1)
    assert err.value.kind == "version_conflict"
    assert await etcd_store.get(CLAIM) is not None


async def test_delete_missing_record_is_not_found(etcd_store: EtcdStore) -> None:
    with pytest.raises(NotFound):
        await etcd_store.delete(CLAIM, "7")


async def test_delete_and_recreate_never_reuses_a_version(etcd_store: EtcdStore) -> None:
    """ABA: etcd's per-key `version` restarts at 1; mod_revision never does."""
    v1 = await etcd_store.create(CLAIM, {"same": True})
    await etcd_store.delete(CLAIM, v1)
    v2 = await etcd_store.create(CLAIM, {"same": True})
    assert v2 != v1
    with pytest.raises(Conflict):
        await etcd_store.replace(CLAIM, {"stale": True}, v1)
    with pytest.raises(Conflict):
        await etcd_store.delete(CLAIM, v1)


async def test_concurrent_cas_writes_have_exactly_one_winner(etcd_store: EtcdStore) -> None:
    v1 = await etcd_store.create(CLAIM, {"n": 0})
    outcomes: list[str] = []

    async def writer(i: int) -> None:
        try:
            await etcd_store.replace(CLAIM, {"n": i}, v1)
            outcomes.append("won")
        except Conflict:
            outcomes.append("lost")

    async with anyio.create_task_group() as tg:
        for i in range(1, 9):
            tg.start_soon(writer, i)
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]


async def test_unicode_data_round_trips(etcd_store: EtcdStore) -> None:
    data = {"note": "héllo 漢字 🙂 \u0000 \u2028", "list": ["ü", 1, 2.5, None, True]}
    await etcd_store.create(CLAIM, data)
    assert (await etcd_store.get(CLAIM)).data == data


async def test_stored_value_that_is_not_json_is_invalid_record(etcd_store: EtcdStore) -> None:
    await put_raw(etcd_store, CLAIM, b"{not json")
    with pytest.raises(InvalidRecord) as err:
        await etcd_store.get(CLAIM)
    assert CLAIM in err.value.message


async def test_oversized_record_is_refused_before_io() -> None:
    store = EtcdStore([dead_endpoint()])
    try:
        with pytest.raises(InvalidRecord):
            await store.create(CLAIM, {"blob": "x" * (etcd_mod.MAX_VALUE_BYTES + 1)})
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.get("../etc/passwd.json"),
        lambda s: s.get("claims/../x.json"),
        lambda s: s.create("nope/x.json", {}),
        lambda s: s.replace("claims/a/.hidden.json", {}, "1"),
        lambda s: s.delete("claims/a/x.txt", "1"),
        lambda s: s.list("nope"),
        lambda s: s.list("claims/../heartbeats"),
        lambda s: s.list("claims", 0),
        lambda s: s.list("claims", None, "../x.json"),
        lambda s: s.move_to_archive("archive/../claims/x.json", "1"),
    ],
)
async def test_invalid_paths_are_refused_before_any_io(call: Any) -> None:
    store = EtcdStore([dead_endpoint()], max_attempts=1)  # any I/O would raise Unavailable
    try:
        with pytest.raises(InvalidPath):
            await call(store)
    finally:
        await store.aclose()


async def test_key_prefixes_isolate_teams_sharing_a_cluster(etcd_server: EtcdCluster) -> None:
    a = EtcdStore(etcd_server.endpoints, key_prefix=f"team-a-{uuid.uuid4().hex[:6]}")
    b = EtcdStore(etcd_server.endpoints, key_prefix=f"team-b-{uuid.uuid4().hex[:6]}")
    try:
        await a.create(CLAIM, {"team": "a"})
        assert await b.get(CLAIM) is None
        await b.create(CLAIM, {"team": "b"})
        assert [e.data for e in (await a.list("claims")).entries] == [{"team": "a"}]
    finally:
        await a.aclose()
        await b.aclose()


# ---- listing ---------------------------------------------------------------------

LISTED = [
    "claims/acme/widgets/b.json",
    "claims/acme/widgets/a.json",
    "claims/acme/w-idgets/z.json",  # '-' sorts before '/': byte order, like sorted()
    "claims/acme/widgets2/c.json",
    "claims/acme/widgets/sub/d.json",
]


async def _fill(store: EtcdStore) -> None:
    for i, path in enumerate(LISTED):
        await store.create(path, {"i": i})
    await store.create("claims/acme-corp/x/y.json", {"outside": True})  # sibling prefix
    await store.create("heartbeats/m1.json", {"other": "family"})
    await store.create("archive/claims/acme/widgets/old.json", {"archived": True})


async def test_list_returns_records_below_prefix_in_path_order(etcd_store: EtcdStore) -> None:
    await _fill(etcd_store)
    page = await etcd_store.list("claims/acme")
    assert [e.path for e in page.entries] == sorted(LISTED)
    assert page.next_cursor is None and page.partial is False
    by_path = {e.path: e for e in page.entries}
    got = await etcd_store.get("claims/acme/widgets/a.json")
    assert by_path["claims/acme/widgets/a.json"].version == got.version


async def test_list_of_a_directory_excludes_sibling_prefixes(etcd_store: EtcdStore) -> None:
    await _fill(etcd_store)
    page = await etcd_store.list("claims/acme/widgets")
    assert [e.path for e in page.entries] == [
        "claims/acme/widgets/a.json",
        "claims/acme/widgets/b.json",
        "claims/acme/widgets/sub/d.json",
    ]


async def test_list_archive_family(etcd_store: EtcdStore) -> None:
    await _fill(etcd_store)
    assert [e.path for e in (await etcd_store.list("archive")).entries] == [
        "archive/claims/acme/widgets/old.json"
    ]


async def test_list_of_empty_prefix_is_empty(etcd_store: EtcdStore) -> None:
    page = await etcd_store.list("batches")
    assert page.entries == [] and page.next_cursor is None


async def test_list_pages_with_limit_and_exclusive_cursor(etcd_store: EtcdStore) -> None:
    await _fill(etcd_store)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await etcd_store.list("claims/acme", 2, cursor)
        pages += 1
        assert len(page.entries) <= 2
        seen.extend(e.path for e in page.entries)
        if page.next_cursor is None:
            break
        assert page.next_cursor == page.entries[-1].path
        cursor = page.next_cursor
    assert seen == sorted(LISTED)
    assert pages == 3


async def test_list_cursor_is_exclusive(etcd_store: EtcdStore) -> None:
    await _fill(etcd_store)
    ordered = sorted(LISTED)
    page = await etcd_store.list("claims/acme", None, ordered[1])
    assert [e.path for e in page.entries] == ordered[2:]


async def test_list_limit_equal_to_count_has_no_next_cursor(etcd_store: EtcdStore) -> None:
    await _fill(etcd_store)
    page = await etcd_store.list("claims/acme", len(LISTED))
    assert len(page.entries) == len(LISTED) and page.next_cursor is None


async def test_unlimited_list_pages_internally_beyond_page_size(etcd_server: EtcdCluster) -> None:
    store = EtcdStore(etcd_server.endpoints, key_prefix=f"t-{uuid.uuid4().hex}", page_size=2)
    try:
        for i in range(7):
            await store.create(f"heartbeats/agent-{i}.json", {"i": i})
        page = await store.list("heartbeats")
        assert [e.data["i"] for e in page.entries] == list(range(7))
        assert page.next_cursor is None
        assert len((await list_all(store, "heartbeats")).entries) == 7
    finally:
        await store.aclose()


async def test_list_skips_keys_that_are_not_state_records(etcd_store: EtcdStore) -> None:
    await etcd_store.create("heartbeats/a.json", {})
    await put_raw(etcd_store, "heartbeats/notes.txt", b"{}")
    assert [e.path for e in (await etcd_store.list("heartbeats")).entries] == ["heartbeats/a.json"]


def recorded_ranges(store: EtcdStore) -> list[dict[str, Any]]:
    """The range requests `store` sends from now on (each still goes to etcd)."""
    ranges: list[dict[str, Any]] = []
    call = store.client.call

    async def recording(api: str, body: dict[str, Any], what: str) -> Any:
        if api == "/v3/kv/range":
            ranges.append(body)
        return await call(api, body, what)

    store.client.call = recording  # type: ignore[method-assign]
    return ranges


async def test_an_unchanged_listing_is_one_keys_only_range(etcd_server: EtcdCluster) -> None:
    store = EtcdStore(etcd_server.endpoints, key_prefix=f"t-{uuid.uuid4().hex}", page_size=2)
    try:
        for i in range(5):
            await store.create(f"heartbeats/agent-{i}.json", {"i": i})
        ranges = recorded_ranges(store)
        first = await store.list("heartbeats")
        assert len(ranges) == 3  # pages of 2 at one revision
        again = await store.list("heartbeats")
        assert len(ranges) == 4 and ranges[3]["keys_only"] is True and "min_mod_revision" in ranges[3]
        assert again == first
        again.entries[0].data["i"] = "changed by a caller"  # the caller's copy, never the kept one
        assert (await store.list("heartbeats")).entries[0].data == {"i": 0}
    finally:
        await store.aclose()


async def test_a_kept_listing_sees_every_write_of_another_client(etcd_server: EtcdCluster) -> None:
    """Creates, replaces, deletes, a delete then a re-create, stray keys: after each
    of 80 random writes by another client, the kept listings (whole, and paged
    with a cursor) equal what a store that keeps nothing reads."""
    import random

    prefix = f"t-{uuid.uuid4().hex}"
    kept = EtcdStore(etcd_server.endpoints, key_prefix=prefix, page_size=2)
    writer = EtcdStore(etcd_server.endpoints, key_prefix=prefix)
    fresh = EtcdStore(etcd_server.endpoints, key_prefix=prefix, listing_memo_bytes=0)
    rng = random.Random(24)
    versions: dict[str, str] = {}
    paths = [f"claims/acme/widgets/{n}.json" for n in range(6)]

    async def paged(store: EtcdStore) -> list[tuple[str, Any, str]]:
        rows, cursor = [], None
        while True:
            page = await store.list("claims/acme/widgets", limit=2, cursor=cursor)
            rows += [(e.path, e.data, e.version) for e in page.entries]
            if page.next_cursor is None:
                return rows
            cursor = page.next_cursor

    try:
        for step in range(80):
            path = rng.choice(paths)
            if path not in versions:
                versions[path] = await writer.create(path, {"step": step})
            elif rng.random() < 0.4:
                await writer.delete(path, versions.pop(path))
            else:
                versions[path] = await writer.replace(path, {"step": step}, versions[path])
            if step % 10 == 5:
                await put_raw(writer, f"claims/acme/widgets/stray-{step}.txt", b"not a record")
            truth = await fresh.list("claims")
            assert await kept.list("claims") == truth, step
            assert await paged(kept) == [(e.path, e.data, e.version) for e in truth.entries], step
    finally:
        for store in (kept, writer, fresh):
            await store.aclose()


# ---- archive moves ------------------------------------------------------------------


async def test_move_to_archive_moves_record_in_one_step(etcd_store: EtcdStore) -> None:
    v1 = await etcd_store.create(CLAIM, {"done": True})
    archived_version = await etcd_store.move_to_archive(CLAIM, v1)
    assert await etcd_store.get(CLAIM) is None
    got = await etcd_store.get("archive/" + CLAIM)
    assert (got.data, got.version) == ({"done": True}, archived_version)


async def test_move_to_archive_with_stale_version_changes_nothing(etcd_store: EtcdStore) -> None:
    v1 = await etcd_store.create(CLAIM, {"n": 1})
    v2 = await etcd_store.replace(CLAIM, {"n": 2}, v1)
    with pytest.raises(Conflict) as err:
        await etcd_store.move_to_archive(CLAIM, v1)
    assert err.value.kind == "version_conflict"
    assert (await etcd_store.get(CLAIM)).version == v2
    assert await etcd_store.get("archive/" + CLAIM) is None


async def test_move_to_archive_never_overwrites_an_archived_record(etcd_store: EtcdStore) -> None:
    await etcd_store.create("archive/" + CLAIM, {"first": True})
    v1 = await etcd_store.create(CLAIM, {"second": True})
    with pytest.raises(Conflict) as err:
        await etcd_store.move_to_archive(CLAIM, v1)
    assert err.value.kind == "already_exists"
    assert (await etcd_store.get(CLAIM)).data == {"second": True}
    assert (await etcd_store.get("archive/" + CLAIM)).data == {"first": True}


async def test_move_to_archive_of_missing_record_is_not_found(etcd_store: EtcdStore) -> None:
    with pytest.raises(NotFound):
        await etcd_store.move_to_archive(CLAIM, "3")


async def test_racing_archive_move_and_write_leave_exactly_one_outcome(etcd_store: EtcdStore) -> None:
    for round_ in range(10):
        path = f"claims/acme/race/t{round_}.json"
        v1 = await etcd_store.create(path, {"n": 0})
        results: dict[str, str] = {}

        async def mover() -> None:
            try:
                await etcd_store.move_to_archive(path, v1)
                results["move"] = "ok"
            except Conflict:
                results["move"] = "conflict"

        async def writer() -> None:
            try:
                await etcd_store.replace(path, {"n": 1}, v1)
                results["write"] = "ok"
            except (Conflict, NotFound):
                results["write"] = "lost"

        async with anyio.create_task_group() as tg:
            tg.start_soon(mover)
            tg.start_soon(writer)
        live = await etcd_store.get(path)
        archived = await etcd_store.get("archive/" + path)
        if results["move"] == "ok":
            assert results["write"] == "lost" and live is None and archived.data == {"n": 0}
        else:
            assert results["write"] == "ok" and live.data == {"n": 1} and archived is None


# ---- timed-out writes that landed -----------------------------------------------------


def _lose_first_txn_reply(store: EtcdStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first txn reaches etcd but its reply is lost, as on a timeout."""
    real_post = store.client._post
    lost: list[str] = []

    async def post(endpoint: str, api: str, body: dict[str, Any], token: str | None) -> dict[str, Any]:
        reply = await real_post(endpoint, api, body, token)
        if api == "/v3/kv/txn" and not lost:
            lost.append(api)
            raise etcd_mod._Retry("timed out (ReadTimeout)", maybe_applied=True)
        return reply

    monkeypatch.setattr(store.client, "_post", post)
    return lost


async def test_create_whose_reply_was_lost_is_recognised_as_ours(
    etcd_store: EtcdStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = _lose_first_txn_reply(etcd_store, monkeypatch)
    version = await etcd_store.create(CLAIM, {"mine": 1})
    assert lost
    assert (await etcd_store.get(CLAIM)).version == version


async def test_replace_whose_reply_was_lost_is_recognised_as_ours(
    etcd_store: EtcdStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1 = await etcd_store.create(CLAIM, {"n": 1})
    lost = _lose_first_txn_reply(etcd_store, monkeypatch)
    v2 = await etcd_store.replace(CLAIM, {"n": 2}, v1)
    assert lost
    got = await etcd_store.get(CLAIM)
    assert (got.data, got.version) == ({"n": 2}, v2)


async def test_delete_whose_reply_was_lost_succeeds(etcd_store: EtcdStore, monkeypatch: pytest.MonkeyPatch) -> None:
    v1 = await etcd_store.create(CLAIM, {"n": 1})
    lost = _lose_first_txn_reply(etcd_store, monkeypatch)
    await etcd_store.delete(CLAIM, v1)
    assert lost and await etcd_store.get(CLAIM) is None


async def test_move_whose_reply_was_lost_is_recognised_as_ours(
    etcd_store: EtcdStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1 = await etcd_store.create(CLAIM, {"n": 1})
    lost = _lose_first_txn_reply(etcd_store, monkeypatch)
    version = await etcd_store.move_to_archive(CLAIM, v1)
    assert lost
    assert (await etcd_store.get("archive/" + CLAIM)).version == version


async def test_identical_create_by_someone_else_is_still_a_conflict(etcd_store: EtcdStore) -> None:
    """Own-write recognition only applies after an attempt of ours may have landed."""
    await etcd_store.create(CLAIM, {"same": 1})
    with pytest.raises(Conflict):
        await etcd_store.create(CLAIM, {"same": 1})


# ---- endpoints ----------------------------------------------------------------------


async def test_dead_endpoint_first_in_list_is_skipped(etcd_server: EtcdCluster) -> None:
    store = EtcdStore([dead_endpoint(), *etcd_server.endpoints], key_prefix=f"t-{uuid.uuid4().hex}")
    try:
        v1 = await store.create(CLAIM, {"n": 1})
        await store.replace(CLAIM, {"n": 2}, v1)
        assert (await store.get(CLAIM)).data == {"n": 2}
        assert store.client.current_endpoint == etcd_server.endpoints[0]
    finally:
        await store.aclose()


async def test_all_endpoints_dead_is_unavailable_naming_them() -> None:
    dead = [dead_endpoint(), dead_endpoint()]
    store = EtcdStore(dead, timeout=1.0)
    try:
        with pytest.raises(Unavailable) as err:
            await store.get(CLAIM)
        assert all(d in err.value.message for d in dead)
        assert err.value.exit_code == 2
    finally:
        await store.aclose()


# ---- auth and RBAC ------------------------------------------------------------------------

ROOT_PASSWORD = "root-Secret-123"
ACME_PASSWORD = "acme-Secret-456"
TTL = 2


@pytest.fixture(scope="module")
def auth_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A cluster with auth on, simple tokens that expire after TTL idle seconds,
    and a machine user `acme` limited to `claims/acme/` (plus its heartbeat)."""
    base: Path = tmp_path_factory.mktemp("etcd-auth")
    extra = ["--auth-token", "simple", "--auth-token-ttl", str(TTL)]
    with running_cluster(base, 1, extra) as cluster:

        async def provision() -> None:
            async with EtcdAdmin(cluster.endpoints) as admin:
                await admin.enable_auth(ROOT_PASSWORD)
            async with EtcdAdmin(cluster.endpoints, user="root", password=ROOT_PASSWORD) as admin:
                await admin.provision(
                    "acme", ACME_PASSWORD, write=["claims/acme/", "heartbeats/acme-1.json"], read=["batches"]
                )

        anyio.run(provision)
        yield cluster


def acme_store(cluster: EtcdCluster, password: str = ACME_PASSWORD) -> EtcdStore:
    return EtcdStore(cluster.endpoints, user="acme", password=password)


async def test_scoped_user_reads_and_writes_inside_its_scope(auth_cluster: EtcdCluster) -> None:
    store = acme_store(auth_cluster)
    try:
        path = f"claims/acme/widgets/{uuid.uuid4().hex}.json"
        v1 = await store.create(path, {"n": 1})
        await store.replace(path, {"n": 2}, v1)
        assert path in [e.path for e in (await store.list("claims/acme")).entries]
        beat = await store.get("heartbeats/acme-1.json")  # a record scope
        if beat is None:
            await store.create("heartbeats/acme-1.json", {"alive": True})
        else:
            await store.replace("heartbeats/acme-1.json", {"alive": True}, beat.version)
        assert (await store.list("batches")).entries == []
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda s: s.get("claims/other/repo/t.json"), "claims/other/repo/t.json"),
        (lambda s: s.create("claims/other/repo/t.json", {}), "claims/other/repo/t.json"),
        (lambda s: s.create("heartbeats/acme-2.json", {}), "heartbeats/acme-2.json"),
        (lambda s: s.create("batches/b1.json", {}), "batches/b1.json"),  # read-only scope
        (lambda s: s.replace("claims/acme-corp/r/t.json", {}, "1"), "claims/acme-corp/r/t.json"),
        (lambda s: s.delete("events/b/e.json", "1"), "events/b/e.json"),
    ],
)
async def test_scoped_user_is_forbidden_outside_its_scope_with_path_named(
    auth_cluster: EtcdCluster, call: Any, named: str
) -> None:
    store = acme_store(auth_cluster)
    try:
        with pytest.raises(Forbidden) as err:
            await call(store)
        assert named in err.value.message
        assert err.value.exit_code == 2
    finally:
        await store.aclose()


async def test_listing_above_the_scope_is_refused_not_filtered(auth_cluster: EtcdCluster) -> None:
    store = acme_store(auth_cluster)
    try:
        with pytest.raises(Forbidden) as err:
            await store.list("claims")
        assert "claims/" in err.value.message
        assert "UNKNOWN" in err.value.message
    finally:
        await store.aclose()


async def test_root_lists_everything(auth_cluster: EtcdCluster) -> None:
    store = EtcdStore(auth_cluster.endpoints, user="root", password=ROOT_PASSWORD)
    try:
        await store.list("claims")
    finally:
        await store.aclose()


async def test_missing_credentials_are_forbidden(auth_cluster: EtcdCluster) -> None:
    store = EtcdStore(auth_cluster.endpoints)
    try:
        with pytest.raises(Forbidden) as err:
            await store.get(CLAIM)
        assert "no etcd user" in err.value.message
    finally:
        await store.aclose()


async def test_wrong_password_is_forbidden_without_echoing_it(auth_cluster: EtcdCluster) -> None:
    wrong = "Wrong-Pass-789"
    store = acme_store(auth_cluster, password=wrong)
    try:
        with pytest.raises(Forbidden) as err:
            await store.get("claims/acme/r/t.json")
        assert "acme" in err.value.message
        assert wrong not in err.value.message
        assert wrong not in repr(store) and wrong not in repr(store.client)
    finally:
        await store.aclose()


async def test_invalidated_token_is_replaced_and_the_call_retried(auth_cluster: EtcdCluster) -> None:
    store = acme_store(auth_cluster)
    try:
        await store.get("claims/acme/r/t.json")
        # As after an auth change invalidated it. (A simple token whose index is
        # ahead of the cluster's makes etcd wait instead of refusing: keep it low.)
        store.client._token = "bogus.1"
        assert await store.get("claims/acme/r/t.json") is None
        assert store.client._token not in (None, "bogus.1")
    finally:
        await store.aclose()


async def test_expired_simple_token_is_renewed_transparently(auth_cluster: EtcdCluster) -> None:
    store = acme_store(auth_cluster)
    try:
        path = f"claims/acme/ttl/{uuid.uuid4().hex}.json"
        v1 = await store.create(path, {"n": 1})
        first = store.client._token
        await anyio.sleep(TTL + 1.5)  # idle past --auth-token-ttl
        await store.replace(path, {"n": 2}, v1)
        assert store.client._token != first
        assert (await store.get(path)).data == {"n": 2}
    finally:
        await store.aclose()


async def test_role_change_takes_effect_for_a_live_store(auth_cluster: EtcdCluster) -> None:
    store = EtcdStore(auth_cluster.endpoints, user="late", password="late-Secret-1")
    try:
        async with EtcdAdmin(auth_cluster.endpoints, user="root", password=ROOT_PASSWORD) as admin:
            await admin.provision("late", "late-Secret-1", read=["heartbeats/late.json"])
            with pytest.raises(Forbidden):
                await store.create("heartbeats/late.json", {})
            await admin.provision("late", "late-Secret-1", write=["heartbeats/late.json"])
        await store.create("heartbeats/late.json", {})
    finally:
        await store.aclose()


def test_scope_ranges_follow_http_token_semantics() -> None:
    assert scope_range("claims/acme") == scope_range("claims/acme/")
    assert scope_range("claims/acme/").key == b"claims/acme/"
    assert scope_range("claims/acme/").range_end == b"claims/acme0"
    assert scope_range("heartbeats/m1.json").range_end is None
    assert scope_range("claims/acme/", "team-a").key == b"team-a/claims/acme/"
    assert scope_range("*", "team-a").range_end == b"team-a0"


# ---- a 3-member cluster ------------------------------------------------------------


async def test_writes_continue_after_the_leader_dies(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 3) as cluster:
        store = EtcdStore(cluster.endpoints, timeout=2.0, max_attempts=12)
        try:
            v = await store.create(CLAIM, {"n": 0})
            leader = cluster.leader_index()
            assert leader is not None
            cluster.kill(leader)
            for n in range(1, 6):
                v = await store.replace(CLAIM, {"n": n}, v)
            assert (await store.get(CLAIM)).data == {"n": 5}
        finally:
            await store.aclose()
