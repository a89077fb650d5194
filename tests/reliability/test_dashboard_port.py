"""Issue 41, findings 1 and 4: the loopback dashboard/metrics port admits only the
daemon's own user, and its connection slots cannot be exhausted.

A real daemon; the other user is `agentcoord-other` (setpriv), holding the
token and the page's CSRF token as if they had leaked; the flood comes from the
daemon's own user, which the token does not stop."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

import httpx

from integration.helpers import Daemon

from .loopback_attack import ROUTES, _Stream, dashboard, get, routes_as, slots_attack


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _csrf(d: Daemon, url: str) -> str:
    page = httpx.get(url, headers=d.dashboard_headers(), timeout=10)
    found = re.search(r'name="agentcoord-csrf" content="([^"]+)"', page.text)
    assert found, page.text[:300]
    return found.group(1)


def test_another_user_is_refused_on_every_route_and_writes_nothing(
        daemon: Daemon, other_user: list[str]) -> None:
    assert daemon.ctl("claim", "--agent-id", "a1", "--repo", "acme/widgets", "--target", "1",
                      "--batch-id", "b1").returncode == 0
    shown = dashboard(daemon)
    token = daemon.dashboard_token()
    csrf = _csrf(daemon, shown["url"])
    before = _files(daemon.root)

    answers = routes_as(other_user, shown["port"], token, csrf)

    assert len(answers) == len(ROUTES)
    for answer in answers:
        assert answer["status"] == 403, answer
        assert "acme/widgets" not in answer["body"] and "agentcoord_" not in answer["body"], answer
    assert _files(daemon.root) == before  # no stop request, no manifest, nothing
    [server] = json.loads(daemon.ctl("daemon", "status", "--json").stdout)["dashboard"]["servers"]
    assert server["refused_other_users"] == len(ROUTES) and server["open"] == 0
    # …while the daemon's user, with the token, is served
    assert httpx.get(shown["url"] + "api/overview", headers=daemon.dashboard_headers(),
                     timeout=10).status_code == 200


def test_the_token_file_is_private_beside_the_socket_and_kept_across_restarts(daemon: Daemon) -> None:
    shown = dashboard(daemon)
    path = Path(f"{daemon.socket}.dashboard-token")
    assert shown["token_file"] == str(path)
    assert path.stat().st_mode & 0o777 == 0o600 and path.stat().st_uid == os.getuid()
    token = daemon.dashboard_token()
    assert shown["login_url"] == f"{shown['url']}login?token={token}"
    daemon.stop()
    daemon.start()
    assert dashboard(daemon)["login_url"].endswith(f"token={token}")  # a browser's cookie still works


def test_the_daemons_own_user_needs_the_token_on_every_route(daemon: Daemon) -> None:
    port = dashboard(daemon)["port"]
    for method, path in ROUTES:
        path = path.replace("{token}", "not-the-token")
        response = httpx.request(method, f"http://127.0.0.1:{port}{path}", json={"batch_id": "b1"},
                                 timeout=10)
        assert response.status_code == 401, (method, path, response.status_code)
        assert "agentcoordctl dashboard" in response.json()["error"]


def test_the_open_metrics_listener_serves_only_metrics_to_other_users(
        daemon_factory: Any, other_user: list[str]) -> None:
    d: Daemon = daemon_factory()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    d.start("--metrics-port", str(port), "--metrics-open")
    answers = {a["route"]: a for a in routes_as(other_user, port, "no-token", "no-csrf")}
    assert answers["GET /metrics"]["status"] == 200
    assert "agentcoord_daemon_info" in answers["GET /metrics"]["body"]
    assert {a["status"] for route, a in answers.items() if route != "GET /metrics"} == {404}
    status = json.loads(d.ctl("daemon", "status", "--json").stdout)
    assert status["metrics_url"] == f"http://127.0.0.1:{port}/metrics"
    assert status["metrics_token_file"] is None
    assert dashboard(d)["port"] != port  # the dashboard gets a port of its own


def test_metrics_are_served_under_200_streams_and_300_slowloris(daemon: Daemon) -> None:
    figures = slots_attack(daemon, streams=200, slowloris=300, scrapes=60)
    # Exhausted slots showed as scrapes that never got an answer (the 10 s timeout); every
    # scrape answered, typically within a second. The p99 itself (under 1 s quiet, 1.8 s
    # seen at load 16 on 2 cores) is bench/reliability.py's figure, not a bound here.
    assert figures["metrics_statuses"] == {"200": 60}, figures
    assert figures["metrics_p50_ms"] < 1000 and figures["metrics_max_ms"] < 5000, figures
    assert figures["page_status"] == 200, figures
    assert figures["streams_refused_503"] > 0 and figures["retry_after"], figures
    assert figures["stream_after_close"] == 200, figures
    assert figures["daemon_alive"], figures


def test_an_idle_keep_alive_connection_is_dropped_promptly(daemon: Daemon) -> None:
    port = dashboard(daemon)["port"]
    token = daemon.dashboard_token()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     f"Authorization: Bearer {token}\r\n\r\n".encode())
        started = time.monotonic()
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        closed_after = time.monotonic() - started
    assert data.startswith(b"HTTP/1.1 200")
    assert closed_after < 8.0  # the server's 5 s, not the client's 30 s


def test_a_request_head_sent_a_byte_at_a_time_is_dropped_promptly(daemon: Daemon) -> None:
    port = dashboard(daemon)["port"]
    head = f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode() + b"a" * 100
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        started = time.monotonic()
        closed_after = None
        for byte in head:
            try:
                sock.sendall(bytes([byte]))
                sock.settimeout(0.2)
                if sock.recv(65536) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                continue
            except OSError:
                closed_after = time.monotonic() - started
                break
    assert closed_after is not None and closed_after < 8.0  # the server's 5 s for a whole request


def test_a_closed_event_stream_frees_its_slot_at_once(daemon: Daemon) -> None:
    port = dashboard(daemon)["port"]
    token = daemon.dashboard_token()
    streams = [_Stream(port, token) for _ in range(40)]
    accepted = [s for s in streams if s.status == 200]
    refused = [s for s in streams if s.status == 503]
    assert len(accepted) == 32 and len(refused) == 8
    assert all(b"retry-after: 1" in s.head.lower() for s in refused)
    assert get(port, "/metrics", token)[0] == 200  # the page and /metrics keep their share
    accepted[0].sock.close()
    time.sleep(0.2)
    replacement = _Stream(port, token)
    assert replacement.status == 200
    for s in [*streams, replacement]:
        s.sock.close()
