"""`/metrics` on the daemon's loopback server (docs/metrics.md): a real daemon,
scraped over HTTP, parsed with prometheus-client's own parser."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from agentcoordd import protocol as p

from .helpers import PYTHON, Daemon, RawClient

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Endpoint(NamedTuple):
    """A daemon's loopback server: its port and the token its user's scraper sends."""

    port: int
    token: str


def endpoint(daemon: Daemon, port: int) -> Endpoint:
    wait_listening(port)
    return Endpoint(port, daemon.dashboard_token())


def get(ep: Endpoint, path: str = "/metrics", host: str | None = None) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", ep.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host or f"127.0.0.1:{ep.port}",
                                           "Authorization": f"Bearer {ep.token}"})
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


def scrape(ep: Endpoint) -> Samples:
    status, ctype, body = get(ep)
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


def start(daemon: Daemon, *args: str) -> Endpoint:
    port = free_port()
    daemon.start("--metrics-port", str(port), *args)
    return endpoint(daemon, port)


def test_a_claim_and_a_refused_claim_count_by_op_and_exit_code(daemon_factory: Any) -> None:
    d = daemon_factory()
    port = start(d)
    before = scrape(port)
    assert value(before, "agentcoord_requests_total", op="claim", exit_code="0", outcome="ok") == 0
    assert d.ctl("claim", "--agent-id", "a1", "--repo", "o/r", "--target", "7").returncode == 0
    refused = d.ctl("claim", "--agent-id", "a2", "--repo", "o/r", "--target", "7")
    assert refused.returncode == 3

    after = scrape(port)
    assert value(after, "agentcoord_requests_total", op="claim", exit_code="0", outcome="ok") == 1
    assert value(after, "agentcoord_requests_total", op="claim", exit_code="3", outcome="refused") == 1
    assert value(after, "agentcoord_claims_refused_total", op="claim") == 1
    assert value(after, "agentcoord_request_duration_seconds_count", op="claim") == 2
    assert value(after, "agentcoord_request_duration_seconds_bucket", op="claim", le="+Inf") == 2
    assert value(after, "agentcoord_request_duration_seconds_sum", op="claim") > 0
    # the claims' store calls, timed at the pool's seam
    for operation in ("get", "create"):
        assert value(after, "agentcoord_backend_request_duration_seconds_count",
                     backend="local", operation=operation) >= 1
    assert value(after, "agentcoord_daemon_info", version=p.DAEMON_VERSION,
                 protocol=str(p.PROTOCOL_VERSION), machine="") == 1  # no AGENT_COORD_MACHINE_ID
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
    assert value(samples, "agentcoord_keepalive_lanes", state="active") == 1
    assert value(samples, "agentcoord_renewals_total", result="failed") == 0

    assert d.ctl("lanes", "stop", "--agent-id", "keeper").returncode == 0
    assert value(scrape(port), "agentcoord_keepalive_lanes", state="active") == 0


def test_a_queued_outbox_entry_shows_depth_age_and_the_backend_error(daemon_factory: Any) -> None:
    d = daemon_factory()
    d.extra_env["AGENT_COORD_METRICS_PORT"] = str(port := free_port())  # the environment's way
    d.start()
    port = endpoint(d, port)
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
    assert value(samples, "agentcoord_requests_total", op="record_event", exit_code="0",
                 outcome="ok") == 1
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
    status, _, body = get(port, host=f"attacker.example:{port.port}")
    assert status == 403 and b"unexpected Host header" in body
    assert get(port, host=f"localhost:{port.port}")[0] == 200


def test_the_boot_server_is_the_dashboard_and_shows_a_backend_once_asked(daemon_factory: Any) -> None:
    d = daemon_factory()
    port = start(d)
    status, _, body = get(port, "/api/overview")
    assert status == 503 and b"agentcoordctl dashboard" in body
    shown = d.ctl("dashboard", "--json")
    assert shown.returncode == 0, shown.stderr
    payload = json.loads(shown.stdout)
    assert payload["port"] == port.port and payload["started"] is False
    assert get(port, "/api/overview")[0] == 200
    status = d.ctl("daemon", "status")
    assert f"metrics: http://127.0.0.1:{port.port}/metrics" in status.stdout.decode()


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
    assert value(scrape(endpoint(d, port)), "agentcoord_keepalive_lanes", state="active") == 0


def register(d: Daemon, manifest: dict[str, Any]) -> None:
    path = d.base / f"{manifest['batch_id']}.json"
    path.write_text(json.dumps(manifest))
    result = d.ctl("register-batch", "--file", str(path))
    assert result.returncode == 0, result.stderr


def test_a_wait_that_ends_on_its_timeout_is_not_counted_as_an_error(daemon_factory: Any) -> None:
    d = daemon_factory()
    port = start(d)
    register(d, {"batch_id": "b1", "repo": "o/r", "lanes": [
        {"name": "a", "owner": "w1", "targets": ["1"]},
        {"name": "b", "owner": "w2", "targets": ["2"], "depends_on": "b1:a"}]})
    waited = d.ctl("wait", "--until-unblocked", "--batch-id", "b1", "--lane", "b", "--timeout", "1",
                   "--interval", "0.2")
    assert waited.returncode == 2, waited.stderr
    mistyped = d.ctl("wait", "--until-unblocked", "--batch-id", "b2", "--lane", "b", "--timeout", "30")
    assert mistyped.returncode == 2 and b"b2" in mistyped.stderr

    samples = scrape(port)
    # ctl waits in slices (one request each, the last one within --timeout): each ended on its time
    assert value(samples, "agentcoord_requests_total", op="wait_unblocked", exit_code="2",
                 outcome="timeout") >= 1
    # a wait that can never be met (a mistyped batch) is an error, at once
    assert value(samples, "agentcoord_requests_total", op="wait_unblocked", exit_code="2",
                 outcome="error") == 1


def test_the_daemon_info_names_the_machine(daemon_factory: Any) -> None:
    d = daemon_factory()
    d.extra_env["AGENT_COORD_MACHINE_ID"] = "m-metrics"
    port = start(d)
    assert value(scrape(port), "agentcoord_daemon_info", version=p.DAEMON_VERSION,
                 protocol=str(p.PROTOCOL_VERSION), machine="m-metrics") == 1


def test_fleet_gauges_show_what_status_and_health_told_and_leave_with_the_batch(
        daemon_factory: Any) -> None:
    d = daemon_factory()
    port = start(d)
    register(d, {"batch_id": "b1", "repo": "o/r", "lanes": [
        {"name": "a", "owner": "pool", "pool": True, "targets": ["1"]},
        {"name": "b", "owner": "pool", "pool": True, "targets": ["2"], "depends_on": "b1:a"},
        {"name": "c", "owner": "pool", "pool": True, "targets": ["3"]}]})
    assert not [k for k in scrape(port) if k[0] == "agentcoord_batch_lanes"]  # nobody looked yet
    assert d.ctl("claim", "--next", "--batch-id", "b1", "--agent-id", "a1").returncode == 0
    asked = d.ctl("record-event", "--batch-id", "b1", "--type", "help_requested", "--reason",
                  "question", "--lane", "a", "--agent-id", "a1", "--message", "which?", "--json")
    assert asked.returncode == 0, asked.stderr
    assert d.ctl("status", "--batch-id", "b9").returncode == 0  # a batch nobody registered

    assert d.ctl("status", "--batch-id", "b1", "--json").returncode == 0
    samples = scrape(port)
    lanes = {dict(labels)["state"]: v for (name, labels), v in samples.items()
             if name == "agentcoord_batch_lanes" and dict(labels)["batch_id"] == "b1"}
    assert lanes == {"held": 1, "blocked": 1, "not_started": 1, "closed": 0, "stale_holder": 0,
                     "dead_holder": 0, "released": 0, "unknown": 0}
    assert {dict(labels)["batch_id"] for name, labels in samples if name == "agentcoord_batch_lanes"} == {"b1"}
    assert value(samples, "agentcoord_open_requests", batch_id="b1") == 1
    assert 0 <= value(samples, "agentcoord_open_request_oldest_age_seconds", batch_id="b1") < 60
    assert 0 < time.time() - value(samples, "agentcoord_batch_seen_timestamp_seconds", batch_id="b1") < 60
    time.sleep(1.1)  # the oldest request's age grows between views
    assert value(scrape(port), "agentcoord_open_request_oldest_age_seconds", batch_id="b1") >= 1

    # health (all batches) finds no open request once it is answered
    answered = d.ctl("answer", "--batch-id", "b1", "--to-event",
                     json.loads(asked.stdout)["event"]["event_id"], "--message", "v2", "--agent-id", "lead")
    assert answered.returncode == 0, answered.stderr
    assert d.ctl("health").returncode in (0, 1)
    samples = scrape(port)
    assert value(samples, "agentcoord_open_requests", batch_id="b1") == 0
    assert value(samples, "agentcoord_open_request_oldest_age_seconds", batch_id="b1") == 0

    # a full status that no longer lists the batch takes it out of the gauges
    (d.root / "batches" / "b1.json").unlink()
    assert d.ctl("status").returncode == 0
    assert not [k for k in scrape(port) if k[0].startswith("agentcoord_batch_")]
