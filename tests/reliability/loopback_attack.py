"""Attacks on the daemon's loopback HTTP port (issue 41), shared by
tests/reliability (CI sizes) and bench/reliability.py (full sizes): every route
tried as another user, and a same-user flood of event streams and slowloris
connections while `/metrics` is scraped. Each returns figures.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import threading
import time
from typing import Any

from integration.helpers import PYTHON, Daemon

from .hardening import raise_fd_limit

# Every route of the server, as (method, path); the writes carry a JSON body.
ROUTES = [
    ("GET", "/"), ("GET", "/index.html"), ("GET", "/static/app.js"), ("GET", "/static/app.css"),
    ("GET", "/favicon.ico"), ("GET", "/metrics"), ("GET", "/api/overview"),
    ("GET", "/api/batch?batch_id=b1"), ("GET", "/api/health"), ("GET", "/api/history"),
    ("GET", "/api/search?q=1"), ("GET", "/api/feed?batch_id=b1"), ("GET", "/login?token={token}"),
    ("POST", "/api/stop"), ("POST", "/api/import"), ("POST", "/api/answer"),
]

# Run as the other user: try every route with everything a thief could have (the
# token and the CSRF token, as if leaked); print one JSON line per route.
PROBE = r"""
import http.client, json, sys
port, token, csrf = int(sys.argv[1]), sys.argv[2], sys.argv[3]
for method, path in json.loads(sys.argv[4]):
    path = path.replace("{token}", token)
    body = json.dumps({"batch_id": "b1", "launch_prompt": "Batch id: stolen\nRepository: o/r\n"})
    headers = {"Host": f"127.0.0.1:{port}", "Authorization": f"Bearer {token}",
               "Cookie": f"agentcoord_{port}={token}", "Origin": f"http://127.0.0.1:{port}",
               "X-Agentcoord-CSRF": csrf, "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body if method == "POST" else None, headers=headers)
        resp = conn.getresponse()
        data = resp.read(4096)
        print(json.dumps({"route": f"{method} {path}", "status": resp.status, "body": data.decode("latin-1")}))
    except OSError as exc:
        print(json.dumps({"route": f"{method} {path}", "status": None, "body": repr(exc)}))
    finally:
        conn.close()
"""


def dashboard(d: Daemon) -> dict[str, Any]:
    shown = d.ctl("dashboard", "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def routes_as(prefix: list[str], port: int, token: str, csrf: str) -> list[dict[str, Any]]:
    """Every route, tried by a process started with `prefix` (another user)."""
    probe = subprocess.run([*prefix, PYTHON, "-c", PROBE, str(port), token, csrf, json.dumps(ROUTES)],
                           capture_output=True, timeout=120)
    assert probe.returncode == 0, probe.stderr.decode()
    return [json.loads(line) for line in probe.stdout.decode().splitlines()]


def get(port: int, path: str, token: str | None, timeout: float = 10.0) -> tuple[int, bytes, float]:
    """(status, body, seconds) of one request on a fresh connection."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read(), time.monotonic() - started
    finally:
        conn.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


class _Stream:
    """One event-stream client: its request sent, its response head read."""

    def __init__(self, port: int, token: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall((f"GET /api/feed?batch_id=b1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                           f"Authorization: Bearer {token}\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                break
            head += chunk
        self.head = head
        self.status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else None


class _Slowloris(threading.Thread):
    """`count` connections that send a request head one byte at a time, each
    reconnecting as soon as the server lets it go (the attack never lets up)."""

    HEAD = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 4000

    def __init__(self, port: int, count: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.port, self.count, self.interval = port, count, interval
        self.socks: list[tuple[socket.socket | None, int]] = []
        self.stop = threading.Event()
        self.reconnects = 0

    def _open(self) -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            sock.setblocking(False)
            return sock
        except OSError:
            return None

    def run(self) -> None:
        while not self.stop.is_set():
            for i, (sock, sent) in enumerate(self.socks):
                try:
                    if sock is None:
                        raise OSError("not connected")
                    sock.send(self.HEAD[sent % len(self.HEAD):][:1])
                    self.socks[i] = (sock, sent + 1)
                except OSError:  # dropped by the server: come back at once
                    if sock is not None:
                        sock.close()
                    self.reconnects += 1
                    self.socks[i] = (self._open(), 0)
            self.stop.wait(self.interval)
        for sock, _ in self.socks:
            if sock is not None:
                sock.close()

    def start_all(self) -> None:
        self.socks = [(self._open(), 0) for _ in range(self.count)]
        self.start()


def slots_attack(d: Daemon, *, streams: int = 200, slowloris: int = 300, scrapes: int = 100,
                 interval: float = 0.2) -> dict[str, Any]:
    """`streams` event streams and `slowloris` slow-header connections of the daemon's
    own user (the token does not help against them) while `/metrics` is scraped."""
    raise_fd_limit(streams + slowloris + 256)
    shown = dashboard(d)
    port, token = shown["port"], d.dashboard_token()
    opened = [_Stream(port, token) for _ in range(streams)]
    accepted = [s for s in opened if s.status == 200]
    refused = [s for s in opened if s.status == 503]
    loris = _Slowloris(port, slowloris, interval)
    loris.start_all()
    try:
        time.sleep(1.0)  # the slow connections are in place
        timings: list[float] = []
        statuses: dict[str, int] = {}
        for _ in range(scrapes):
            try:
                status, _body, seconds = get(port, "/metrics", token, timeout=10)
            except OSError as exc:
                status, seconds = type(exc).__name__, 10.0  # type: ignore[assignment]
            statuses[str(status)] = statuses.get(str(status), 0) + 1
            timings.append(seconds)
            time.sleep(0.02)
        page_status, _body, page_seconds = get(port, "/", token)
        # A stream that ends frees its slot at once: the next stream gets in.
        freed = accepted[0] if accepted else None
        if freed is not None:
            freed.sock.close()
            accepted = accepted[1:]
        deadline = time.monotonic() + 2.0
        again = None
        while time.monotonic() < deadline:
            again = _Stream(port, token)
            if again.status == 200:
                break
            again.sock.close()
            time.sleep(0.05)
        stream_after_close = again.status if again is not None else None
        if again is not None:
            again.sock.close()
    finally:
        loris.stop.set()
        loris.join(10)
        for s in opened:
            s.sock.close()
    return {
        "streams": streams, "slowloris": slowloris, "scrapes": scrapes,
        "streams_accepted": len(accepted) + (1 if freed is not None else 0),
        "streams_refused_503": len(refused),
        "retry_after": all(b"retry-after: " in s.head.lower() for s in refused),
        "slowloris_reconnects": loris.reconnects,
        "metrics_statuses": statuses,
        "metrics_p50_ms": round(_percentile(timings, 0.5) * 1000, 1),
        "metrics_p99_ms": round(_percentile(timings, 0.99) * 1000, 1),
        "metrics_max_ms": round(max(timings) * 1000, 1),
        "page_status": page_status, "page_ms": round(page_seconds * 1000, 1),
        "stream_after_close": stream_after_close,
        "daemon_alive": d.proc is not None and d.proc.poll() is None,
    }
