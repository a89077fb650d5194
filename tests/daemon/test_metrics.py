"""daemon/metrics.py on its own: the store-call seam, and that metrics never fail
a request or a scrape (the scrape end to end: tests/integration/test_metrics.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentcoordd import protocol as p
from agentcoordd.daemon import metrics as metrics_mod
from agentcoordd.daemon.metrics import FleetGauges, Metrics, PrometheusMetrics, TimedStore
from agentcoordd.daemon.services import Services
from agentcoordd.store.base import Conflict, NotFound
from agentcoordd.store.local import LocalStore


def samples(metrics: PrometheusMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    _, body = metrics.exposition()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


class Server:
    """What the collector reads of the server (Daemon.describe's counters)."""

    def describe(self) -> dict[str, Any]:
        return {"connections": 2, "refused_connections": 5, "refused_peers": 1, "bad_clients": 0}

    def request_stop(self, reason: str, **fields: Any) -> None:
        pass


async def test_timed_store_times_each_call_and_labels_errors_with_the_stores_own(tmp_path: Path) -> None:
    metrics = PrometheusMetrics()
    store = metrics.wrap(LocalStore(tmp_path / "root"), "local")
    assert isinstance(store, TimedStore) and store.capabilities.blocking is not None

    version = await store.create("claims/o__r/1.json", {"a": 1})
    assert (await store.get("claims/o__r/1.json")).data == {"a": 1}
    with pytest.raises(Conflict):
        await store.create("claims/o__r/1.json", {"a": 2})
    await store.replace("claims/o__r/1.json", {"a": 3}, version)
    with pytest.raises(NotFound):
        await store.delete("claims/o__r/2.json", "v")

    found = samples(metrics)
    count = "agentcoord_backend_request_duration_seconds_count"
    assert found[(count, frozenset({("backend", "local"), ("operation", "create")}))] == 2
    assert found[(count, frozenset({("backend", "local"), ("operation", "get")}))] == 1
    errors = "agentcoord_backend_errors_total"
    assert found[(errors, frozenset({("backend", "local"), ("operation", "create"),
                                     ("error", "conflict")}))] == 1
    assert found[(errors, frozenset({("backend", "local"), ("operation", "delete"),
                                     ("error", "not_found")}))] == 1


def test_a_recording_that_breaks_never_reaches_the_caller() -> None:
    metrics = PrometheusMetrics()
    metrics.requests = None  # type: ignore[assignment]  # any failure inside recording
    metrics.backend_seconds = None  # type: ignore[assignment]
    metrics.renewals = None  # type: ignore[assignment]
    metrics.request(p.Claim(agent_id="a", repo="o/r", target="1"), 0, 0.01)
    metrics.request(object(), 0, 0.01)  # not a wire request at all
    metrics.backend_call("local", "get", 0.001, None)
    metrics.renewal("ok", 0.1)


def test_switched_off_metrics_record_nothing_and_wrap_nothing(tmp_path: Path) -> None:
    off = Metrics()
    store = LocalStore(tmp_path)
    assert off.wrap(store, "local") is store and off.exposition() is None


def test_an_unreadable_outbox_costs_its_own_samples_not_the_scrape(tmp_path: Path) -> None:
    svc = Services.build(Server(), str(tmp_path), log=None)
    (tmp_path / "outbox.jsonl").mkdir()  # reading it fails with IsADirectoryError
    found = samples(svc.metrics)  # type: ignore[arg-type]
    assert ("agentcoord_outbox_depth", frozenset()) not in found
    assert found[("agentcoord_keepalive_lanes", frozenset({("state", "active")}))] == 0
    assert found[("agentcoord_connections_open", frozenset())] == 2
    assert found[("agentcoord_connections_refused_total", frozenset({("reason", "limit")}))] == 5


class Clock:
    """The fleet gauges' clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def batch(batch_id: str, *states: str) -> dict[str, Any]:
    return {"batch_id": batch_id, "lanes": [{"name": f"l{i}", "lane_state": s} for i, s in enumerate(states)]}


def test_fleet_gauges_keep_registered_batches_only_and_let_old_ones_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    fleet = FleetGauges(now=clock)
    fleet.open_requests("root", [{"batch_id": "ghost", "age_seconds": 5}], batch_id="ghost")
    fleet.open_requests("root", [{"batch_id": "ghost", "age_seconds": 5}], batch_id=None)
    assert fleet.batches() == []  # requests alone never make a batch a label

    fleet.lanes("root", [batch("b1", "held", "dead_holder", "bogus"), batch("b2", "closed")], complete=True)
    fleet.open_requests("root", [{"batch_id": "b1", "age_seconds": 30}, {"batch_id": "b1", "age_seconds": None},
                                 {"batch_id": "b9", "age_seconds": 1}], batch_id=None)
    seen = dict(fleet.batches())
    assert (seen["b1"].lanes["held"], seen["b1"].lanes["dead_holder"], seen["b1"].lanes["unknown"]) == (1, 1, 1)
    assert (seen["b1"].open_requests, seen["b1"].oldest_request_at) == (2, clock.now - 30)
    assert (seen["b2"].open_requests, seen["b2"].told_requests) == (0, True)

    # a batch view keeps what it does not tell; another store's full listing leaves b1 alone
    fleet.lanes("root", [batch("b1", "closed", "closed", "closed")], complete=False)
    fleet.lanes("other", [], complete=True)
    assert dict(fleet.batches())["b1"].open_requests == 2 and "b2" in dict(fleet.batches())
    # the same store's full listing without b2: b2 left (archived or removed)
    fleet.lanes("root", [batch("b1", "closed")], complete=True)
    assert [b for b, _ in fleet.batches()] == ["b1"]
    # an hour without a view: forgotten
    clock.now += metrics_mod.FLEET_FORGET_AFTER + 1
    assert fleet.batches() == []

    monkeypatch.setattr(metrics_mod, "FLEET_MAX_BATCHES", 3)
    for n in range(5):
        clock.now += 1
        fleet.lanes("root", [batch(f"b{n}", "held")], complete=False)
    assert [b for b, _ in fleet.batches()] == ["b2", "b3", "b4"]  # the least recently seen left


def test_fleet_gauges_are_exposed_per_batch_and_state(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_COORD_MACHINE_ID", "m-1")
    metrics = Services.build(Server(), str(tmp_path), log=None).metrics
    assert isinstance(metrics, PrometheusMetrics) and metrics.fleet is not None
    metrics.fleet.lanes("root", [batch("b1", "held", "stale_holder")], complete=False)
    found = samples(metrics)
    assert found[("agentcoord_batch_lanes", frozenset({("batch_id", "b1"), ("state", "stale_holder")}))] == 1
    assert found[("agentcoord_batch_lanes", frozenset({("batch_id", "b1"), ("state", "released")}))] == 0
    assert ("agentcoord_open_requests", frozenset({("batch_id", "b1")})) not in found  # not told yet
    assert found[("agentcoord_daemon_info", frozenset({("version", p.DAEMON_VERSION), ("machine", "m-1"),
                                                       ("protocol", str(p.PROTOCOL_VERSION))}))] == 1


def test_a_request_outcome_tells_a_timeout_from_an_error() -> None:
    assert [metrics_mod.outcome(code, timed_out) for code, timed_out in
            ((0, False), (1, False), (2, False), (2, True), (3, False), (64, False))] == \
        ["ok", "usage", "error", "timeout", "refused", "error"]
