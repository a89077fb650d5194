"""GET /v1/events on our Worker, raw HTTP: a batch's events in (at, event_id)
order with a cursor, its changes since a sequence number (inserts, updates and
deletions), the whole-batch read scope, and the `events` table the triggers of
migration 0003 keep — agreeing with /v1/state after any mix of single and
batch writes, and backfilled from records older than the migration
(docs/backends.md, "Worker batch and events endpoints").
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcoordd import tokens
from worker_fixture import WORKER_DIR, WRANGLER, WorkerServer, _stop, provision_sql, start_worker


def uniq() -> str:
    return uuid.uuid4().hex[:10]


def put(client: httpx.Client, path: str, data: Any, version: int | None = None) -> dict[str, Any]:
    headers = {"If-None-Match": "*"} if version is None else {"If-Match": str(version)}
    resp = client.put("/v1/state/" + quote(path, safe=""), json={"data": data}, headers=headers)
    assert resp.status_code in (200, 201), resp.text
    return resp.json()


def delete(client: httpx.Client, path: str, version: int) -> None:
    resp = client.delete("/v1/state/" + quote(path, safe=""), headers={"If-Match": str(version)})
    assert resp.status_code == 200, resp.text


def events(client: httpx.Client, batch_id: str, **params: Any) -> httpx.Response:
    return client.get("/v1/events", params={"batch_id": batch_id, **params})


def read_by_cursor(client: httpx.Client, batch_id: str, limit: int) -> list[dict[str, Any]]:
    """Every event of the batch, page after page."""
    got: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": limit}
    while True:
        page = events(client, batch_id, **params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert isinstance(body["seq"], int) and len(body["events"]) <= limit
        got += body["events"]
        if "next_cursor" not in body:
            return got
        assert len(body["events"]) == limit
        params["after"] = body["next_cursor"]


def read_changes(client: httpx.Client, batch_id: str, since: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """Every change after `since`, page after page; and the seq to ask from next."""
    changes: list[dict[str, Any]] = []
    while True:
        page = events(client, batch_id, since=since, limit=limit)
        assert page.status_code == 200, page.text
        body = page.json()
        assert set(body) == {"changes", "seq", "more"}, body
        assert body["seq"] >= since
        changes += body["changes"]
        since = body["seq"]
        if not body["more"]:
            return changes, since
        assert len(body["changes"]) == limit and body["changes"][-1]["seq"] == since


def listing(client: httpx.Client, batch_id: str) -> dict[str, dict[str, Any]]:
    resp = client.get("/v1/state", params={"prefix": f"events/{batch_id}"})
    assert resp.status_code == 200 and "next_cursor" not in resp.json()
    return {e["path"]: e for e in resp.json()["entries"]}


def ev(path: str) -> str:
    return path.rsplit("/", 1)[1].removesuffix(".json")


# ---- cursor mode ----------------------------------------------------------------


def test_events_are_ordered_by_at_then_event_id_and_paged_by_cursor(worker_server):
    batch = f"b{uniq()}"
    records = {  # event_id -> data ; `at`, else `timestamp`, else ""
        "e5": {"at": "2026-03-01T00:00:00Z"},
        "e1": {"at": "2026-03-02T00:00:00Z"},
        "e3": {"timestamp": "2026-03-01T00:00:00Z"},  # ties e5 on time: event_id decides
        "e4": {"at": 7, "timestamp": "2026-02-01T00:00:00Z"},  # `at` not a string
        "e2": {"note": "no time at all"},
        "e0": ["not", "an", "object"],
        "e9": {"at": "2026-03-01T00:00:00Z|pipe"},  # a `|` inside `at` (the cursor's separator)
    }
    with worker_server.client() as client:
        for event_id, data in records.items():
            put(client, f"events/{batch}/{event_id}.json", data)
        put(client, f"events/{batch}x/e1.json", {"at": "2000-01-01T00:00:00Z"})  # another batch
        order = ["e0", "e2", "e4", "e3", "e5", "e9", "e1"]
        ats = {"e0": "", "e2": "", "e4": "2026-02-01T00:00:00Z", "e3": "2026-03-01T00:00:00Z",
               "e5": "2026-03-01T00:00:00Z", "e9": "2026-03-01T00:00:00Z|pipe", "e1": "2026-03-02T00:00:00Z"}
        for limit in (1, 2, 3, 7, 1000):
            got = read_by_cursor(client, batch, limit)
            assert [ev(e["path"]) for e in got] == order
        whole = events(client, batch).json()
        assert "next_cursor" not in whole
        for entry in whole["events"]:
            assert entry == {"path": entry["path"], "data": records[ev(entry["path"])], "version": 1,
                             "updated_by": "ref-all", "at": ats[ev(entry["path"])]}
        assert list(whole["events"][0]) == ["path", "data", "version", "updated_by", "at"]


def test_seq_of_a_cursor_read_is_the_current_change_sequence(worker_server):
    batch = f"b{uniq()}"
    with worker_server.client() as client:
        before = events(client, batch).json()
        assert before == {"events": [], "seq": before["seq"]}
        put(client, f"events/{batch}/e1.json", {"at": "2026-01-01T00:00:00Z"})
        after = events(client, batch).json()
        assert after["seq"] > before["seq"]
        _, since_seq = read_changes(client, batch, 0, 1000)
        assert since_seq == after["seq"]


def test_a_deleted_event_leaves_the_cursor_read(worker_server):
    batch = f"b{uniq()}"
    with worker_server.client() as client:
        put(client, f"events/{batch}/e1.json", {"at": "1"})
        put(client, f"events/{batch}/e2.json", {"at": "2"})
        delete(client, f"events/{batch}/e1.json", 1)
        assert [ev(e["path"]) for e in events(client, batch).json()["events"]] == ["e2"]


# ---- since mode -----------------------------------------------------------------


def test_changes_since_show_inserts_updates_and_deletions_in_seq_order(worker_server):
    batch = f"b{uniq()}"
    with worker_server.client() as client:
        _, start = read_changes(client, batch, 0, 1000)
        p1, p2, p3 = (f"events/{batch}/e{i}.json" for i in (1, 2, 3))
        put(client, p1, {"at": "2026-01-03T00:00:00Z", "n": 1})
        put(client, p2, {"at": "2026-01-01T00:00:00Z"})
        put(client, p1, {"at": "2026-01-03T00:00:00Z", "n": 2}, version=1)
        delete(client, p2, 1)
        put(client, p3, {"timestamp": "2025-12-31T00:00:00Z"})
        for limit in (1, 2, 1000):
            changes, seq = read_changes(client, batch, start, limit)
            assert [(c["path"], c.get("deleted", False)) for c in changes] == [(p1, False), (p2, True), (p3, False)]
            seqs = [c["seq"] for c in changes]
            assert seqs == sorted(seqs) and len(set(seqs)) == 3 and seqs[0] > start
            assert seq >= seqs[-1]
        assert changes[0] == {"path": p1, "data": {"at": "2026-01-03T00:00:00Z", "n": 2}, "version": 2,
                              "updated_by": "ref-all", "at": "2026-01-03T00:00:00Z", "seq": seqs[0]}
        assert changes[1] == {"path": p2, "deleted": True, "seq": seqs[1]}
        assert changes[2]["at"] == "2025-12-31T00:00:00Z"
        # from the answer's seq on: nothing new
        assert events(client, batch, since=seq).json() == {"changes": [], "seq": seq, "more": False}
        # only what changed after a point in the middle
        later, _ = read_changes(client, batch, seqs[1], 1000)
        assert [c["path"] for c in later] == [p3]


def test_since_zero_reads_the_batch_whole(worker_server):
    batch = f"b{uniq()}"
    with worker_server.client() as client:
        for i in range(5):
            put(client, f"events/{batch}/e{i}.json", {"at": f"2026-01-0{i + 1}T00:00:00Z"})
        changes, _ = read_changes(client, batch, 0, 2)
        assert sorted(c["path"] for c in changes) == sorted(listing(client, batch))


def test_a_since_from_no_history_of_this_database_is_a_resync(worker_server):
    """Beyond the current seq (say, a copy made against another database): reread."""
    batch = f"b{uniq()}"
    with worker_server.client() as client:
        current = events(client, batch).json()["seq"]
        assert events(client, batch, since=current + 1000).json() == {"resync": True, "seq": current}


# ---- bad requests and scope --------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ({}, "invalid_batch_id"),
        ({"batch_id": ""}, "invalid_batch_id"),
        ({"batch_id": "a/b"}, "invalid_batch_id"),
        ({"batch_id": ".."}, "invalid_batch_id"),
        ({"batch_id": "."}, "invalid_batch_id"),
        ({"batch_id": "sp ace"}, "invalid_batch_id"),
        ({"batch_id": "b", "limit": "0"}, "invalid_limit"),
        ({"batch_id": "b", "limit": "1001"}, "invalid_limit"),
        ({"batch_id": "b", "limit": "x"}, "invalid_limit"),
        ({"batch_id": "b", "since": "-1"}, "invalid_since"),
        ({"batch_id": "b", "since": "x"}, "invalid_since"),
        ({"batch_id": "b", "since": ""}, "invalid_since"),
        ({"batch_id": "b", "since": "99999999999999999999"}, "invalid_since"),
        ({"batch_id": "b", "after": "no-separator"}, "invalid_cursor"),
        ({"batch_id": "b", "after": "2026|a/b"}, "invalid_cursor"),
        ({"batch_id": "b", "after": "2026|"}, "invalid_cursor"),
        ({"batch_id": "b", "since": "0", "after": "2026|e1"}, "invalid_cursor"),
    ],
)
def test_bad_event_queries_are_400(worker_server, query, code):
    with worker_server.client() as client:
        resp = client.get("/v1/events", params=query)
    assert (resp.status_code, resp.json()) == (400, {"error": code})


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_events_is_get_only(worker_server, method):
    with worker_server.client() as client:
        resp = client.request(method, "/v1/events", params={"batch_id": "b"})
    assert (resp.status_code, resp.json()) == (405, {"error": "method_not_allowed"})


SCOPE_BATCH = "scoped-b"


@pytest.fixture(scope="module")
def readers(worker_server: WorkerServer) -> dict[str, str]:
    """Tokens reading different parts of SCOPE_BATCH's events."""
    run = uniq()
    machines = {
        f"all-{run}": None,  # --all-state: the scope ""
        f"events-{run}": (["events"], []),
        f"batch-{run}": ([f"events/{SCOPE_BATCH}"], []),
        f"one-event-{run}": ([f"events/{SCOPE_BATCH}/e1.json"], []),
        f"other-batch-{run}": ([f"events/{SCOPE_BATCH}x"], []),
        f"claims-{run}": (["claims"], ["claims"]),
    }
    issued, sql = provision_sql(machines)
    worker_server.execute(sql)
    with worker_server.client() as client:
        put(client, f"events/{SCOPE_BATCH}/e1.json", {"at": "2026-01-01T00:00:00Z"})
    return {name.rsplit("-", 1)[0]: token for name, token in issued.items()}


@pytest.mark.parametrize(("reader", "allowed"), [
    ("all", True), ("events", True), ("batch", True),
    ("one-event", False),  # part of the batch only: no filtered answers here
    ("other-batch", False),  # a scope is a directory, not a string prefix
    ("claims", False),
])
@pytest.mark.parametrize("mode", [{}, {"since": "0"}])
def test_events_need_read_scope_over_the_whole_batch(worker_server, readers, reader, allowed, mode):
    resp = httpx.get(worker_server.url + "/v1/events", params={"batch_id": SCOPE_BATCH, **mode}, timeout=15,
                     headers={"Authorization": f"Bearer {readers[reader]}"})
    if allowed:
        assert resp.status_code == 200
    else:
        assert (resp.status_code, resp.json()) == (403, {"error": "forbidden"})


def test_events_need_a_token(worker_server):
    resp = httpx.get(worker_server.url + "/v1/events", params={"batch_id": "b"}, timeout=15)
    assert (resp.status_code, resp.json()) == (401, {"error": "unauthorized"})


# ---- the feed agrees with the records, whatever wrote them ---------------------------

AT_VALUES = [
    {"at": "2026-01-01T00:00:00Z"}, {"at": "2026-01-01T00:00:00Z"}, {"at": "2026-01-02T00:00:00Z"},
    {"timestamp": "2026-01-01T00:00:00Z"}, {"at": "2026-01-01T00:00:00Z|x"}, {"note": "no time"},
]

# (what, which event, its time, run as part of a batch with the ops before it?)
STEPS = st.lists(
    st.tuples(st.sampled_from(["put", "put", "delete"]), st.integers(0, 4), st.integers(0, len(AT_VALUES) - 1),
              st.booleans()),
    min_size=1, max_size=20,
)


class Model:
    """What the records of one batch must be: each event's last version and whether it is live."""

    def __init__(self, batch: str) -> None:
        self.batch = batch
        self.last: dict[str, int] = {}
        self.live: dict[str, Any] = {}

    def op(self, what: str, index: int, moment: int, step: int) -> tuple[dict[str, Any], int] | None:
        """The batch op for a step and the status it must answer (None: nothing to do)."""
        path = f"events/{self.batch}/e{index}.json"
        if what == "delete":
            if path not in self.live:
                return None
            del self.live[path]
            return {"op": "delete", "path": path, "if_match": self.last[path]}, 200
        data = {**AT_VALUES[moment], "step": step}
        if path in self.live:
            op = {"op": "put", "path": path, "data": data, "if_match": str(self.last[path])}
            status = 200
        else:
            op, status = {"op": "put", "path": path, "data": data, "if_none_match": "*"}, 201
        self.last[path] = self.last.get(path, 0) + 1
        self.live[path] = data
        return op, status


def _run_single(client: httpx.Client, op: dict[str, Any]) -> int:
    url = "/v1/state/" + quote(op["path"], safe="")
    if op["op"] == "delete":
        return client.delete(url, headers={"If-Match": str(op["if_match"])}).status_code
    headers = {"If-None-Match": "*"} if "if_none_match" in op else {"If-Match": op["if_match"]}
    return client.put(url, json={"data": op["data"]}, headers=headers).status_code


def _flush(client: httpx.Client, pending: list[tuple[dict[str, Any], int]]) -> None:
    if not pending:
        return
    resp = client.post("/v1/batch", json={"ops": [op for op, _ in pending]})
    assert [r["status"] for r in resp.json()["results"]] == [status for _, status in pending], resp.text
    pending.clear()


def _apply(cache: dict[str, dict[str, Any]], changes: list[dict[str, Any]]) -> None:
    for change in changes:
        if change.get("deleted"):
            cache.pop(change["path"], None)
        else:
            cache[change["path"]] = change


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, page=st.integers(1, 3))
def test_events_agree_with_the_state_listing_after_any_writes(worker_server, steps, page):
    model = Model(f"b{uniq()}")
    cache: dict[str, dict[str, Any]] = {}
    since = 0
    with worker_server.client() as client:
        pending: list[tuple[dict[str, Any], int]] = []
        for number, (what, index, moment, batched) in enumerate(steps):
            planned = model.op(what, index, moment, number)
            if planned is None:
                continue
            if batched:
                pending.append(planned)
                continue
            _flush(client, pending)
            assert _run_single(client, planned[0]) == planned[1]
            changes, since = read_changes(client, model.batch, since, page)  # a cache kept in sync
            _apply(cache, changes)
        _flush(client, pending)
        changes, since = read_changes(client, model.batch, since, page)
        _apply(cache, changes)

        records = listing(client, model.batch)
        assert {p: e["data"] for p, e in records.items()} == model.live
        feed = read_by_cursor(client, model.batch, page)
        assert {e["path"]: {k: e[k] for k in ("path", "data", "version", "updated_by")} for e in feed} == records
        keys = [(e["at"], ev(e["path"])) for e in feed]
        assert keys == sorted(keys)
        assert {p: {k: e[k] for k in ("path", "data", "version", "updated_by")} for p, e in cache.items()} == records
        whole, _ = read_changes(client, model.batch, 0, 1000)
        assert sorted(c["path"] for c in whole if not c.get("deleted")) == sorted(records)


# ---- backfill: records written before migration 0003 -----------------------------------


def _apply_migrations(project: Path, persist_to: Path) -> None:
    subprocess.run([str(WRANGLER), "d1", "migrations", "apply", tokens.DEFAULT_DATABASE, "--local",
                    "--persist-to", str(persist_to)], cwd=project, check=True, capture_output=True, timeout=180)


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerServer]:
    """A database at migration 0002 with records in it, then migrated to 0003, served."""
    from worker_fixture import require_toolchain

    require_toolchain()
    base = tmp_path_factory.mktemp("backfill")
    old = base / "at-0002"
    (old / "migrations").mkdir(parents=True)
    for migration in sorted((WORKER_DIR / "migrations").glob("000[12]_*.sql")):
        shutil.copy(migration, old / "migrations")
    shutil.copy(WORKER_DIR / "wrangler.toml", old / "wrangler.toml")
    persist_to = base / "state"
    _apply_migrations(old, persist_to)
    rows = [
        ("events/b-old/e1.json", {"at": "2026-05-02T00:00:00Z", "type": "claimed"}, 1, "ruby"),
        ("events/b-old/e2.json", {"timestamp": "2026-05-01T00:00:00Z"}, 3, None),
        ("events/b-old/e3.json", {"at": 5}, 1, "ruby"),
        ("events/b-old/e4.json", [1, 2], 2, "ruby"),
        ("events/b-two/e1.json", {"at": "2026-05-03T00:00:00Z"}, 1, "ruby"),
        ("archive/events/b-old/e0.json", {"at": "2026-04-01T00:00:00Z"}, 1, "ruby"),
        ("claims/acme/widgets/1.json", {"at": "2026-05-01T00:00:00Z"}, 1, "ruby"),
    ]
    values = ", ".join(
        "('{}', '{}', {}, {}, '2026-05-05T00:00:00.000Z')".format(
            path, json.dumps(data, separators=(",", ":")), version, "NULL" if by is None else f"'{by}'")
        for path, data, version, by in rows)
    tokens.execute(f"INSERT INTO state (path, data, version, updated_by, updated_at) VALUES {values};",
                   local=True, persist_to=persist_to)
    _apply_migrations(WORKER_DIR, persist_to)  # only 0003 is left to apply
    issued, sql = provision_sql({"reader": None})
    tokens.execute(sql, local=True, persist_to=persist_to)
    proc, url = start_worker(persist_to, base / "wrangler.log")
    try:
        yield WorkerServer(url, persist_to, issued, proc, base / "wrangler.log")
    finally:
        _stop(proc)


def test_records_from_before_the_migration_are_in_the_feed(backfilled):
    with backfilled.client("reader") as client:
        feed = events(client, "b-old").json()
        assert [(ev(e["path"]), e["at"], e["version"]) for e in feed["events"]] == [
            ("e3", "", 1), ("e4", "", 2), ("e2", "2026-05-01T00:00:00Z", 3), ("e1", "2026-05-02T00:00:00Z", 1)]
        assert "updated_by" not in feed["events"][2]  # NULL stays left out, as in /v1/state
        assert feed["seq"] == 5  # the five event records, numbered 1..5
        changes, seq = read_changes(client, "b-old", 0, 1000)
        assert seq == 5 and sorted(c["seq"] for c in changes) == sorted({c["seq"] for c in changes})
        assert [ev(c["path"]) for c in read_changes(client, "b-two", 0, 1000)[0]] == ["e1"]


def test_writes_after_the_migration_continue_the_sequence(backfilled):
    with backfilled.client("reader") as client:
        before = events(client, "b-old").json()["seq"]
        put(client, "events/b-old/e1.json", {"at": "2026-05-02T00:00:00Z", "again": True}, version=1)
        changes, seq = read_changes(client, "b-old", before, 1000)
        assert [(ev(c["path"]), c["version"], c["seq"]) for c in changes] == [("e1", 2, before + 1)]
        assert seq == before + 1
