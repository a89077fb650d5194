"""agentcoordctl dashboard: the daemon serves one loopback dashboard and prints the URL
that signs its user in."""

from __future__ import annotations

import json
import os
import re
import stat

import httpx

from integration.helpers import Daemon

NOTICE = "agentcoord: batch b1 has a stop request"


def start(daemon: Daemon, *args: str) -> dict:
    result = daemon.ctl("dashboard", "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_dashboard_prints_a_login_url_that_signs_the_browser_in_to_the_page_and_its_api(
        daemon: Daemon, batch: dict) -> None:
    text = daemon.ctl("dashboard")
    assert text.returncode == 0, text.stderr
    login = text.stdout.decode().strip()
    match = re.fullmatch(r"(http://127\.0\.0\.1:\d+/)login\?token=([A-Za-z0-9_-]{43})", login)
    assert match and match.group(2) == daemon.dashboard_token()
    url = match.group(1)
    with httpx.Client(timeout=10, follow_redirects=True) as browser:
        page = browser.get(login)  # a cookie, then the page
        assert page.status_code == 200 and "agentcoord-csrf" in page.text
        assert str(page.url) == url and page.history[0].status_code == 303
        overview = browser.get(url + "api/overview").json()
        [b1] = [b for b in overview["batches"] if b["batch_id"] == "b1"]
        assert {lane["name"] for lane in b1["lanes"]} == {"backend", "docs"}
        health = browser.get(url + "api/health").json()
        assert health["verdict"] == "warnings"
    assert httpx.get(url + "api/overview", timeout=10).status_code == 401  # no cookie, no token


def test_the_daemon_keeps_one_dashboard_and_returns_the_same_url(daemon: Daemon) -> None:
    first = start(daemon)
    again = start(daemon)
    assert first["started"] is True and again["started"] is False
    assert again["url"] == first["url"]


def test_a_chosen_port_is_used_when_the_dashboard_starts(daemon: Daemon) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert start(daemon, "--port", str(port))["url"] == f"http://127.0.0.1:{port}/"
    other = daemon.ctl("dashboard", "--port", str(port + 1))
    assert other.stdout.decode().startswith(f"http://127.0.0.1:{port}/login?token=")
    assert b"already serving on port" in other.stderr


def test_open_hands_the_url_to_the_browser(daemon: Daemon) -> None:
    seen = daemon.base / "opened"
    browser = daemon.base / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf %s "$1" > {seen}\n')
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    result = daemon.ctl("dashboard", "--open", env={"BROWSER": str(browser)})
    assert result.returncode == 0, result.stderr
    assert seen.read_text() == result.stdout.decode().strip()


def test_a_stop_requested_on_the_dashboard_reaches_the_next_heartbeat(daemon: Daemon, batch: dict) -> None:
    url = start(daemon)["url"]
    with httpx.Client(base_url=url, timeout=10, headers=daemon.dashboard_headers()) as web:
        token = re.search(r'name="agentcoord-csrf" content="([^"]+)"', web.get("/").text).group(1)
        stop = web.post("/api/stop", json={"batch_id": "b1", "message": "from the web"},
                        headers={"Origin": url.rstrip("/"), "X-Agentcoord-CSRF": token})
    assert stop.status_code == 201, stop.text
    result = daemon.ctl("heartbeat", "--agent-id", "agent-a", "--json")
    assert NOTICE in result.stderr.decode() and "(from the web)" in result.stderr.decode()
    assert json.loads(result.stdout)["stop_requested"] is True


def test_the_dashboard_refuses_a_foreign_origin_write(daemon: Daemon, batch: dict) -> None:
    url = start(daemon)["url"]
    refused = httpx.post(url + "api/stop", json={"batch_id": "b1"},
                         headers={"Origin": "http://evil.example", **daemon.dashboard_headers()},
                         timeout=10)
    assert refused.status_code == 403
    assert not (daemon.root / "events" / "b1").exists() or not any(
        "stop_requested" in p.read_text() for p in (daemon.root / "events" / "b1").iterdir())


def test_the_dashboard_stops_with_the_daemon(daemon: Daemon) -> None:
    url = start(daemon)["url"]
    assert daemon.stop() == 0
    try:
        httpx.get(url, timeout=2)
    except httpx.ConnectError:
        pass
    else:  # pragma: no cover
        raise AssertionError("the dashboard outlived its daemon")
    assert os.path.exists(daemon.log_path)


def test_a_port_in_use_is_exit_2_with_the_reason(daemon: Daemon) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = daemon.ctl("dashboard", "--port", str(busy.getsockname()[1]))
    assert result.returncode == 2
    assert b"cannot serve the dashboard on 127.0.0.1:" in result.stderr
    assert start(daemon)["started"] is True  # a later call can still start it
