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

import json
import re
from collections.abc import AsyncIterator
from typing import Any, NoReturn
from urllib.parse import quote

import anyio
import httpx
import msgspec

from agentcoordd.model import ids
from agentcoordd.model.backoff import HTTP_RETRY
from agentcoordd.model.errors import UsageError
from agentcoordd.store.base import (
    Capabilities,
    Conflict,
    Entry,
    Forbidden,
    InvalidPath,
    InvalidRecord,
    NotFound,
    Page,
    StoreError,
    Unavailable,
    UnreadableEntries,
    Versioned,
)

MAX_PAGE = 1000  # the Worker's largest `limit`
# The event feed re-lists a followed batch this often (one listing shared by all followers).
CHANGE_POLL = 0.5
ACTIVE_DATA_CAP = 256 * 1024
ARCHIVE_DATA_CAP = 1024 * 1024

ROTATION_HINT = (
    "the machine token is unknown or revoked: provision a new one with "
    "`agentcoordctl token provision MACHINE --rotate ...` (or the Worker's "
    "provision-token --rotate) and set AGENT_COORD_API_TOKEN in this machine's env file"
)

# The Worker's record grammar, stricter than ids.state_path: exact depths and
# segments of [A-Za-z0-9_.:-]; `..` is refused anywhere, even inside a name.
_SEG = r"[A-Za-z0-9_.:-]+"
_WIRE_RECORD = re.compile(
    rf"(?:archive/)?(?:claims/{_SEG}/{_SEG}/{_SEG}|heartbeats/{_SEG}|batches/{_SEG}|events/{_SEG}/{_SEG})\.json"
)
_WIRE_PREFIX = re.compile(
    rf"archive|(?:archive/)?(?:claims(?:/{_SEG}){{0,2}}|heartbeats|batches|events(?:/{_SEG})?)"
)


class TokenRejected(Forbidden):
    """401: the token is missing, unknown or revoked (exit 2, rotation hint)."""


class Whoami(msgspec.Struct, frozen=True):
    machine: str
    read_prefixes: list[str]
    write_prefixes: list[str]


class _WireEntry(msgspec.Struct):
    path: str
    data: Any
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


def _strict_entry(item: Any) -> tuple[_WireEntry | None, str | None]:
    """(the entry, None) when `item` is strict JSON of an entry; else (None,
    why its data is unreadable), or (None, None) when it is not an entry at all."""
    if not isinstance(item, dict) or not isinstance(item.get("path"), str):
        return None, None
    try:
        return msgspec.json.decode(json.dumps(item).encode(), type=_WireEntry), None
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        pass
    if _lone_surrogate(item.get("data")):
        return None, "invalid JSON (a string holding a lone UTF-16 surrogate)"
    if isinstance(item.get("version"), int) and "data" in item:
        return None, "invalid JSON (not strict JSON, e.g. NaN)"
    return None, None


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
    ) -> None:
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise UsageError(f"invalid API URL: {base_url!r} (expected http(s)://HOST[:PORT])")
        self.base_url = str(base_url).rstrip("/")
        self.name = f"http:{self.base_url}"
        self.capabilities = Capabilities(introspection=self, changes=self)
        self.timeout = float(timeout)
        self.connect_timeout = min(float(connect_timeout or timeout), self.timeout)
        self.read_attempts = max(1, read_attempts)
        self._has_token = bool(token)
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
        try:
            entry = msgspec.json.decode(resp.content, type=_WireEntry)
        except (msgspec.DecodeError, msgspec.ValidationError):
            entry = self._lenient_entry(resp, path)
        return Versioned(entry.data, str(entry.version))

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
        """One page below `prefix`. `limit=None` asks for the largest page (1000);
        callers follow `next_cursor` (see base.list_all)."""
        prefix = _checked_prefix(prefix)
        if limit is not None and limit < 1:
            raise InvalidPath(f"invalid listing limit: {limit}")
        params = {"prefix": prefix, "limit": str(min(limit or MAX_PAGE, MAX_PAGE))}
        if cursor is not None:
            if not cursor.startswith(prefix + "/"):
                raise InvalidPath(f"listing cursor {cursor} is not below {prefix}")
            params["cursor"] = _checked_path(cursor)
        resp = await self._send("GET", "/v1/state", path=prefix, params=params)
        if resp.status_code != 200:
            self._raise(resp, prefix)
        unreadable: list[tuple[str, str]] = []
        try:
            page = msgspec.json.decode(resp.content, type=_WirePage)
        except (msgspec.DecodeError, msgspec.ValidationError):
            page, unreadable = self._lenient_page(resp, prefix)
        entries = [Entry(e.path, e.data, str(e.version)) for e in page.entries]
        result = Page(entries, page.next_cursor or None, bool(page.filtered))
        if unreadable:
            path, reason = unreadable[0]
            more = f"{len(unreadable)} unreadable records below {prefix}; " if len(unreadable) > 1 else ""
            raise UnreadableEntries(f"{more}{reason} in record {path}", result, unreadable)
        return result

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

    # ---- transport -------------------------------------------------------

    @staticmethod
    def _record_url(path: str) -> str:
        # quote with safe="" turns every "/" into %2F: one opaque URL segment.
        return "/v1/state/" + quote(path, safe="")

    def _where(self, path: str | None) -> str:
        return f"{path} at {self.base_url}" if path else self.base_url

    def _body(self, path: str, data: Any) -> bytes:
        try:
            encoded = _encoder.encode(data)
        except (TypeError, ValueError) as exc:
            raise InvalidRecord(f"record for {path} is not JSON-serializable: {exc}") from None
        cap = ARCHIVE_DATA_CAP if path.startswith("archive/") else ACTIVE_DATA_CAP
        if len(encoded) > cap:
            raise InvalidRecord(
                f"record too large for {path}: {len(encoded)} bytes of JSON (limit {cap} bytes)"
            )
        return b'{"data":' + encoded + b"}"

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
    ) -> httpx.Response:
        deadline = anyio.current_time() + self.timeout
        safe = method == "GET"
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
                # httpx bounds each phase; this bounds the whole exchange.
                with anyio.fail_after(remaining + 0.1):
                    resp = await self._client.send(request)
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

    # A body strict JSON cannot decode may still be JSON with a bad record in
    # it: Python's json reads lone surrogates (and NaN), so it finds the
    # envelope; each entry is then checked strictly on its own.

    def _loose_json(self, resp: httpx.Response, path: str | None) -> Any:
        try:
            return json.loads(resp.content)
        except (ValueError, RecursionError) as exc:
            raise Unavailable(
                f"unexpected response from {self._where(path)} (HTTP {resp.status_code}): {exc}"
            ) from None

    def _lenient_entry(self, resp: httpx.Response, path: str) -> _WireEntry:
        item = self._loose_json(resp, path)
        entry, why = _strict_entry(item)
        if entry is not None:
            return entry
        if isinstance(item, dict) and item.get("path") == path and why is not None:
            raise InvalidRecord(f"{why} in record {path}")
        self._decode(resp, _WireEntry, path)  # raises Unavailable with msgspec's reason
        raise AssertionError("unreachable")  # pragma: no cover

    def _lenient_page(self, resp: httpx.Response, prefix: str) -> tuple[_WirePage, list[tuple[str, str]]]:
        doc = self._loose_json(resp, prefix)
        items = doc.get("entries") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            self._decode(resp, _WirePage, prefix)  # raises Unavailable
        entries: list[_WireEntry] = []
        unreadable: list[tuple[str, str]] = []
        for item in items:  # type: ignore[union-attr]
            entry, why = _strict_entry(item)
            if entry is not None:
                entries.append(entry)
                continue
            path = item.get("path") if isinstance(item, dict) else None
            if why is None or not isinstance(path, str) or not _WIRE_RECORD.fullmatch(path) \
                    or not path.startswith(prefix + "/"):
                self._decode(resp, _WirePage, prefix)  # not one bad record: raises Unavailable
            unreadable.append((path, why))
        try:
            rest = msgspec.convert({**doc, "entries": []}, _WirePage)
        except msgspec.ValidationError as exc:
            raise Unavailable(
                f"unexpected response from {self._where(prefix)} (HTTP {resp.status_code}): {exc}"
            ) from None
        return _WirePage(entries, rest.next_cursor, rest.filtered), unreadable

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
        code = self._error_code(resp)
        status = resp.status_code
        where = self._where(path)
        if status == 401 and not self._has_token:
            raise TokenRejected(
                f"no machine token configured for {where}: set AGENT_COORD_API_TOKEN "
                "(provision one with `agentcoordctl token provision MACHINE ...`)"
            )
        if status == 401:
            raise TokenRejected(f"token rejected ({code}) by {where}: {ROTATION_HINT}")
        if status == 403:
            raise Forbidden(f"forbidden: this machine's token has no scope for {where}")
        if status == 404:
            if code == "not_found":
                raise NotFound(f"record not found: {where}")
            raise Unavailable(f"{self.base_url} does not serve the state API ({code}) for {path or 'this request'}")
        if status == 409:
            kind = "already_exists" if code == "already_exists" else "version_conflict"
            if kind == "already_exists":
                raise Conflict(f"record already exists: {where}", kind)
            raise Conflict(f"record changed underneath us: {where}", kind)
        if status == 413:
            raise InvalidRecord(f"record too large for {where} ({code})")
        if status == 400 and code in ("invalid_path", "invalid_prefix", "invalid_cursor", "invalid_limit"):
            raise InvalidPath(f"backend refused {code.removeprefix('invalid_')}: {where}")
        if status >= 500 and code == "schema_not_migrated":
            raise Unavailable(
                f"backend failed: HTTP {status} (schema_not_migrated) from {where}: the Worker's "
                "D1 database is not in its schema; run worker/bin/upgrade-from-agent-coord "
                "(docs/worker-upgrade.md)"
            )
        if status >= 500:
            shown = f" ({code})" if code != "unknown" else ""
            raise Unavailable(f"backend failed: HTTP {status}{shown} from {where}")
        raise StoreError(f"backend rejected the request: HTTP {status} ({code}) from {where}")
