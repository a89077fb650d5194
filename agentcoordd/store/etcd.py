"""EtcdStore: the Store protocol over etcd v3's JSON gateway (httpx, no grpc).

How state operations map onto etcd (facts checked against etcd 3.4, issue 10):

| operation     | etcd call                                                          |
| ------------- | ------------------------------------------------------------------ |
| get           | `/v3/kv/range`; version = `kvs[0].mod_revision`                    |
| create        | `/v3/kv/txn` compare `create_revision == 0` → put                  |
| replace       | txn compare `mod_revision == N` → put; version = `header.revision` |
| delete        | same compare → `request_delete_range`                              |
| list          | range `[prefix/, prefix0)` with `limit`, paged from last key + NUL |
| list again    | keys-only range with `min_mod_revision` = kept revision + 1: no    |
|               | key and the same `count` → the kept page (`count` is the range's  |
|               | keys before the filter; were it filtered, every check would fail  |
|               | and the listing be read again — never a stale page)                |
| archive move  | one txn: source `mod_revision == N` and `archive/<path>`           |
|               | `create_revision == 0` → put target + delete source                |

Versions are `mod_revision`s, never etcd's per-key `version` (that restarts at
1 after a delete, which would let a stale CAS succeed: ABA). Revisions are
cluster-wide and never reused, so delete + recreate always yields a new version.

Wire pitfalls handled here: keys and values are base64; int64s travel as
strings; false/zero/empty fields are omitted (a failed txn has no `succeeded`).

Every txn carries a failure branch that reads the key back, so one round trip
tells "not found" from "changed underneath us". A write whose outcome is
unknown (a timeout or a dropped connection after the request was sent, or an
etcd "request timed out"/"leader changed") is retried on the next endpoint with
the *same* expected revision; if that retry's compare fails and the stored
value is byte-for-byte the one we wrote, the earlier attempt landed and it is
reported as our success.

Authentication: `/v3/auth/authenticate` gives a token that is sent as a raw
`Authorization: <token>` header. Simple tokens expire after idle minutes and any
auth change invalidates JWT tokens: on "invalid auth token" the store
re-authenticates once and retries. The password is never put in a message, a
log line or a repr.

Permissions: etcd RBAC *refuses* a range that is not entirely inside the
caller's granted key ranges; it never filters. So `list()` above a role's
prefix raises `Forbidden` rather than returning a partial page. Status and
audit must report such a read as partial/UNKNOWN, never as an empty or complete
listing. `Page.partial` is therefore always False here: a page is complete or
the call fails.

Several teams can share one cluster: `key_prefix` (e.g. `"team-a/"`) is put in
front of every key, and roles are granted on prefixed ranges (see
`etcd_admin.py`).
"""

from __future__ import annotations

import base64
import re
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import httpx
import msgspec

from agentcoordd.model import bounds, ids
from agentcoordd.model.backoff import ETCD_ROUND
from agentcoordd.model.errors import UsageError
from agentcoordd.store.base import (
    Capabilities,
    Conflict,
    Forbidden,
    InvalidPath,
    InvalidRecord,
    NotFound,
    Page,
    Unavailable,
    Versioned,
    decode_record,
    page_of,
)
from agentcoordd.store.clockref import ResponseClock
from agentcoordd.store.memo import LISTING_MEMO_BYTES, ListingMemo

# etcd's default --max-request-bytes is 1.5 MiB; base64 grows a value by 4/3
# and the JSON envelope adds a little, so refuse records that cannot fit.
MAX_VALUE_BYTES = 1_100_000
DEFAULT_PAGE_SIZE = 500
DEFAULT_TIMEOUT = 5.0

# gRPC status codes as the gateway reports them in `code`.
_INVALID_ARGUMENT = 3
_DEADLINE_EXCEEDED = 4
_PERMISSION_DENIED = 7
_RESOURCE_EXHAUSTED = 8
_FAILED_PRECONDITION = 9
_OUT_OF_RANGE = 11
_UNAVAILABLE = 14
_UNAUTHENTICATED = 16

_REVISION = re.compile(r"[1-9][0-9]{0,18}")
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text or "")


def encode_value(data: Any) -> bytes:
    """Compact JSON: the bytes stored in etcd (and compared to spot our own write)."""
    return _encoder.encode(data)


def _valid(check: Any, value: str) -> str:
    try:
        return check(value)
    except UsageError as exc:
        raise InvalidPath(exc.message) from None


def _prefix_end(key: bytes) -> bytes:
    """The smallest key greater than every key starting with `key`."""
    trimmed = key.rstrip(b"\xff")
    if not trimmed:
        return b"\0"  # etcd: "every key >= key"
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def normalize_endpoint(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url:
        raise UsageError("empty etcd endpoint")
    if "://" not in url:
        url = "http://" + url
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"etcd endpoint must be http:// or https://: {url}")
    return url


def normalize_key_prefix(key_prefix: str) -> str:
    """`""` or a `/`-terminated prefix without NUL; `team-a` becomes `team-a/`."""
    if not key_prefix:
        return ""
    if "\x00" in key_prefix or key_prefix.startswith("/"):
        raise UsageError(f"invalid etcd key prefix: {key_prefix!r}")
    return key_prefix if key_prefix.endswith("/") else key_prefix + "/"


# ---- transport ---------------------------------------------------------------


class _Retry(Exception):
    """This endpoint failed; try the next one. `maybe_applied`: a write may have landed."""

    def __init__(self, reason: str, maybe_applied: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.maybe_applied = maybe_applied


class _BadToken(Exception):
    pass


class _Denied(Exception):
    pass


class _Compacted(Exception):
    pass


class EtcdError(Exception):
    """An etcd error reply that is none of the mapped cases."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class EtcdClient:
    """One pooled httpx client over a list of endpoints, with auth and rotation.

    `call()` returns `(reply, maybe_applied)`: `maybe_applied` is True when an
    earlier attempt of the same request failed in a way that may have let it
    land (callers of non-idempotent requests use it to recognise their write).
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        user: str | None = None,
        password: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_attempts: int | None = None,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = [e for e in endpoints.split(",") if e.strip()]
        self.endpoints = [normalize_endpoint(e) for e in endpoints]
        if not self.endpoints:
            raise UsageError("no etcd endpoints given")
        if (user is None) != (password is None):
            raise UsageError("etcd user and password must be given together")
        self.user = user
        self.__password = password
        self._token: str | None = None
        self._auth_lock = anyio.Lock()
        self._current = 0
        self.max_attempts = max_attempts or max(3, 2 * len(self.endpoints))
        verify: ssl.SSLContext | bool = True
        if ca_file or cert_file:
            verify = ssl.create_default_context(cafile=ca_file)
            if cert_file:
                verify.load_cert_chain(cert_file, key_file)
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout),
            verify=verify,
            trust_env=False,  # a proxy from the environment must never see etcd traffic
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=8),
            headers={"Content-Type": "application/json"},
        )
        # The cluster's clock, from the Date header of every gateway response.
        self.clock = ResponseClock(self._clock_probe)

    async def _clock_probe(self) -> None:
        """One cheap request for its Date header (answered with an error too: it still has one)."""
        endpoint = self.current_endpoint
        try:
            await self._post(endpoint, "/v3/maintenance/status", {}, None)
        except Exception:  # noqa: BLE001 - the Date header, if any, is all this wants
            pass

    def __repr__(self) -> str:  # never the password, never the token
        return f"EtcdClient(endpoints={self.endpoints!r}, user={self.user!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def current_endpoint(self) -> str:
        return self.endpoints[self._current % len(self.endpoints)]

    def _rotate(self, failed: str) -> None:
        # Only move on if nobody else already did (concurrent failures).
        if self.current_endpoint == failed:
            self._current = (self._current + 1) % len(self.endpoints)

    async def call(self, api: str, body: dict[str, Any], what: str) -> tuple[dict[str, Any], bool]:
        maybe_applied = False
        reauthenticated = False
        reasons: list[str] = []
        attempt = 0
        while attempt < self.max_attempts:
            endpoint = self.current_endpoint
            try:
                token = await self._ensure_token(endpoint)
                return await self._post(endpoint, api, body, token), maybe_applied
            except _BadToken:
                if self.user is None:
                    raise Forbidden(f"etcd requires authentication for {what}: no etcd user configured") from None
                if reauthenticated:
                    raise Forbidden(f"etcd refused the token of user {self.user!r} for {what}") from None
                reauthenticated = True
                await self._invalidate(token)
                continue  # same endpoint, not counted as an attempt
            except _Retry as exc:
                maybe_applied = maybe_applied or exc.maybe_applied
                reasons.append(f"{endpoint}: {exc.reason}")
                self._rotate(endpoint)
                attempt += 1
                if attempt < self.max_attempts and attempt % len(self.endpoints) == 0:
                    await anyio.sleep(ETCD_ROUND.delay(attempt // len(self.endpoints)))
        shown = "; ".join(reasons[-len(self.endpoints):])
        mutating = api in ("/v3/kv/txn", "/v3/kv/put", "/v3/kv/deleterange")
        state = " (the write may or may not have been applied)" if maybe_applied and mutating else ""
        raise Unavailable(f"etcd unavailable for {what}{state}: {shown}")

    async def _ensure_token(self, endpoint: str) -> str | None:
        if self.user is None:
            return None
        token = self._token
        if token is not None:
            return token or None
        async with self._auth_lock:
            if self._token is None:
                self._token = await self._authenticate(endpoint)
            return self._token or None

    async def _invalidate(self, stale: str | None) -> None:
        async with self._auth_lock:
            if self._token == (stale or ""):
                self._token = None
            elif stale is None and self._token == "":
                self._token = None

    async def _authenticate(self, endpoint: str) -> str:
        """A fresh token, or "" when the cluster has auth disabled."""
        try:
            reply = await self._post(
                endpoint, "/v3/auth/authenticate", {"name": self.user, "password": self.__password}, None
            )
        except EtcdError as exc:
            if "authentication is not enabled" in exc.message:
                return ""
            if "authentication failed" in exc.message:
                raise Forbidden(f"etcd authentication failed for user {self.user!r}") from None
            raise Unavailable(f"etcd authentication of user {self.user!r} failed: {exc.message}") from None
        except _BadToken:
            raise Forbidden(f"etcd authentication failed for user {self.user!r}") from None
        token = reply.get("token")
        if not isinstance(token, str) or not token:
            raise Unavailable(f"etcd returned no token for user {self.user!r}")
        return token

    async def _post(self, endpoint: str, api: str, body: dict[str, Any], token: str | None) -> dict[str, Any]:
        headers = {"Authorization": token} if token else None
        content = _encoder.encode(body)
        try:
            sent = time.time()
            response = await self._http.post(endpoint + api, content=content, headers=headers)
            self.clock.observe(response.headers, sent, time.time())
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise _Retry(f"cannot connect ({type(exc).__name__})", maybe_applied=False) from None
        except httpx.TimeoutException as exc:
            raise _Retry(f"timed out ({type(exc).__name__})", maybe_applied=True) from None
        except httpx.TransportError as exc:
            raise _Retry(f"connection failed ({type(exc).__name__})", maybe_applied=True) from None
        try:
            reply = _decoder.decode(response.content)
        except msgspec.DecodeError:
            reply = None
        if not isinstance(reply, dict):
            raise _Retry(
                f"HTTP {response.status_code} without an etcd reply", maybe_applied=response.status_code >= 500
            )
        if "code" in reply and ("error" in reply or "message" in reply):
            self._raise_for(reply)
        if response.status_code >= 400:
            raise _Retry(f"HTTP {response.status_code}", maybe_applied=response.status_code >= 500)
        return reply

    async def watch(self, key: bytes, range_end: bytes) -> AsyncIterator[dict[str, Any]]:
        """The JSON gateway's `/v3/watch` stream on [key, range_end): each reply's
        `result`, as etcd sends them (the first one says `created`). Ends (or raises
        Unavailable) when the stream breaks; the caller re-watches."""
        endpoint = self.current_endpoint
        try:
            token = await self._ensure_token(endpoint)
        except _BadToken:
            await self._invalidate(None)
            raise Unavailable("etcd refused the watch token") from None
        headers = {"Authorization": token} if token else None
        body = _encoder.encode({"create_request": {"key": _b64(key), "range_end": _b64(range_end)}})
        try:
            # No read timeout: a quiet prefix sends nothing for as long as it stays quiet.
            async with self._http.stream("POST", endpoint + "/v3/watch", content=body, headers=headers,
                                         timeout=httpx.Timeout(None, connect=5.0)) as response:
                if response.status_code != 200:
                    self._rotate(endpoint)
                    raise Unavailable(f"etcd watch: HTTP {response.status_code} from {endpoint}")
                async for line in response.aiter_lines():
                    try:
                        reply = _decoder.decode(line)
                    except msgspec.DecodeError:
                        continue
                    if not isinstance(reply, dict):
                        continue
                    if "error" in reply:
                        error = reply["error"] if isinstance(reply["error"], dict) else {}
                        if error.get("http_code") == 401 or "token" in str(error.get("message", "")):
                            await self._invalidate(token)
                        raise Unavailable(f"etcd watch failed: {error.get('message') or reply['error']}")
                    result = reply.get("result")
                    if isinstance(result, dict):
                        yield result
        except httpx.TransportError as exc:
            self._rotate(endpoint)
            raise Unavailable(f"etcd watch on {endpoint} broke ({type(exc).__name__})") from None

    @staticmethod
    def _raise_for(reply: dict[str, Any]) -> None:
        try:
            code = int(reply.get("code", 0))
        except (TypeError, ValueError):
            code = 2
        message = str(reply.get("message") or reply.get("error") or "unknown etcd error")
        lowered = message.lower()
        if code == _UNAUTHENTICATED or "invalid auth token" in lowered or "user name is empty" in lowered:
            raise _BadToken()
        if "revision of auth store is old" in lowered:
            # The auth store changed while the request was in flight; it was rejected.
            raise _Retry(message, maybe_applied=False)
        if code == _PERMISSION_DENIED or "permission denied" in lowered:
            raise _Denied()
        if code == _OUT_OF_RANGE and "compacted" in lowered:
            raise _Compacted()
        if code in (_UNAVAILABLE, _DEADLINE_EXCEEDED, _RESOURCE_EXHAUSTED) or "timed out" in lowered:
            raise _Retry(message, maybe_applied=True)
        if code == 0:
            return
        raise EtcdError(code, message)


# ---- the store ---------------------------------------------------------------


class EtcdStore:
    """A Store over an etcd v3 cluster; see the module docstring for semantics."""

    def __init__(
        self,
        endpoints: Sequence[str] | str,
        *,
        user: str | None = None,
        password: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        key_prefix: str = "",
        timeout: float = DEFAULT_TIMEOUT,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_attempts: int | None = None,
        listing_memo_bytes: int = LISTING_MEMO_BYTES,
    ) -> None:
        self.client = EtcdClient(
            endpoints,
            user=user,
            password=password,
            ca_file=ca_file,
            cert_file=cert_file,
            key_file=key_file,
            timeout=timeout,
            max_attempts=max_attempts,
        )
        self.key_prefix = normalize_key_prefix(key_prefix)
        self._kp = self.key_prefix.encode("utf-8")
        self.page_size = max(1, page_size)
        self.name = "etcd:" + ",".join(self.client.endpoints) + (f"#{self.key_prefix}" if self.key_prefix else "")
        self.capabilities = Capabilities(archive=self, changes=self, clock=self.client.clock)
        # Listings kept with the revision they were read at: the same listing again
        # is one keys-only range asking whether anything changed since.
        self._listings: ListingMemo[tuple[int, int], tuple[list[tuple[str, bytes, str]], str | None]] = \
            ListingMemo(listing_memo_bytes)

    def __repr__(self) -> str:
        return f"EtcdStore({self.name!r}, user={self.client.user!r})"

    async def aclose(self) -> None:
        await self.client.aclose()

    # ---- helpers -----------------------------------------------------------

    def _key(self, path: str) -> bytes:
        return self._kp + path.encode("utf-8")

    def _who(self) -> str:
        return f"etcd user {self.client.user!r}" if self.client.user else "the etcd client"

    async def _call(self, api: str, body: dict[str, Any], what: str, path: str, access: str) -> tuple[dict[str, Any], bool]:
        try:
            return await self.client.call(api, body, what)
        except _Denied:
            raise Forbidden(f"permission denied: {self._who()} may not {access} {path}") from None
        except _Compacted:
            raise Unavailable(f"etcd compacted the revision pinned by {what}; retry") from None
        except EtcdError as exc:
            if "too large" in exc.message:
                raise InvalidRecord(f"record too large for etcd: {path}") from None
            raise Unavailable(f"etcd refused {what}: {exc.message}") from None

    @staticmethod
    def _expected(version: str, path: str) -> int:
        if not isinstance(version, str) or _REVISION.fullmatch(version) is None:
            raise Conflict(f"record changed underneath us: {path} (version {version!r} is not an etcd revision)", "version_conflict")
        return int(version)

    @staticmethod
    def _encode(data: Any, path: str) -> bytes:
        value = encode_value(data)
        problem = bounds.problem(value)  # what no store could read is not written
        if problem is not None:
            raise InvalidRecord(f"record {path} not written: {problem}")
        if len(value) > MAX_VALUE_BYTES:
            raise InvalidRecord(f"record too large for etcd ({len(value)} bytes): {path}")
        return value

    @staticmethod
    def _failure_kvs(reply: dict[str, Any]) -> list[dict[str, Any]]:
        """The key read back by each failure-branch range, in order (None if absent)."""
        out: list[Any] = []
        for item in reply.get("responses") or []:
            kvs = (item.get("response_range") or {}).get("kvs") or []
            out.append(kvs[0] if kvs else None)
        return out

    # ---- Store API -----------------------------------------------------------

    async def get(self, path: str) -> Versioned | None:
        path = _valid(ids.state_path, path)
        reply, _ = await self._call("/v3/kv/range", {"key": _b64(self._key(path))}, f"get {path}", path, "read")
        kvs = reply.get("kvs") or []
        if not kvs:
            return None
        kv = kvs[0]
        return Versioned(decode_record(_unb64(kv.get("value")), path), str(kv["mod_revision"]))

    async def create(self, path: str, data: Any) -> str:
        path = _valid(ids.state_path, path)
        value = self._encode(data, path)
        key = _b64(self._key(path))
        txn = {
            "compare": [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": key, "value": _b64(value)}}],
            "failure": [{"request_range": {"key": key}}],
        }
        reply, maybe_applied = await self._call("/v3/kv/txn", txn, f"create {path}", path, "write")
        if reply.get("succeeded"):
            return str(reply["header"]["revision"])
        (kv,) = self._failure_kvs(reply) or [None]
        if maybe_applied and kv is not None and _unb64(kv.get("value")) == value:
            return str(kv["mod_revision"])  # our earlier, timed-out attempt landed
        raise Conflict(f"record already exists: {path}", "already_exists")

    async def replace(self, path: str, data: Any, version: str) -> str:
        path = _valid(ids.state_path, path)
        value = self._encode(data, path)
        expected = self._expected(version, path)
        key = _b64(self._key(path))
        txn = {
            "compare": [{"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": str(expected)}],
            "success": [{"request_put": {"key": key, "value": _b64(value)}}],
            "failure": [{"request_range": {"key": key}}],
        }
        reply, maybe_applied = await self._call("/v3/kv/txn", txn, f"replace {path}", path, "write")
        if reply.get("succeeded"):
            return str(reply["header"]["revision"])
        (kv,) = self._failure_kvs(reply) or [None]
        if kv is None:
            raise NotFound(f"record not found: {path}")
        if maybe_applied and int(kv["mod_revision"]) > expected and _unb64(kv.get("value")) == value:
            return str(kv["mod_revision"])
        raise Conflict(f"record changed underneath us: {path}", "version_conflict")

    async def delete(self, path: str, version: str) -> None:
        path = _valid(ids.state_path, path)
        expected = self._expected(version, path)
        key = _b64(self._key(path))
        txn = {
            "compare": [{"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": str(expected)}],
            "success": [{"request_delete_range": {"key": key}}],
            "failure": [{"request_range": {"key": key}}],
        }
        reply, maybe_applied = await self._call("/v3/kv/txn", txn, f"delete {path}", path, "delete")
        if reply.get("succeeded"):
            return
        (kv,) = self._failure_kvs(reply) or [None]
        if kv is None:
            if maybe_applied:
                return  # the earlier, timed-out attempt deleted it
            raise NotFound(f"record not found: {path}")
        raise Conflict(f"record changed underneath us: {path}", "version_conflict")

    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Page:
        """Records below `prefix` in key order with `path > cursor`.

        `limit=None` returns everything (paged internally at one pinned
        revision, so the result is one consistent snapshot). With a limit,
        `next_cursor` is the last path returned when more records follow.
        Raises Forbidden when the credentials do not cover the whole prefix:
        etcd refuses such a range instead of filtering it.
        """
        prefix = _valid(ids.state_prefix, prefix).rstrip("/")
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise InvalidPath(f"invalid listing limit: {limit}")
        if cursor is not None:
            cursor = _valid(ids.state_path, cursor)
        start = self._key(prefix + "/")
        end = _prefix_end(start)
        if cursor is not None:
            start = max(start, self._key(cursor) + b"\0")
        what = f"list {prefix}/"
        key = (prefix, limit, cursor)
        kept = self._listings.get(key)
        if kept is not None and await self._unchanged(start, end, kept[0], what, prefix):
            rows, next_cursor = kept[1]
            return page_of(rows, next_cursor)
        rows, next_cursor, tag = await self._read_range(start, end, limit, what, prefix)
        self._listings.keep(key, tag, (rows, next_cursor), sum(len(raw) + len(path) for path, raw, _ in rows))
        return page_of(rows, next_cursor)

    async def _read_range(self, start: bytes, end: bytes, limit: int | None, what: str,
                          prefix: str) -> tuple[list[tuple[str, bytes, str]], str | None, tuple[int, int]]:
        """(path, raw value, version) rows of the range at one pinned revision, the next
        cursor, and the tag that validates them: (revision, keys in the range then)."""
        rows: list[tuple[str, bytes, str]] = []
        revision: str | None = None
        keys = 0
        next_cursor: str | None = None
        while start < end:
            want = self.page_size if limit is None else min(self.page_size, limit - len(rows))
            body: dict[str, Any] = {"key": _b64(start), "range_end": _b64(end), "limit": str(want)}
            if revision is not None:
                body["revision"] = revision
            reply = await self._range(body, what, prefix)
            if revision is None:
                revision = str(reply["header"]["revision"])
                keys = int(reply.get("count") or 0)
            kvs = reply.get("kvs") or []
            for kv in kvs:
                path = self._path_of(_unb64(kv.get("key")))
                if path is None:
                    continue  # not a record written by agentcoord: skipped, like stray files locally
                rows.append((path, _unb64(kv.get("value")), str(kv["mod_revision"])))
            if not reply.get("more") or not kvs:
                break
            start = _unb64(kvs[-1].get("key")) + b"\0"
            if limit is not None and len(rows) >= limit:
                next_cursor = rows[-1][0]
                break
        if revision is None:  # an empty range (a cursor past the prefix): nothing to validate
            return rows, next_cursor, (0, 0)
        return rows, next_cursor, (int(revision), keys)

    async def _unchanged(self, start: bytes, end: bytes, tag: tuple[int, int], what: str, prefix: str) -> bool:
        """Nothing in the range was written since the tag's revision (no key with a
        later mod_revision) and nothing was deleted (the same number of keys: etcd
        counts before it filters). No limit: one would be applied before the filter
        by an etcd that did so, and hide a change."""
        revision, keys = tag
        if revision == 0:
            return False
        reply = await self._range({"key": _b64(start), "range_end": _b64(end), "keys_only": True,
                                   "min_mod_revision": str(revision + 1)}, what, prefix)
        return not reply.get("kvs") and int(reply.get("count") or 0) == keys

    async def _range(self, body: dict[str, Any], what: str, prefix: str) -> dict[str, Any]:
        try:
            reply, _ = await self.client.call("/v3/kv/range", body, what)
        except _Denied:
            raise Forbidden(
                f"permission denied: {self._who()} may not list {prefix}/ "
                "(etcd refuses listings beyond a role's key ranges; treat this read as partial/UNKNOWN)"
            ) from None
        except _Compacted:
            raise Unavailable(f"etcd compacted the revision of an in-progress {what}; retry") from None
        except EtcdError as exc:
            raise Unavailable(f"etcd refused {what}: {exc.message}") from None
        return reply

    def _path_of(self, raw_key: bytes) -> str | None:
        if not raw_key.startswith(self._kp):
            return None
        try:
            return ids.state_path(raw_key[len(self._kp):].decode("utf-8"))
        except (UnicodeDecodeError, UsageError):
            return None

    # ---- change detection (the event feed) --------------------------------------

    async def changes(self, prefix: str) -> AsyncIterator[str]:
        """A native etcd watch on the prefix: yields once the watch is created, then on
        every reply carrying events. A broken watch is re-created (after a short
        backoff) and yields again, since a change may have landed in between."""
        prefix = _valid(ids.state_prefix, prefix).rstrip("/")
        start = self._key(prefix + "/")
        end = _prefix_end(start)
        failures = 0
        while True:
            try:
                async for result in self.client.watch(start, end):
                    if result.get("created") or result.get("events"):
                        failures = 0
                        yield "watch"
                    if result.get("canceled"):
                        break
            except Unavailable:
                pass
            failures += 1
            await anyio.sleep(ETCD_ROUND.delay(failures))

    # ---- etcd-only helpers ------------------------------------------------------

    async def move_to_archive(self, path: str, version: str) -> str:
        """Atomically move `path` (at `version`) to `archive/<path>`; returns the archive version.

        One txn: the source still has `mod_revision == version` and the archive
        record does not exist → put the archive record (the source's exact
        bytes) and delete the source. Raises NotFound (source gone),
        Conflict(version_conflict) (source changed) or Conflict(already_exists)
        (an archive record is already there).
        """
        path = _valid(ids.state_path, path)
        target = _valid(ids.archive_path, path)
        expected = self._expected(version, path)
        src = _b64(self._key(path))
        reply, _ = await self._call("/v3/kv/range", {"key": src}, f"read {path} to archive", path, "read")
        kvs = reply.get("kvs") or []
        if not kvs:
            raise NotFound(f"record not found: {path}")
        if int(kvs[0]["mod_revision"]) != expected:
            raise Conflict(f"record changed underneath us: {path}", "version_conflict")
        value = _unb64(kvs[0].get("value"))
        dst = _b64(self._key(target))
        txn = {
            "compare": [
                {"key": src, "target": "MOD", "result": "EQUAL", "mod_revision": str(expected)},
                {"key": dst, "target": "CREATE", "result": "EQUAL", "create_revision": "0"},
            ],
            "success": [
                {"request_put": {"key": dst, "value": _b64(value)}},
                {"request_delete_range": {"key": src}},
            ],
            "failure": [{"request_range": {"key": src}}, {"request_range": {"key": dst}}],
        }
        reply, maybe_applied = await self._call("/v3/kv/txn", txn, f"archive {path}", path, "archive")
        if reply.get("succeeded"):
            return str(reply["header"]["revision"])
        src_kv, dst_kv = (self._failure_kvs(reply) + [None, None])[:2]
        if maybe_applied and src_kv is None and dst_kv is not None and _unb64(dst_kv.get("value")) == value:
            return str(dst_kv["mod_revision"])
        if dst_kv is not None:
            raise Conflict(f"record already exists: {target}", "already_exists")
        if src_kv is None:
            raise NotFound(f"record not found: {path}")
        raise Conflict(f"record changed underneath us: {path}", "version_conflict")

    async def status(self) -> dict[str, Any]:
        """The answering member's `/v3/maintenance/status` (version, leader, db size)."""
        reply, _ = await self._call("/v3/maintenance/status", {}, "status", "(cluster status)", "read")
        return reply
