"""POST /v1/batch on our Worker, raw HTTP: every op answers exactly what its
single form (GET/PUT/DELETE /v1/state/<path>) answers, scope is checked per op,
a bad op never fails its neighbours, and the request itself is bounded
(docs/backends.md, "Worker batch and events endpoints").
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

import httpx
import pytest

ACTIVE_CAP = 256 * 1024
ARCHIVE_CAP = 1024 * 1024


def uniq() -> str:
    return uuid.uuid4().hex[:12]


def batch(server: Any, ops: list[Any], machine: str = "ref-all") -> list[dict[str, Any]]:
    with server.client(machine) as client:
        resp = client.post("/v1/batch", json={"ops": ops})
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert len(results) == len(ops)
    return results


def single(server: Any, method: str, path: str, machine: str = "ref-all",
           headers: dict[str, str] | None = None, body: bytes | None = None) -> dict[str, Any]:
    with server.client(machine) as client:
        resp = client.request(method, "/v1/state/" + quote(path, safe=""), headers=headers or {},
                              content=body)
    return {"status": resp.status_code, "body": resp.json()}


def seed(server: Any, path: str, data: Any = None) -> None:
    """A record at version 1."""
    got = single(server, "PUT", path, headers={"If-None-Match": "*"},
                 body=json.dumps({"data": data if data is not None else {"seed": True}}).encode())
    assert got["status"] == 201 and got["body"]["version"] == 1, got


def statuses(results: list[dict[str, Any]]) -> list[int]:
    return [r["status"] for r in results]


# ---- scope -------------------------------------------------------------------


def test_scoped_batch_refuses_exactly_the_ops_outside_the_scope(worker_server):
    """widgets-only reads and writes claims/acme/widgets, and has no archive/ mirror."""
    run = uniq()
    mine, held = f"claims/acme/widgets/{run}-new.json", f"claims/acme/widgets/{run}-held.json"
    other = f"claims/acme/gadgets/{run}.json"
    seed(worker_server, held)
    ops = [
        {"op": "put", "path": mine, "data": {"n": 1}, "if_none_match": "*"},
        {"op": "put", "path": other, "data": {"n": 1}, "if_none_match": "*"},
        {"op": "get", "path": f"heartbeats/{run}.json"},
        {"op": "delete", "path": held, "if_match": "1"},  # needs archive/ write scope too
        {"op": "put", "path": held, "data": {"n": 2}, "if_match": "1"},
        {"op": "get", "path": mine},
    ]
    results = batch(worker_server, ops, machine="widgets-only")
    assert statuses(results) == [201, 403, 403, 403, 200, 200]
    for i in (1, 2, 3):
        assert results[i]["body"] == {"error": "forbidden"}
    assert results[5]["body"]["data"] == {"n": 1}  # sees the create earlier in the batch
    assert single(worker_server, "GET", other)["status"] == 404
    assert single(worker_server, "GET", held)["body"]["version"] == 2  # not deleted, replaced


def test_delete_with_the_archive_mirror_in_scope_is_allowed(worker_server):
    path = f"claims/acme/widgets/{uniq()}.json"
    seed(worker_server, path)
    [result] = batch(worker_server, [{"op": "delete", "path": path, "if_match": 1}], machine="ref-narrow")
    assert result == {"status": 200, "body": {"path": path, "deleted": True, "updated_by": "ref-narrow"}}


# ---- a bad op never fails its neighbours ---------------------------------------------


BAD_OPS = {
    "bad path": lambda p: {"op": "get", "path": "claims/o/../x.json"},
    "dot segment": lambda p: {"op": "put", "path": "claims/o/./x.json", "data": 1, "if_none_match": "*"},
    "path not a string": lambda p: {"op": "get", "path": 7},
    "oversize data": lambda p: {"op": "put", "path": p, "data": "x" * ACTIVE_CAP, "if_none_match": "*"},
    "stale if_match": lambda p: {"op": "put", "path": p, "data": 1, "if_match": "5"},
    "stale delete": lambda p: {"op": "delete", "path": p, "if_match": 9},
    "create existing": lambda p: {"op": "put", "path": p, "data": 1, "if_none_match": "*"},
    "missing data": lambda p: {"op": "put", "path": p, "if_match": "1"},
    "no precondition": lambda p: {"op": "put", "path": p, "data": 1},
    "bad if_match": lambda p: {"op": "put", "path": p, "data": 1, "if_match": "W/1"},
    "bad if_none_match": lambda p: {"op": "put", "path": p, "data": 1, "if_none_match": "1"},
    "unknown op": lambda p: {"op": "patch", "path": p},
    "no op": lambda p: {"path": p},
    "not an object": lambda p: [p],
}


@pytest.mark.parametrize("bad", list(BAD_OPS))
def test_a_bad_op_never_fails_its_neighbours(worker_server, bad):
    run = uniq()
    before, after, target = (f"claims/o{run}/r/{name}.json" for name in ("before", "after", "target"))
    seed(worker_server, target)
    ops = [
        {"op": "put", "path": before, "data": {"n": "before"}, "if_none_match": "*"},
        BAD_OPS[bad](target),
        {"op": "put", "path": after, "data": {"n": "after"}, "if_none_match": "*"},
    ]
    results = batch(worker_server, ops)
    assert results[0]["status"] == 201 and results[2]["status"] == 201
    assert 400 <= results[1]["status"] < 500
    assert single(worker_server, "GET", before)["body"]["data"] == {"n": "before"}
    assert single(worker_server, "GET", after)["body"]["data"] == {"n": "after"}
    assert single(worker_server, "GET", target)["body"]["version"] == 1  # untouched


def test_ops_run_in_order_in_one_batch(worker_server):
    path = f"claims/o{uniq()}/r/t.json"
    ops = [
        {"op": "put", "path": path, "data": {"v": 1}, "if_none_match": "*"},
        {"op": "put", "path": path, "data": {"v": 2}, "if_match": "1"},
        {"op": "put", "path": path, "data": {"v": "stale"}, "if_match": "1"},
        {"op": "delete", "path": path, "if_match": "2"},
        {"op": "get", "path": path},
        {"op": "put", "path": path, "data": {"v": 3}, "if_none_match": "*"},
    ]
    results = batch(worker_server, ops)
    assert statuses(results) == [201, 200, 409, 200, 404, 201]
    assert results[2]["body"] == {"error": "version_conflict"}
    assert results[5]["body"]["version"] == 3  # above the tombstone, inside the same transaction


# ---- the request as a whole ----------------------------------------------------------


def _post(server: Any, content: bytes, machine: str = "ref-all", **kw: Any) -> httpx.Response:
    with server.client(machine) as client:
        return client.post("/v1/batch", content=content, **kw)


def _get_op(i: int) -> dict[str, str]:
    return {"op": "get", "path": f"claims/o/r/{i}.json"}


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"not json", "invalid_json"),
        (b"", "invalid_json"),
        (b'{"ops":[{"op":"get","path":"claims/o/r/\xff.json"}]}', "invalid_json"),
        (b'{"ops":[{"op":"put","path":"claims/o/r/t.json","data":"\\ud800","if_none_match":"*"}]}',
         "invalid_json"),
        (b"[]", "invalid_batch"),
        (b'{"ops":{}}', "invalid_batch"),
        (b'{"op":"get"}', "invalid_batch"),
        (b'{"ops":[]}', "invalid_batch"),
        (json.dumps({"ops": [_get_op(i) for i in range(65)]}).encode(), "invalid_batch"),
    ],
    ids=["not-json", "empty", "not-utf8", "lone-surrogate", "array", "ops-object", "no-ops", "zero-ops",
         "65-ops"],
)
def test_a_bad_request_is_400_for_the_whole_batch(worker_server, content, code):
    resp = _post(worker_server, content)
    assert (resp.status_code, resp.json()) == (400, {"error": code})


def test_64_ops_is_the_largest_batch(worker_server):
    run = uniq()
    ops = [{"op": "put", "path": f"claims/o{run}/r/{i}.json", "data": {"i": i}, "if_none_match": "*"}
           for i in range(64)]
    assert statuses(batch(worker_server, ops)) == [201] * 64


def test_a_request_over_8_mib_is_413(worker_server):
    resp = _post(worker_server, b'{"ops":[' + b" " * (8 * 1024 * 1024) + b"]}")
    assert (resp.status_code, resp.json()) == (413, {"error": "payload_too_large"})


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_batch_is_post_only(worker_server, method):
    with worker_server.client() as client:
        resp = client.request(method, "/v1/batch")
    assert (resp.status_code, resp.json()) == (405, {"error": "method_not_allowed"})


def test_batch_needs_a_token(worker_server):
    resp = httpx.post(worker_server.url + "/v1/batch", json={"ops": [_get_op(1)]}, timeout=15)
    assert (resp.status_code, resp.json()) == (401, {"error": "unauthorized"})


def test_health_names_the_capabilities(worker_server):
    resp = httpx.get(worker_server.url + "/v1/health", timeout=15)
    assert resp.json() == {"status": "ok", "capabilities": ["batch", "events", "time"]}


# ---- each op answers exactly what its single form answers ------------------------------
#
# (name, record before: None or version 1, machine, batch op minus its path, single request)
# The single form runs on one record, the op on its twin in the same state; the answers
# must be equal with the twin's path in place of the record's. Records are under
# claims/acme/widgets (every provisioned machine writes there), those of OUTSIDE under
# claims/acme/gadgets.

OUTSIDE = {"get forbidden", "put forbidden"}

SINGLE_VS_BATCH = [
    ("get", True, "ref-all", {"op": "get"}, ("GET", {}, None)),
    ("get missing", False, "ref-all", {"op": "get"}, ("GET", {}, None)),
    ("get forbidden", True, "widgets-only", {"op": "get"}, ("GET", {}, None)),
    ("create", False, "ref-all", {"op": "put", "data": {"a": [1, "ü"]}, "if_none_match": "*"},
     ("PUT", {"If-None-Match": "*"}, {"data": {"a": [1, "ü"]}})),
    ("create existing", True, "ref-all", {"op": "put", "data": 1, "if_none_match": "*"},
     ("PUT", {"If-None-Match": "*"}, {"data": 1})),
    ("create wins over if_match", True, "ref-all", {"op": "put", "data": 1, "if_none_match": "*", "if_match": "1"},
     ("PUT", {"If-None-Match": "*", "If-Match": "1"}, {"data": 1})),
    ("replace", True, "ref-all", {"op": "put", "data": None, "if_match": "1"},
     ("PUT", {"If-Match": "1"}, {"data": None})),
    ("replace integer version", True, "ref-all", {"op": "put", "data": 2, "if_match": 1},
     ("PUT", {"If-Match": "1"}, {"data": 2})),
    ("replace leading zeros", True, "ref-all", {"op": "put", "data": 2, "if_match": " 0001 "},
     ("PUT", {"If-Match": "0001"}, {"data": 2})),
    ("replace stale", True, "ref-all", {"op": "put", "data": 2, "if_match": "2"},
     ("PUT", {"If-Match": "2"}, {"data": 2})),
    ("replace missing", False, "ref-all", {"op": "put", "data": 2, "if_match": "1"},
     ("PUT", {"If-Match": "1"}, {"data": 2})),
    ("replace unsafe version", True, "ref-all", {"op": "put", "data": 2, "if_match": "99999999999999999999"},
     ("PUT", {"If-Match": "99999999999999999999"}, {"data": 2})),
    ("replace negative version", True, "ref-all", {"op": "put", "data": 2, "if_match": -1},
     ("PUT", {"If-Match": "-1"}, {"data": 2})),
    ("replace star", True, "ref-all", {"op": "put", "data": 2, "if_match": "*"},
     ("PUT", {"If-Match": "*"}, {"data": 2})),
    ("no precondition", True, "ref-all", {"op": "put", "data": 2}, ("PUT", {}, {"data": 2})),
    ("empty precondition", True, "ref-all", {"op": "put", "data": 2, "if_match": ""},
     ("PUT", {"If-Match": ""}, {"data": 2})),
    ("bad if_none_match", True, "ref-all", {"op": "put", "data": 2, "if_none_match": "1"},
     ("PUT", {"If-None-Match": "1"}, {"data": 2})),
    ("missing data", True, "ref-all", {"op": "put", "if_match": "1"}, ("PUT", {"If-Match": "1"}, {"d": 1})),
    ("data over the cap", True, "ref-all", {"op": "put", "data": "x" * ACTIVE_CAP, "if_match": "1"},
     ("PUT", {"If-Match": "1"}, {"data": "x" * ACTIVE_CAP})),
    ("data at the cap", True, "ref-all", {"op": "put", "data": "x" * (ACTIVE_CAP - 2), "if_match": "1"},
     ("PUT", {"If-Match": "1"}, {"data": "x" * (ACTIVE_CAP - 2)})),
    ("put forbidden", True, "ref-scoped", {"op": "put", "data": 1, "if_match": "1"},
     ("PUT", {"If-Match": "1"}, {"data": 1})),
    ("delete", True, "ref-all", {"op": "delete", "if_match": "1"}, ("DELETE", {"If-Match": "1"}, None)),
    ("delete stale", True, "ref-all", {"op": "delete", "if_match": 4}, ("DELETE", {"If-Match": "4"}, None)),
    ("delete missing", False, "ref-all", {"op": "delete", "if_match": "1"}, ("DELETE", {"If-Match": "1"}, None)),
    ("delete no precondition", True, "ref-all", {"op": "delete"}, ("DELETE", {}, None)),
    ("delete bad version", True, "ref-all", {"op": "delete", "if_match": "abc"},
     ("DELETE", {"If-Match": "abc"}, None)),
    ("delete unsafe version", True, "ref-all", {"op": "delete", "if_match": 99999999999999999999},
     ("DELETE", {"If-Match": "99999999999999999999"}, None)),
    ("delete without archive scope", True, "widgets-only", {"op": "delete", "if_match": "1"},
     ("DELETE", {"If-Match": "1"}, None)),
]


@pytest.mark.parametrize(("name", "exists", "machine", "op", "request_"), SINGLE_VS_BATCH,
                         ids=[case[0] for case in SINGLE_VS_BATCH])
def test_each_op_answers_what_its_single_form_answers(worker_server, name, exists, machine, op, request_):
    run = uniq()
    where = "claims/acme/gadgets" if name in OUTSIDE else "claims/acme/widgets"
    one, twin = f"{where}/{run}-single.json", f"{where}/{run}-batch.json"
    if exists:
        seed(worker_server, one)
        seed(worker_server, twin)
    method, headers, body = request_
    content = None if body is None else json.dumps(body).encode()
    expected = single(worker_server, method, one, machine=machine, headers=headers, body=content)
    [got] = batch(worker_server, [{**op, "path": twin}], machine=machine)
    assert json.loads(json.dumps(got).replace(twin, one)) == expected
    # and both records ended in the same state
    after_one, after_twin = single(worker_server, "GET", one), single(worker_server, "GET", twin)
    assert json.loads(json.dumps(after_twin).replace(twin, one)) == after_one


def test_archive_data_may_be_up_to_one_mebibyte_in_a_batch(worker_server):
    path = f"archive/claims/o{uniq()}/r/t.json"
    [fits, over] = batch(worker_server, [
        {"op": "put", "path": path, "data": "x" * (ARCHIVE_CAP - 2), "if_none_match": "*"},
        {"op": "put", "path": path + "x.json", "data": "x" * ARCHIVE_CAP, "if_none_match": "*"},
    ])
    assert fits["status"] == 201
    assert over == {"status": 413, "body": {"error": "payload_too_large"}}
