"""`/metrics` on the daemon's loopback server (docs/metrics.md): a real daemon,
scraped over HTTP, parsed with prometheus-client's own parser."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from agentcoordd import protocol as p

from .helpers import PYTHON, Daemon, RawClient

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(port: int, path: str = "/metrics", host: str | None = None) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host or f"127.0.0.1:{port}"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("content-type") or "", resp.read()
    finally:
        conn.close()


def wait_listening(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def scrape(port: int) -> Samples:
    status, ctype, body = get(port)
    assert status == 200, body
    assert ctype.startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def start(daemon: Daemon, *args: str) -> int:
    port = free_port()
    daemon.start("--metrics-port", str(port), *args)
    wait_listening(port)
    return port


def test_a_claim_and_a_refused_claim_count_by_op_and_exit_code(daemon_factory: Any) -> None:
    d = daemon_factory()
    port = start(d)
    before = scrape(port)
    assert value(before, "agentcoord_requests_total", op="claim", exit_code="0") == 0
    assert d.ctl("claim", "--agent-id", "a1", "--repo", "o/r", "--target", "7").returncode == 0
    refused = d.ctl("claim", "--agent-id", "a2", "--repo", "o/r", "--target", "7")
    assert refused.returncode == 3

    after = scrape(port)
    assert value(after, "agentcoord_requests_total", op="claim", exit_code="0") == 1
    assert value(after, "agentcoord_requests_total", op="claim", exit_code="3") == 1
    assert value(after, "agentcoord_claims_refused_total", op="claim") == 1
    assert value(after, "agentcoord_request_duration_seconds_count", op="claim") == 2
    assert value(after, "agentcoord_request_duration_seconds_bucket", op="claim", le="+Inf") == 2
    assert value(after, "agentcoord_request_duration_seconds_sum", op="claim") > 0
    # the claims' store calls, timed at the pool's seam
    for operation in ("get", "create"):
        assert value(after, "agentcoord_backend_request_duration_seconds_count",
                     backend="local", operation=operation) >= 1
    assert value(after, "agentcoord_daemon_info", version=p.DAEMON_VERSION,
                 protocol=str(p.PROTOCOL_VERSION)) == 1
    assert 0 < value(after, "agentcoord_daemon_start_time_seconds") <= time.time()
    assert value(after, "process_resident_memory_bytes") > 0


def test_a_keep_alive_lane_renews_and_moves_renewals_lag_and_lanes(daemon_factory: Any) -> None:
    d = daemon_factory()
    port = start(d)
    result = d.ctl("heartbeat", "--agent-id", "keeper", "--ttl", "2", "--keep-alive",
                   "--renew-every", "0.2")
    assert result.returncode == 0, result.stderr

    def renewed() -> Samples | None:
        now = scrape(port)
        return now if value(now, "agentcoord_renewals_total", result="ok") >= 2 else None

    samples = eventually(renewed)
    assert samples, "no renewal counted"
    assert value(samples, "agentcoord_renewal_lag_seconds_count") >= 2
    assert value(samples, "agentcoord_renewal_lag_seconds_bucket", le="+Inf") >= 2
    assert value(samples, "agentcoord_lanes", state="active") == 1
    assert value(samples, "agentcoord_renewals_total", result="failed") == 0

    assert d.ctl("lanes", "stop", "--agent-id", "keeper").returncode == 0
    assert value(scrape(port), "agentcoord_lanes", state="active") == 0


def test_a_queued_outbox_entry_shows_depth_age_and_the_backend_error(daemon_factory: Any) -> None:
    d = daemon_factory()
    d.extra_env["AGENT_COORD_METRICS_PORT"] = str(port := free_port())  # the environment's way
    d.start()
    wait_listening(port)
    env = {"AGENT_COORD_API_URL": f"http://127.0.0.1:{free_port()}",  # nobody listens there
           "AGENT_COORD_API_TOKEN": "acm_secret"}
    result = d.ctl("--timeout", "10", "record-event", "--batch-id", "b1", "--type", "note",
                   "--queue-on-failure", env=env, unset=("AGENT_COORD_STATE_ROOT",))
    assert result.returncode == 0, result.stderr

    samples = scrape(port)
    assert value(samples, "agentcoord_outbox_depth") == 1
    assert value(samples, "agentcoord_outbox_queued_total") == 1
    assert value(samples, "agentcoord_outbox_oldest_age_seconds") >= 0
    assert value(samples, "agentcoord_backend_errors_total", backend="http", operation="create",
                 error="unavailable") >= 1
    assert value(samples, "agentcoord_requests_total", op="record_event", exit_code="0") == 1
    time.sleep(0.2)
    assert value(scrape(port), "agentcoord_outbox_oldest_age_seconds") >= 0.2


def test_connections_open_and_refused_by_the_limit(daemon_factory: Any) -> None:
    d = daemon_factory()
    port = start(d, "--max-connections", "1")
    with RawClient(d.socket) as held:
        held.hello()
        with RawClient(d.socket) as extra:
            reply = extra.recv()
            assert isinstance(reply, p.Response) and reply.exit_code == 2
        samples = scrape(port)
        assert value(samples, "agentcoord_connections_open") == 1
        assert value(samples, "agentcoord_connections_refused_total", reason="limit") == 1
    assert eventually(lambda: value(scrape(port), "agentcoord_connections_open") == 0)


def test_a_wrong_host_header_is_refused_as_for_the_dashboard(daemon_factory: Any) -> None:
    d = daemon_factory()
    port = start(d)
    status, _, body = get(port, host=f"attacker.example:{port}")
    assert status == 403 and b"unexpected Host header" in body
    assert get(port, host=f"localhost:{port}")[0] == 200


def test_the_boot_server_is_the_dashboard_and_shows_a_backend_once_asked(daemon_factory: Any) -> None:
    d = daemon_factory()
    port = start(d)
    status, _, body = get(port, "/api/overview")
    assert status == 503 and b"agentcoordctl dashboard" in body
    shown = d.ctl("dashboard", "--json")
    assert shown.returncode == 0, shown.stderr
    payload = json.loads(shown.stdout)
    assert payload["port"] == port and payload["started"] is False
    assert get(port, "/api/overview")[0] == 200
    status = d.ctl("daemon", "status")
    assert f"metrics: http://127.0.0.1:{port}/metrics" in status.stdout.decode()


def test_no_metrics_records_nothing_and_metrics_answers_404(daemon_factory: Any) -> None:
    d = daemon_factory()
    port = start(d, "--no-metrics")
    status, _, body = get(port)
    assert status == 404 and b"--no-metrics" in body
    assert json.loads(d.ctl("daemon", "status", "--json").stdout)["metrics_url"] is None
    assert d.ctl("claim", "--agent-id", "a1", "--repo", "o/r", "--target", "1").returncode == 0


def test_a_bad_metrics_port_in_the_environment_is_one_line_and_exit_1(short_dir: Any) -> None:
    result = subprocess.run(
        [PYTHON, "-m", "agentcoordd.daemon.main", "--foreground", "--socket",
         str(short_dir / "d.sock"), "--state-dir", str(short_dir / "st")],
        env={"PATH": "/usr/bin:/bin", "HOME": str(short_dir), "AGENT_COORD_METRICS_PORT": "http"},
        capture_output=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines() == [
        "agentcoordd: AGENT_COORD_METRICS_PORT (environment): not a TCP port (1-65535): 'http'"]


def test_the_machine_env_file_turns_the_metrics_port_on(daemon_factory: Any) -> None:
    d = daemon_factory()
    port = free_port()
    env_file = d.base / "xdgconfig" / "agent-coord" / "env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text(f"export AGENT_COORD_METRICS_PORT={port}\n")
    d.extra_env["XDG_CONFIG_HOME"] = str(d.base / "xdgconfig")
    d.start()
    wait_listening(port)
    assert value(scrape(port), "agentcoord_lanes", state="active") == 0
