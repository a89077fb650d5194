"""HttpStore: the Store over the Worker state API (ours or the existing tool's).

Wire facts (../shared/spec/worker-protocol-notes.md):

* `GET/PUT/DELETE /v1/state/<path>`; create-only is `If-None-Match: *`, CAS is
  `If-Match: <int>` (a bare decimal: no quotes, no `*`). Versions are integers
  on the wire and decimal strings in our API.
* Every `/` inside the record path is sent as `%2F`, so the path is one URL
  segment: no runtime, proxy or client URL parser can resolve `..`/`.` in it.
  The existing Worker percent-decodes the segment once (the Ruby CLI sends
  paths the same way). Paths are validated here before any I/O anyway.
* `PUT If-Match` / `DELETE If-Match` on a missing record answers 409
  `version_conflict`, like a stale version; a follow-up GET tells the two apart.
* A listing broader than the token's read scope carries `filtered: true`:
  the page is marked partial (what is missing is UNKNOWN).
* A record that is not strict JSON (a string holding a lone UTF-16 surrogate,
  `"x\ud800"`, which the existing Worker stores; ours refuses it) is
  unreadable, as a torn local file is: `get` raises InvalidRecord naming it,
  `list` raises UnreadableEntries naming it and carrying the rest of the page,
  so scans and doctor report it and go on.

Retries: reads (GET) are retried on transport errors and 5xx; writes only when
the connection failed before the request was sent. Every operation is bounded
by `timeout` in total, retries included. No message, log line or repr ever
contains the token.
"""

from __future__ import annotations

import bisect
import builtins
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any, NoReturn
from urllib.parse import quote

import anyio
import httpx
import msgspec

from agentcoordd.model import bounds, ids, jsonscan
from agentcoordd.model.backoff import HTTP_RETRY
from agentcoordd.model.errors import UsageError
from agentcoordd.store.base import (
    Capabilities,
    Conflict,
    Create,
    Delete,
    Entry,
    Get,
    Forbidden,
    InvalidPath,
    InvalidRecord,
    NotFound,
    Op,
    Outcome,
    Page,
    Replace,
    StoreError,
    Unavailable,
    Versioned,
    decode_record,
    page_of,
    run_singly,
)
from agentcoordd.store.clockref import ResponseClock
from agentcoordd.store.memo import LISTING_MEMO_BYTES, ListingMemo

MAX_PAGE = 1000  # the Worker's largest `limit`
# The Worker's caps on a record's data (the existing Worker's protocol), within model.bounds.
ACTIVE_DATA_CAP = 256 * 1024
ARCHIVE_DATA_CAP = 1024 * 1024
MAX_BATCH = 64  # the Worker's largest POST /v1/batch
# Without the batch endpoint, a batch is this many single requests at a time.
FALLBACK_CONCURRENCY = 16
# Batches whose events are mirrored (GET /v1/events?since=); the oldest is dropped first.
MIRRORED_BATCHES = 32
# Capabilities of a Worker are asked again after this long (a Worker may be upgraded).
CAPABILITIES_TTL = 300.0
# The event feed re-lists a followed batch this often (one listing shared by all followers).
CHANGE_POLL = 0.5

ROTATION_HINT = (
    "the machine token is unknown or revoked: provision a new one with "
    "`agentcoordctl token provision MACHINE --rotate ...` (or the Worker's "
    "provision-token --rotate) and set AGENT_COORD_API_TOKEN in this machine's env file"
)

# The Worker's record grammar, stricter than ids.state_path: exact depths and
# segments of [A-Za-z0-9_.:-]; `..` is refused anywhere, even inside a name.
_SEG = r"[A-Za-z0-9_.:-]+"
_ADMISSION = "capacity_profiles|inboxes|lane_occupancies|capacity_reservations|capacity_holds"
_WIRE_RECORD = re.compile(
    rf"(?:archive/)?(?:claims/{_SEG}/{_SEG}/{_SEG}|heartbeats/{_SEG}|batches/{_SEG}|events/{_SEG}/{_SEG}"
    rf"|host_limits/{_SEG}/{_SEG}/{_SEG}/{_SEG}|(?:{_ADMISSION})/{_SEG}/{_SEG})\.json"
)
_EVENTS_BATCH_PREFIX = re.compile(rf"events/({_SEG})")
_WIRE_PREFIX = re.compile(
    rf"archive|(?:archive/)?(?:claims(?:/{_SEG}){{0,2}}|heartbeats|batches|events(?:/{_SEG})?"
    rf"|host_limits(?:/{_SEG}){{0,3}}|(?:{_ADMISSION})(?:/{_SEG})?)"
)


class TokenRejected(Forbidden):
    """401: the token is missing, unknown or revoked (exit 2, rotation hint)."""


class Whoami(msgspec.Struct, frozen=True):
    machine: str
    read_prefixes: list[str]
    write_prefixes: list[str]


# Records arrive as raw JSON text (msgspec.Raw): each is read on its own by
# base.decode_record, within the bounds (model.bounds) — one record nested 100,000
# deep, or not strict JSON, is that record's problem, not its page's.


class _WireEntry(msgspec.Struct):
    path: str
    data: msgspec.Raw
    version: int
    updated_by: str | None = None


class _WirePage(msgspec.Struct):
    entries: list[_WireEntry]
    next_cursor: str | None = None
    filtered: bool = False


class _WireWrite(msgspec.Struct):
    path: str
    version: int
    updated_by: str | None = None


class _WireError(msgspec.Struct):
    error: str = "unknown"


class _WireHealth(msgspec.Struct):
    status: str = ""
    capabilities: list[str] = []


class _WireResult(msgspec.Struct):
    status: int
    body: Any = None  # msgspec.Raw as read; an _Unreadable when the entry in it is not


class _RawResult(msgspec.Struct):
    status: int
    body: msgspec.Raw = msgspec.Raw(b"null")


class _WireBatch(msgspec.Struct):
    results: list[_RawResult]


class _WireChange(msgspec.Struct):
    path: str
    seq: int
    # The record's JSON text; _changes_since replaces it by the record read from it.
    data: msgspec.Raw = msgspec.Raw(b"null")
    version: int = 0
    deleted: bool = False


class _WireChanges(msgspec.Struct):
    seq: int
    changes: list[_WireChange] = []
    more: bool = False
    resync: bool = False


class _NoBatch(Exception):
    """The Worker has no batch endpoint after all: single requests instead."""


class _MaybeMissing:
    """A batched CAS answered 409 version_conflict: stale or missing, settled by a get."""


class _Unreadable:
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _body_code(body: bytes) -> str:
    """The `error` code of a batch result's body (its JSON text)."""
    try:
        error = msgspec.json.decode(body, type=_WireError).error
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return "unknown"
    return error if isinstance(error, str) else "unknown"


class _NoEventsView(Exception):
    """The events endpoint cannot serve this batch now: list it instead."""


class _Mirror:
    """One batch's live events, kept current with GET /v1/events?since=.

    Concurrent readers share syncs: a reader waits for the sync in flight and
    then starts one only when none has begun since it arrived (a sync that began
    before it arrived may have missed a write that finished before the read)."""

    def __init__(self) -> None:
        self.lock = anyio.Lock()
        self.entries: dict[str, Entry] = {}
        self.ordered: list[str] | None = []
        self.seq = 0
        self.begun = 0
        self.done = 0


_encoder = msgspec.json.Encoder()


def _lone_surrogate(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
    return False


def _why(text: bytes, above: int) -> str:
    """Why `text` (an object whose record sits `above` levels down) cannot be read."""
    deepest = jsonscan.depth(text)
    if deepest - above > bounds.MAX_DEPTH:
        return f"JSON nested {deepest - above} levels deep (the bound is {bounds.MAX_DEPTH})"
    try:
        value = json.loads(text)  # within the bound: no recursion limit is near
    except ValueError:
        return "invalid JSON"
    if _lone_surrogate(value):
        return "invalid JSON (a string holding a lone UTF-16 surrogate)"
    return "invalid JSON (not strict JSON, e.g. NaN)"


def _entry(text: bytes) -> tuple[_WireEntry | None, str | None, str | None]:
    """One listing entry's text: (the entry, None, None), or (None, its path, why it
    cannot be read) — the path found by a scan when the entry does not parse."""
    try:
        return msgspec.json.decode(text, type=_WireEntry), None, None
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass
    _deepest, fields = jsonscan.scan(text, ("path",))
    path = fields.get("path")
    return None, path if isinstance(path, str) else None, _why(text, 1)


def _checked_path(path: str) -> str:
    try:
        ids.state_path(path)
    except UsageError as exc:
        raise InvalidPath(exc.message) from None
    if not _WIRE_RECORD.fullmatch(path) or ".." in path:
        raise InvalidPath(f"unsafe state path: {path} (outside the HTTP backend's path grammar)")
    return path


def _checked_prefix(prefix: str) -> str:
    try:
        ids.state_prefix(prefix)
    except UsageError as exc:
        raise InvalidPath(exc.message) from None
    if not _WIRE_PREFIX.fullmatch(prefix) or ".." in prefix:
        raise InvalidPath(f"unsafe state prefix: {prefix} (outside the HTTP backend's prefix grammar)")
    return prefix


def _wire_version(version: str, path: str) -> str:
    if not (isinstance(version, str) and version.isascii() and version.isdigit() and len(version) <= 15):
        # Not a version this backend ever handed out (e.g. a local SHA-256).
        raise Conflict(f"record changed underneath us: {path} (version {version!r} is not current)", "version_conflict")
    return str(int(version))


class HttpStore:
    """A Store over one Worker base URL with one machine token."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        connect_timeout: float | None = None,
        read_attempts: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
        listing_memo_bytes: int = LISTING_MEMO_BYTES,
    ) -> None:
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise UsageError(f"invalid API URL: {base_url!r} (expected http(s)://HOST[:PORT])")
        self.base_url = str(base_url).rstrip("/")
        self.name = f"http:{self.base_url}"
        # The Worker's clock, from every response (lease decisions are judged against it).
        self.clock = ResponseClock(self.health)
        self.capabilities = Capabilities(introspection=self, changes=self, batch=self, clock=self.clock)
        self.timeout = float(timeout)
        self.connect_timeout = min(float(connect_timeout or timeout), self.timeout)
        self.read_attempts = max(1, read_attempts)
        self._has_token = bool(token)
        self._server_caps: frozenset[str] | None = None
        self._server_caps_at = 0.0
        self._caps_lock = anyio.Lock()
        self._mirrors: dict[str, _Mirror] = {}
        # Pages the Worker tagged with an ETag: asked again with If-None-Match, a 304
        # (nothing below the prefix changed) reuses the kept body.
        self._listings: ListingMemo[str, bytes] = ListingMemo(listing_memo_bytes)
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=16, keepalive_expiry=30.0),
            transport=transport,
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: the token goes only to base_url
        )

    def __repr__(self) -> str:
        return f"HttpStore({self.base_url!r})"

    # ---- Store API -------------------------------------------------------

    async def get(self, path: str) -> Versioned | None:
        path = _checked_path(path)
        resp = await self._send("GET", self._record_url(path), path=path)
        if resp.status_code == 404 and self._error_code(resp) == "not_found":
            return None
        if resp.status_code != 200:
            self._raise(resp, path)
        entry, found, why = _entry(resp.content)
        if entry is None:
            if found != path:
                self._decode(resp, _WireEntry, path)  # raises Unavailable with msgspec's reason
            raise InvalidRecord(f"{why} in record {path}")
        return Versioned(decode_record(bytes(entry.data), path), str(entry.version))

    async def create(self, path: str, data: Any) -> str:
        path = _checked_path(path)
        body = self._body(path, data)
        resp = await self._send(
            "PUT", self._record_url(path), path=path, content=body, headers={"If-None-Match": "*"}
        )
        if resp.status_code not in (200, 201):
            self._raise(resp, path)
        return str(self._decode(resp, _WireWrite, path).version)

    async def replace(self, path: str, data: Any, version: str) -> str:
        path = _checked_path(path)
        wire = _wire_version(version, path)
        body = self._body(path, data)
        resp = await self._send(
            "PUT", self._record_url(path), path=path, content=body, headers={"If-Match": wire}
        )
        if resp.status_code == 409 and self._error_code(resp) == "version_conflict":
            await self._conflict_or_missing(path)
        if resp.status_code != 200:
            self._raise(resp, path)
        return str(self._decode(resp, _WireWrite, path).version)

    async def delete(self, path: str, version: str) -> None:
        path = _checked_path(path)
        wire = _wire_version(version, path)
        resp = await self._send("DELETE", self._record_url(path), path=path, headers={"If-Match": wire})
        if resp.status_code == 409 and self._error_code(resp) == "version_conflict":
            await self._conflict_or_missing(path)
        if resp.status_code != 200:
            self._raise(resp, path)

    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Page:
        """One page below `prefix`. `limit=None` asks for the largest page (1000; all
        of a batch's events when they come from its mirror); callers follow
        `next_cursor` (see base.list_all)."""
        prefix = _checked_prefix(prefix)
        if limit is not None and limit < 1:
            raise InvalidPath(f"invalid listing limit: {limit}")
        if cursor is not None:
            if not cursor.startswith(prefix + "/"):
                raise InvalidPath(f"listing cursor {cursor} is not below {prefix}")
            _checked_path(cursor)
        batch = _EVENTS_BATCH_PREFIX.fullmatch(prefix)
        if batch is not None and "events" in await self.server_capabilities():
            try:
                return await self._mirrored_page(batch.group(1), limit, cursor)
            except _NoEventsView:
                pass
        params = {"prefix": prefix, "limit": str(min(limit or MAX_PAGE, MAX_PAGE))}
        if cursor is not None:
            params["cursor"] = cursor
        key = (prefix, limit, cursor)
        kept = self._listings.get(key)
        resp = await self._send("GET", "/v1/state", path=prefix, params=params,
                                headers={"If-None-Match": kept[0]} if kept else None)
        if resp.status_code == 304 and kept is not None:
            return self._page(kept[1], prefix, resp.status_code)
        if resp.status_code != 200:
            self._raise(resp, prefix)
        self._listings.keep(key, resp.headers.get("ETag") or None, resp.content, len(resp.content))
        return self._page(resp.content, prefix, resp.status_code)

    def _page(self, content: bytes, prefix: str, status: int) -> Page:
        """A listing page; records it cannot read are named (UnreadableEntries)."""
        unreadable: list[tuple[str, str]] = []
        try:
            page = msgspec.json.decode(content, type=_WirePage)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            page = self._lenient_page(content, prefix, status, unreadable)
        rows = [(e.path, bytes(e.data), str(e.version)) for e in page.entries]
        return page_of(rows, page.next_cursor or None, bool(page.filtered), unreadable)

    async def run_batch(self, ops: builtins.list[Op]) -> builtins.list[Outcome]:
        """BatchOps: POST /v1/batch in chunks of 64 where the Worker offers it,
        else the single requests, FALLBACK_CONCURRENCY at a time."""
        if len({op.path for op in ops}) != len(ops):
            raise UsageError("a store batch must name each path once")
        outcomes: builtins.list[Outcome] = [None] * len(ops)
        wire: builtins.list[tuple[int, dict[str, Any]]] = []
        for index, op in enumerate(ops):
            try:
                wire.append((index, self._wire_op(op)))
            except (StoreError, InvalidPath) as exc:  # refused here, before any I/O
                outcomes[index] = exc
        sent = 0
        if "batch" in await self.server_capabilities():
            while sent < len(wire):
                chunk = wire[sent:sent + MAX_BATCH]
                try:
                    results = await self._post_batch([body for _, body in chunk])
                except _NoBatch:
                    break
                for (index, _), result in zip(chunk, results, strict=True):
                    outcomes[index] = self._outcome(ops[index], result)
                sent += len(chunk)
            await self._settle_conflicts(ops, outcomes)
        rest = [index for index, _ in wire[sent:]]  # without the endpoint: one request each
        for index, outcome in zip(rest, await run_singly(self, [ops[i] for i in rest], FALLBACK_CONCURRENCY),
                                  strict=True):
            outcomes[index] = outcome
        return outcomes

    async def server_capabilities(self) -> frozenset[str]:
        """What /v1/health advertises (batch, events), asked once per CAPABILITIES_TTL;
        none when the Worker does not say (the existing Worker) or cannot be asked."""
        def fresh() -> bool:
            return self._server_caps is not None and anyio.current_time() - self._server_caps_at < CAPABILITIES_TTL

        if fresh():
            return self._server_caps  # type: ignore[return-value]
        async with self._caps_lock:
            if fresh():  # asked by the caller we waited for
                return self._server_caps  # type: ignore[return-value]
            try:
                resp = await self._send("GET", "/v1/health", path=None, auth=False)
                health = msgspec.json.decode(resp.content, type=_WireHealth) if resp.status_code == 200 else None
            except (StoreError, msgspec.DecodeError, msgspec.ValidationError):
                return frozenset()  # not cached: ask again next time
            self._server_caps = frozenset(health.capabilities if health and health.status == "ok" else ())
            self._server_caps_at = anyio.current_time()
            return self._server_caps

    async def changes(self, prefix: str) -> AsyncIterator[str]:
        """The Worker has no change stream: a tick every `CHANGE_POLL` seconds, on
        which the feed re-reads the prefix with a paged cursor listing."""
        _checked_prefix(prefix)
        while True:
            yield "poll"
            await anyio.sleep(CHANGE_POLL)

    async def whoami(self) -> Whoami:
        resp = await self._send("GET", "/v1/whoami", path=None)
        if resp.status_code != 200:
            self._raise(resp, None)
        return self._decode(resp, Whoami, None)

    async def health(self) -> bool:
        """True when /v1/health answers `{"status":"ok"}` (no token needed)."""
        resp = await self._send("GET", "/v1/health", path=None, auth=False)
        if resp.status_code != 200:
            self._raise(resp, None)
        try:
            return msgspec.json.decode(resp.content).get("status") == "ok"
        except (msgspec.DecodeError, AttributeError):
            return False

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> HttpStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- batches ---------------------------------------------------------

    def _wire_op(self, op: Op) -> dict[str, Any]:
        path = _checked_path(op.path)
        if isinstance(op, Get):
            return {"op": "get", "path": path}
        if isinstance(op, Delete):
            return {"op": "delete", "path": path, "if_match": _wire_version(op.version, path)}
        body = {"op": "put", "path": path, "data": msgspec.Raw(self._encoded(path, op.data))}
        if isinstance(op, Create):
            body["if_none_match"] = "*"
        else:
            body["if_match"] = _wire_version(op.version, path)
        return body

    async def _post_batch(self, ops: builtins.list[dict[str, Any]]) -> builtins.list[_WireResult]:
        reads_only = all(op["op"] == "get" for op in ops)
        resp = await self._send("POST", "/v1/batch", path=None, content=_encoder.encode({"ops": ops}),
                                safe=reads_only)
        if resp.status_code in (404, 405) and self._error_code(resp) in ("route_not_found", "method_not_allowed"):
            self._server_caps = frozenset()  # an older Worker after all
            raise _NoBatch
        if resp.status_code != 200:
            self._raise(resp, None)
        try:
            raw = msgspec.json.decode(resp.content, type=_WireBatch).results
            results = [_WireResult(r.status, r.body) for r in raw]
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            results = self._lenient_batch(resp)
        if len(results) != len(ops):
            raise Unavailable(f"unexpected response from {self.base_url}/v1/batch: "
                              f"{len(results)} results for {len(ops)} operations")
        return results

    def _lenient_batch(self, resp: httpx.Response) -> builtins.list[_WireResult]:
        """A batch answer that does not parse whole: each result read on its own (a get's
        entry it cannot read is that result's _Unreadable)."""
        spans = jsonscan.members(resp.content, "results")
        if spans is None:
            self._decode(resp, _WireBatch, None)  # raises Unavailable
        results = []
        for span in spans:  # type: ignore[union-attr]
            try:
                one = msgspec.json.decode(span, type=_RawResult)
                results.append(_WireResult(one.status, one.body))
                continue
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                pass
            status = jsonscan.scan(span, ("status",))[1].get("status")
            if not isinstance(status, int):
                self._decode(resp, _WireBatch, None)  # raises Unavailable
            results.append(_WireResult(status, _Unreadable(_why(span, 2))))
        return results

    def _outcome(self, op: Op, result: _WireResult) -> Outcome:
        path, status, body = op.path, result.status, result.body
        if isinstance(body, _Unreadable):
            return InvalidRecord(f"{body.reason} in record {path}")
        try:
            if isinstance(op, Get):
                if status == 200:
                    entry, _found, why = _entry(body)
                    if entry is None:
                        return InvalidRecord(f"{why} in record {path}")
                    return Versioned(decode_record(bytes(entry.data), path), str(entry.version))
                if status == 404 and _body_code(bytes(body)) == "not_found":
                    return None
            elif isinstance(op, Delete):
                if status == 200:
                    return None
            elif status in (200, 201):
                return str(msgspec.json.decode(body, type=_WireWrite).version)
        except InvalidRecord as exc:
            return exc
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return Unavailable(f"unexpected response from {self._where(path)} (HTTP {status}): {exc}")
        code = _body_code(bytes(body))
        if status == 409 and code == "version_conflict" and isinstance(op, (Replace, Delete)):
            return _MaybeMissing()
        return self._error(status, code, path)

    async def _settle_conflicts(self, ops: builtins.list[Op], outcomes: builtins.list[Outcome]) -> None:
        """409 answers for both stale and missing records (as the single form): one
        batch of gets tells them apart."""
        pending = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, _MaybeMissing)]
        if not pending:
            return
        try:
            current = await self.run_batch([Get(ops[i].path) for i in pending])
        except StoreError:
            current = [True] * len(pending)  # cannot tell: the conflict the server gave
        for i, now in zip(pending, current, strict=True):
            outcomes[i] = (NotFound(f"record not found: {ops[i].path} at {self.base_url}") if now is None
                           else Conflict(f"record changed underneath us: {self._where(ops[i].path)}",
                                         "version_conflict"))

    # ---- the events view -------------------------------------------------

    async def _mirrored_page(self, batch_id: str, limit: int | None, cursor: str | None) -> Page:
        """A page of `events/<batch_id>` from the batch's mirror, synced first."""
        mirror = self._mirrors.pop(batch_id, None) or _Mirror()
        self._mirrors[batch_id] = mirror  # most recently used last
        while len(self._mirrors) > MIRRORED_BATCHES:
            del self._mirrors[next(iter(self._mirrors))]
        await self._sync(batch_id, mirror)
        if mirror.ordered is None:
            mirror.ordered = sorted(mirror.entries)
        ordered = mirror.ordered
        start = bisect.bisect_right(ordered, cursor) if cursor is not None else 0
        # "The largest page" is all of it here: list_all makes one request, not one per 1000.
        size = min(limit, MAX_PAGE) if limit else len(ordered)
        paths = ordered[start:start + size]
        more = start + size < len(ordered)
        return Page([mirror.entries[p] for p in paths], paths[-1] if more else None)

    async def _sync(self, batch_id: str, mirror: _Mirror) -> None:
        arrived = mirror.begun
        async with mirror.lock:
            if mirror.done > arrived:
                return  # a sync that began after this read arrived has finished
            mirror.begun += 1
            generation = mirror.begun
            while True:
                changes = await self._changes_since(batch_id, mirror.seq)
                if changes.resync:
                    mirror.entries.clear()
                    mirror.seq = 0
                    mirror.ordered = None
                    continue
                for change in changes.changes:
                    if change.deleted:
                        mirror.entries.pop(change.path, None)
                    else:
                        mirror.entries[change.path] = Entry(change.path, change.data, str(change.version))  # type: ignore[arg-type]
                if changes.changes:
                    mirror.ordered = None
                mirror.seq = changes.seq
                if not changes.more:
                    break
            mirror.done = generation

    async def _changes_since(self, batch_id: str, seq: int) -> _WireChanges:
        prefix = f"events/{batch_id}"
        params = {"batch_id": batch_id, "since": str(seq), "limit": str(MAX_PAGE)}
        resp = await self._send("GET", "/v1/events", path=prefix, params=params)
        if resp.status_code == 403 or (resp.status_code == 404 and self._error_code(resp) == "route_not_found"):
            # Refused (the read scope covers only part of the batch: the filtered
            # listing says so) or an older Worker: the state listing answers instead.
            raise _NoEventsView
        if resp.status_code != 200:
            self._raise(resp, prefix)
        try:
            changes = msgspec.json.decode(resp.content, type=_WireChanges)
            for change in changes.changes:
                if not change.deleted:  # read within the bounds, as a listing reads it
                    change.data = decode_record(bytes(change.data), change.path)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, InvalidRecord):
            raise _NoEventsView from None  # an unreadable record: the listing names it
        for change in changes.changes:
            if not change.path.startswith(prefix + "/") or not _WIRE_RECORD.fullmatch(change.path):
                raise Unavailable(f"unexpected response from {self._where(prefix)}: "
                                  f"event path {change.path!r} outside the batch")
        return changes

    # ---- transport -------------------------------------------------------

    @staticmethod
    def _record_url(path: str) -> str:
        # quote with safe="" turns every "/" into %2F: one opaque URL segment.
        return "/v1/state/" + quote(path, safe="")

    def _where(self, path: str | None) -> str:
        return f"{path} at {self.base_url}" if path else self.base_url

    def _body(self, path: str, data: Any) -> bytes:
        return b'{"data":' + self._encoded(path, data) + b"}"

    def _encoded(self, path: str, data: Any) -> bytes:
        try:
            encoded = _encoder.encode(data)
        except (TypeError, ValueError) as exc:
            raise InvalidRecord(f"record for {path} is not JSON-serializable: {exc}") from None
        problem = bounds.problem(encoded)  # the Worker refuses it too (413)
        if problem is not None:
            raise InvalidRecord(f"record {path} not written: {problem}")
        cap = ARCHIVE_DATA_CAP if path.startswith("archive/") else ACTIVE_DATA_CAP
        if len(encoded) > cap:  # the Worker's own cap, within the bounds
            raise InvalidRecord(
                f"record too large for {path}: {len(encoded)} bytes of JSON (limit {cap} bytes)"
            )
        return encoded

    async def _send(
        self,
        method: str,
        url: str,
        *,
        path: str | None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        auth: bool = True,
        safe: bool | None = None,
    ) -> httpx.Response:
        deadline = anyio.current_time() + self.timeout
        safe = method == "GET" if safe is None else safe
        attempts = self.read_attempts if safe else 2
        hdrs = dict(headers or {})
        if content is not None:
            hdrs["Content-Type"] = "application/json"
        request = self._client.build_request(method, url, content=content, headers=hdrs, params=params)
        if not auth:
            request.headers.pop("Authorization", None)
        last = "timed out"
        for attempt in range(1, attempts + 1):
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                break
            request.extensions["timeout"] = httpx.Timeout(
                remaining, connect=min(self.connect_timeout, remaining)
            ).as_dict()
            try:
                sent = time.time()
                # httpx bounds each phase; this bounds the whole exchange.
                with anyio.fail_after(remaining + 0.1):
                    resp = await self._client.send(request)
                self.clock.observe(resp.headers, sent, time.time())
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                # Nothing was sent: safe to retry any method.
                last = f"cannot connect ({type(exc).__name__})"
            except (httpx.TimeoutException, TimeoutError):
                if not safe:
                    raise Unavailable(
                        f"{method} {self._where(path)} timed out after the request was sent; "
                        "its outcome is UNKNOWN"
                    ) from None
                last = "timed out"
            except httpx.TransportError as exc:
                if not safe:
                    raise Unavailable(
                        f"{method} {self._where(path)} failed after the request was sent "
                        f"({type(exc).__name__}); its outcome is UNKNOWN"
                    ) from None
                last = f"transport error ({type(exc).__name__})"
            else:
                if resp.status_code >= 500 and safe and attempt < attempts:
                    last = f"HTTP {resp.status_code}"
                else:
                    return resp
            delay = HTTP_RETRY.delay(attempt)
            if attempt < attempts and deadline - anyio.current_time() > delay:
                await anyio.sleep(delay)
        raise Unavailable(
            f"backend unreachable: {method} {self._where(path)}: {last} "
            f"(timeout {self.timeout:g}s)"
        )

    # ---- responses -------------------------------------------------------

    @staticmethod
    def _error_code(resp: httpx.Response) -> str:
        try:
            return msgspec.json.decode(resp.content, type=_WireError).error
        except (msgspec.DecodeError, msgspec.ValidationError):
            return "unknown"

    def _decode(self, resp: httpx.Response, typ: type, path: str | None) -> Any:
        try:
            return msgspec.json.decode(resp.content, type=typ)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise Unavailable(
                f"unexpected response from {self._where(path)} (HTTP {resp.status_code}): {exc}"
            ) from None

    # A page that does not parse whole may still be a page with a bad record in it:
    # its entries are found by a scan that never recurses (model.jsonscan), and each
    # is read on its own.

    def _lenient_page(self, content: bytes, prefix: str, status: int,
                      unreadable: list[tuple[str, str]]) -> _WirePage:
        def refused(why: str) -> NoReturn:
            raise Unavailable(f"unexpected response from {self._where(prefix)} (HTTP {status}): {why}")

        spans = jsonscan.members(content, "entries")
        if spans is None:
            refused("not a listing page")
        entries: list[_WireEntry] = []
        for span in spans:
            entry, path, why = _entry(span)
            if entry is not None:
                entries.append(entry)
            elif path is not None and _WIRE_RECORD.fullmatch(path) and path.startswith(prefix + "/"):
                unreadable.append((path, why or "invalid JSON"))
            else:  # not one bad record: the page itself is wrong
                refused(f"an entry without a usable path ({why})")
        _deepest, rest = jsonscan.scan(content, ("next_cursor", "filtered"))
        cursor, filtered = rest.get("next_cursor"), rest.get("filtered")
        if not (cursor is None or isinstance(cursor, str)) or not isinstance(filtered, (bool, type(None))):
            refused("bad next_cursor or filtered")
        return _WirePage(entries, cursor, bool(filtered))

    async def _conflict_or_missing(self, path: str) -> NoReturn:
        """The Worker says 409 for both stale and missing; a GET tells which."""
        try:
            current = await self.get(path)
        except StoreError:
            current = True  # cannot tell: report the conflict the server gave
        if current is None:
            raise NotFound(f"record not found: {path} at {self.base_url}")
        raise Conflict(f"record changed underneath us: {path} at {self.base_url}", "version_conflict")

    def _raise(self, resp: httpx.Response, path: str | None) -> NoReturn:
        raise self._error(resp.status_code, self._error_code(resp), path)

    def _error(self, status: int, code: str, path: str | None) -> StoreError | InvalidPath:
        """The StoreError for an HTTP error answer (status, error code) about `path`."""
        where = self._where(path)
        if status == 401 and not self._has_token:
            return TokenRejected(
                f"no machine token configured for {where}: set AGENT_COORD_API_TOKEN "
                "(provision one with `agentcoordctl token provision MACHINE ...`)"
            )
        if status == 401:
            return TokenRejected(f"token rejected ({code}) by {where}: {ROTATION_HINT}")
        if status == 403:
            return Forbidden(f"forbidden: this machine's token has no scope for {where}")
        if status == 404:
            if code == "not_found":
                return NotFound(f"record not found: {where}")
            return Unavailable(f"{self.base_url} does not serve the state API ({code}) for {path or 'this request'}")
        if status == 409 and code == "already_exists":
            return Conflict(f"record already exists: {where}", "already_exists")
        if status == 409:
            return Conflict(f"record changed underneath us: {where}", "version_conflict")
        if status == 413 and code == "too_deep":
            return InvalidRecord(f"record nested too deep for {where} (the bound is {bounds.MAX_DEPTH} levels)")
        if status == 413:
            return InvalidRecord(f"record too large for {where} ({code})")
        if status == 400 and code in ("invalid_path", "invalid_prefix", "invalid_cursor", "invalid_limit"):
            return InvalidPath(f"backend refused {code.removeprefix('invalid_')}: {where}")
        if status >= 500 and code == "schema_not_migrated":
            return Unavailable(
                f"backend failed: HTTP {status} (schema_not_migrated) from {where}: the Worker's "
                "D1 database is not in its schema; run worker/bin/upgrade-from-agent-coord "
                "(agentcoordctl docs worker-upgrade)"
            )
        if status >= 500:
            shown = f" ({code})" if code != "unknown" else ""
            return Unavailable(f"backend failed: HTTP {status}{shown} from {where}")
        return StoreError(f"backend rejected the request: HTTP {status} ({code}) from {where}")
