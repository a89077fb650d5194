"""The read-only web dashboard the daemon serves on loopback (HTTP/1.1 via h11).

One page (`dashboard_static/`: vanilla JS and CSS, nothing fetched from
elsewhere) over a small JSON API:

    GET  /                       the page (carries this process's CSRF token)
    GET  /static/app.js|app.css  its assets
    GET  /api/overview           batches and lanes (coord.overview), claims, heartbeats
    GET  /api/batch?batch_id=B   batch status, merged event history, stop state
    GET  /api/health[?batch_id=B]  coord.health payload
    GET  /api/history[?batch_id=B&limit=N]  merged Store + local JSONL history
    GET  /api/search?q=Q         lanes by PR/issue number, branch, thread handle
    GET  /api/feed?batch_id=B[&from=end]  server-sent events: the batch's live event feed
                                 (the daemon's shared source, daemon/feed.py); each
                                 event's SSE id is its cursor, so a reconnecting
                                 EventSource resumes after Last-Event-ID
    POST /api/import             {launch_prompt, dry_run?, replace?} -> batches/<id>.json
    POST /api/stop               {batch_id, message?} -> one batch.stop_requested event
    GET  /metrics                the daemon's Prometheus metrics (docs/metrics.md)

Protections:

* it binds loopback addresses only, and every request must come from an
  allowed peer (default: 127.0.0.0/8 and ::1; `allowed_peers` narrows it)
  and name this server in `Host` (127.0.0.1 / localhost / [::1] with its
  port — a DNS-rebinding page cannot read the API); otherwise 403;
* the two writes additionally need `Origin` equal to this server's own
  origin, `Sec-Fetch-Site` (when sent) `same-origin`, a JSON body, and the
  per-process CSRF token (embedded in the page, sent back in the
  `X-Agentcoord-CSRF` header; compared in constant time); otherwise 403/415;
* the import writes `batches/<id>.json` only (through `register_batch`, which
  validates it; an existing manifest is replaced only with `replace: true`),
  the stop request appends one ordinary event only (`telemetry.request_stop`):
  neither kills, releases, or edits anything else.

Responses are `no-store` with a strict Content-Security-Policy.
"""

from __future__ import annotations

import hmac
import http
import importlib.resources
import inspect
import ipaddress
import json
import secrets
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.abc
import h11
import msgspec
from anyio.abc import SocketAttribute

from agentcoordd.coord import batches as batches_mod
from agentcoordd.coord import health as health_mod
from agentcoordd.coord import overview as overview_mod
from agentcoordd.coord import prompt as prompt_mod
from agentcoordd.coord import status as status_mod
from agentcoordd.coord import telemetry
from agentcoordd.coord.context import Clock, Ctx
from agentcoordd.model import ids
from agentcoordd.model.errors import CoordError, UsageError
from agentcoordd.model.identity import Identity
from agentcoordd.model.timefmt import format_ts

CSRF_HEADER = "x-agentcoord-csrf"
MAX_BODY_BYTES = 512 * 1024
MAX_PROMPT_BYTES = 192 * 1024
READ_TIMEOUT = 30.0
MAX_CONNECTIONS = 64
DEFAULT_REFRESH_SECONDS = 5
FEED_KEEPALIVE = 15.0  # an idle event stream sends a comment this often (and notices a gone client)
STATIC_FILES = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
LOOPBACK_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def peer_allowed(peer: str, networks: Iterable[Any] = LOOPBACK_NETWORKS) -> bool:
    """True when the peer address lies in one of `networks` (default: loopback)."""
    address = _address(peer)
    if address is None:
        return False
    nets = [ipaddress.ip_network(n, strict=False) if isinstance(n, str) else n for n in networks]
    return any(address.version == net.version and address in net for net in nets)


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    address = _address(host)
    return address is not None and address.is_loopback


def _json(data: Any) -> bytes:
    return msgspec.json.encode(data)


class Dashboard:
    """The dashboard server. `store_factory()` returns the Store to read (may be awaitable)."""

    def __init__(
        self,
        store_factory: Callable[[], Any],
        clock: Clock,
        identity: Identity | None = None,
        *,
        allowed_peers: Iterable[str] | None = None,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        on_stop_requested: Callable[[str], None] | None = None,
        metrics: Callable[[], tuple[str, bytes]] | None = None,
        on_events: Callable[[list[tuple[str, dict[str, Any]]]], Awaitable[None]] | None = None,
        feed: Callable[[str, Any, bool], Any] | None = None,
    ) -> None:
        self.store_factory = store_factory
        self.metrics = metrics  # (content type, exposition) for GET /metrics
        # feed(batch_id, after, from_end): `async with` a daemon.feed.Follower (None: no /api/feed).
        self.feed = feed
        # Told the batch id after a stop request was written (the daemon's stop-notice cache).
        self.on_stop_requested = on_stop_requested
        # Given the events a write of the page made (the daemon's notifications).
        self.on_events = on_events
        self.clock = clock
        self.identity = identity or Identity()
        self.allowed_networks = (
            tuple(ipaddress.ip_network(n, strict=False) for n in allowed_peers)
            if allowed_peers is not None
            else LOOPBACK_NETWORKS
        )
        for net in self.allowed_networks:
            if not net.is_loopback:  # allowed_peers can only narrow loopback
                raise UsageError(f"dashboard peers must be loopback addresses, not {net}")
        self.refresh_seconds = refresh_seconds
        self.csrf_token = secrets.token_urlsafe(32)
        self.host: str | None = None
        self.port: int | None = None
        self._limiter = anyio.CapacityLimiter(MAX_CONNECTIONS)

    # ---- serving ---------------------------------------------------------------

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on a loopback `host`:`port` (0 = any free port) until cancelled;
        `task_status.started(port)` reports the bound port."""
        if not is_loopback_host(host):
            raise UsageError(f"the dashboard serves loopback addresses only, not {host}")
        bind = "127.0.0.1" if host == "localhost" else host
        listener = await anyio.create_tcp_listener(local_host=bind, local_port=port)
        async with listener:
            self.host = bind
            self.port = listener.extra(SocketAttribute.local_port)
            task_status.started(self.port)
            await listener.serve(self._connection)

    def _origins(self) -> set[str]:
        """This server's own origins: the loopback names with the bound port."""
        port = self.port
        names = {"127.0.0.1", "localhost", "[::1]"}
        if self.host:
            names.add(f"[{self.host}]" if ":" in self.host else self.host)
        return {f"http://{name}:{port}" for name in names}

    def _hosts(self) -> set[str]:
        return {o.removeprefix("http://") for o in self._origins()}

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        async with self._limiter:
            try:
                peer = str(stream.extra(SocketAttribute.remote_address)[0])
            except Exception:
                peer = ""
            conn = h11.Connection(h11.SERVER, max_incomplete_event_size=32 * 1024)
            try:
                while True:
                    try:
                        request, body = await self._read(stream, conn)
                    except HttpError as exc:
                        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                            await self._send(stream, conn, exc.status, *self._error(exc.message), close=True)
                        return
                    if request is None:
                        return
                    if request.method == b"GET" and urlsplit(
                            request.target.decode("latin-1")).path == "/api/feed":
                        await self._feed_stream(stream, conn, request, peer)
                        return  # a stream ends its connection
                    status, ctype, payload = await self._respond(request, body, peer)
                    await self._send(stream, conn, status, ctype, payload)
                    if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                        return
                    try:
                        conn.start_next_cycle()
                    except h11.LocalProtocolError:
                        return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream,
                    h11.LocalProtocolError, TimeoutError, OSError):
                return
            finally:
                await stream.aclose()

    async def _read(self, stream: Any, conn: h11.Connection) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        body = bytearray()
        with anyio.fail_after(READ_TIMEOUT):
            while True:
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as exc:
                    raise HttpError(400, f"bad request: {exc}") from None
                if event is h11.NEED_DATA:
                    try:
                        data = await stream.receive(65536)
                    except anyio.EndOfStream:
                        data = b""
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    request = event
                    length = dict(event.headers).get(b"content-length")
                    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
                        raise HttpError(413, "request body too large")
                elif isinstance(event, h11.Data):
                    body.extend(event.data)
                    if len(body) > MAX_BODY_BYTES:
                        raise HttpError(413, "request body too large")
                elif isinstance(event, h11.EndOfMessage):
                    return request, bytes(body)
                elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    return None, b""

    async def _send(self, stream: Any, conn: h11.Connection, status: int, ctype: str,
                    payload: bytes, *, close: bool = False) -> None:
        headers = [
            ("content-type", ctype),
            ("content-length", str(len(payload))),
            ("cache-control", "no-store"),
            ("x-content-type-options", "nosniff"),
            ("x-frame-options", "DENY"),
            ("referrer-policy", "no-referrer"),
            ("content-security-policy", CSP),
        ]
        if close:
            headers.append(("connection", "close"))
        try:
            reason = http.HTTPStatus(status).phrase.encode("ascii")
        except ValueError:
            reason = b""
        data = conn.send(h11.Response(status_code=status, headers=headers, reason=reason))
        data += conn.send(h11.Data(data=payload))
        data += conn.send(h11.EndOfMessage())
        await stream.send(data)

    # ---- routing ------------------------------------------------------------------

    @staticmethod
    def _error(message: str) -> tuple[str, bytes]:
        return "application/json", _json({"error": message})

    async def _respond(self, request: h11.Request, body: bytes, peer: str) -> tuple[int, str, bytes]:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
        method = request.method.decode("ascii", "replace")
        target = urlsplit(request.target.decode("latin-1"))
        query = {k: v[-1] for k, v in parse_qs(target.query).items()}
        try:
            self._guard(headers, peer)
            if method == "POST":
                self.check_write(headers)
                data = self._body(body)
                if target.path == "/api/import":
                    result = await self.import_prompt(data)
                    return 201 if result["written"] else 200, *self._ok(result)
                if target.path == "/api/stop":
                    return 201, *self._ok(await self.request_stop(data))
                raise HttpError(404, "not found")
            if method != "GET":
                raise HttpError(405, "method not allowed")
            return await self._get(target.path, query)
        except HttpError as exc:
            return exc.status, *self._error(exc.message)
        except UsageError as exc:
            return 400, *self._error(exc.message)
        except CoordError as exc:
            return 503, *self._error(exc.message)
        except Exception as exc:  # never take the server down with one request
            return 500, *self._error(f"internal error: {type(exc).__name__}")

    def _guard(self, headers: dict[str, str], peer: str) -> None:
        """Every request: an allowed loopback peer naming this server in Host."""
        if not peer_allowed(peer, self.allowed_networks):
            raise HttpError(403, f"dashboard: peer {peer or '?'} is not an allowed loopback client")
        if headers.get("host") not in self._hosts():
            raise HttpError(403, "dashboard: unexpected Host header")

    async def _feed_stream(self, stream: Any, conn: h11.Connection, request: h11.Request,
                           peer: str) -> None:
        """GET /api/feed: server-sent events until the client goes away."""
        from agentcoordd.model import cursor as cur

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
        query = {k: v[-1] for k, v in parse_qs(urlsplit(request.target.decode("latin-1")).query).items()}
        try:
            self._guard(headers, peer)
            if self.feed is None:
                raise HttpError(404, "the live feed is served by agentcoordd's dashboard only")
            batch = query.get("batch_id") or ""
            after = headers.get("last-event-id") or query.get("after")
            try:
                ids.batch_id(batch)
                position = cur.decode(after) if after else cur.START
            except UsageError as exc:
                raise HttpError(400, exc.message) from None
        except HttpError as exc:
            await self._send(stream, conn, exc.status, *self._error(exc.message), close=True)
            return
        from_end = not after and query.get("from") == "end"
        async with self.feed(batch, position, from_end) as follower:
            await stream.send(conn.send(h11.Response(status_code=200, reason=b"OK", headers=[
                ("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-store"),
                ("x-content-type-options", "nosniff"), ("content-security-policy", CSP)])))
            rows = await follower.backlog()
            while True:
                chunk = b"".join(b"id: " + row["cursor"].encode("ascii") + b"\nevent: feed\ndata: "
                                 + _json(row) + b"\n\n" for row in rows)
                await stream.send(conn.send(h11.Data(data=chunk or b": keepalive\n\n")))
                rows = await follower.next(FEED_KEEPALIVE)

    @staticmethod
    def _ok(payload: Any) -> tuple[str, bytes]:
        return "application/json", _json(payload)

    def check_write(self, headers: dict[str, str]) -> None:
        """The write protections: same Origin, same-site fetch, CSRF token, JSON."""
        origin = headers.get("origin")
        if origin is None or origin not in self._origins():
            raise HttpError(403, "dashboard: write refused: foreign or missing Origin")
        site = headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            raise HttpError(403, "dashboard: write refused: cross-site request")
        token = headers.get(CSRF_HEADER, "")
        if not token or not hmac.compare_digest(token.encode(), self.csrf_token.encode()):
            raise HttpError(403, "dashboard: write refused: missing or wrong CSRF token")
        if not headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
            raise HttpError(415, "dashboard: writes take application/json")

    @staticmethod
    def _body(body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise HttpError(400, "body is not valid JSON") from None
        if not isinstance(data, dict):
            raise HttpError(400, "body must be a JSON object")
        return data

    async def _ctx(self) -> Ctx:
        store = self.store_factory()
        if inspect.isawaitable(store):
            store = await store
        return Ctx(store=store, clock=self.clock, identity=self.identity)

    async def _get(self, path: str, query: dict[str, str]) -> tuple[int, str, bytes]:
        if path in ("/", "/index.html"):
            return 200, "text/html; charset=utf-8", self.page()
        if path.startswith("/static/"):
            name = path.removeprefix("/static/")
            if name not in STATIC_FILES:
                raise HttpError(404, "not found")
            return 200, STATIC_FILES[name], _static(name)
        if path == "/favicon.ico":
            return 204, "text/plain", b""
        if path == "/metrics":
            if self.metrics is None:
                raise HttpError(404, "metrics are off (agentcoordd --no-metrics)")
            return 200, *self.metrics()
        ctx = await self._ctx()
        batch = query.get("batch_id") or None
        if path == "/api/overview":
            return 200, *self._ok(await overview_mod.overview(ctx))
        if path == "/api/health":
            return 200, *self._ok(await health_mod.health(ctx, batch_id=batch))
        if path == "/api/history":
            limit = query.get("limit")
            if limit is not None and not limit.isdigit():
                raise HttpError(400, "limit must be a number")
            return 200, *self._ok(await telemetry.history(ctx, batch_id=batch, limit=int(limit) if limit else None))
        if path == "/api/batch":
            if batch is None:
                raise HttpError(400, "batch_id is required")
            ids.batch_id(batch)
            state = await status_mod.status(ctx, batch_id=batch, events=0)
            found = await telemetry.history(ctx, batch_id=batch, limit=2000)
            stop = await telemetry.stop_state(ctx, batch)
            return 200, *self._ok({"batch_id": batch, "status": state, "history": found, "stop": stop,
                                   "warnings": ctx.warnings})
        if path == "/api/search":
            data = await overview_mod.overview(ctx)
            return 200, *self._ok({"query": query.get("q", ""),
                                   "lanes": overview_mod.search(data["batches"], query.get("q", ""))})
        raise HttpError(404, "not found")

    def page(self) -> bytes:
        html = _static("index.html").decode("utf-8")
        html = html.replace("{{CSRF_TOKEN}}", self.csrf_token)
        html = html.replace("{{REFRESH_MS}}", str(int(self.refresh_seconds * 1000)))
        return html.encode("utf-8")

    # ---- the two writes ---------------------------------------------------------------

    async def import_prompt(self, data: dict[str, Any]) -> dict[str, Any]:
        """Save a retained manifest read from a pasted launch prompt (batches/<id>.json only)."""
        text = data.get("launch_prompt")
        if not isinstance(text, str) or not text.strip():
            raise HttpError(400, "launch_prompt is required")
        if len(text.encode("utf-8")) > MAX_PROMPT_BYTES or "\x00" in text:
            raise HttpError(400, "launch_prompt is too large or contains NUL")
        ctx = await self._ctx()
        try:
            manifest, warnings = prompt_mod.manifest_from_prompt(
                text, created_at=format_ts(ctx.clock.now()), created_by_machine=self.identity.machine_id
            )
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        batches_mod.validate_manifest(manifest)
        if data.get("dry_run"):
            return {"written": False, "batch_id": manifest["batch_id"], "manifest": manifest, "warnings": warnings}
        path = ids.batch_path(manifest["batch_id"])
        if await ctx.store.get(path) is not None and data.get("replace") is not True:
            raise HttpError(409, f"batch {manifest['batch_id']} already has a retained manifest "
                                 "(import again with replace to overwrite it)")
        written = await batches_mod.register_batch(ctx, manifest=_json(manifest))
        return {"written": True, "batch_id": written["batch_id"], "path": written["path"],
                "manifest": written["batch"], "warnings": warnings + ctx.warnings}

    async def request_stop(self, data: dict[str, Any]) -> dict[str, Any]:
        """Append batch.stop_requested for a batch (nothing else)."""
        batch = data.get("batch_id")
        if not isinstance(batch, str) or not batch:
            raise HttpError(400, "batch_id is required")
        message = data.get("message")
        if message is not None and (not isinstance(message, str) or not message.strip()):
            message = None
        ctx = await self._ctx()
        written = await telemetry.request_stop(ctx, batch_id=batch, message=message)
        if self.on_stop_requested is not None:
            self.on_stop_requested(batch)
        if self.on_events is not None:
            await self.on_events(ctx.written)
        return {**written, "warnings": ctx.warnings}


def _static(name: str) -> bytes:
    return (importlib.resources.files("agentcoordd.daemon") / "dashboard_static" / name).read_bytes()
