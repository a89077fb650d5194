"""daemon/metrics.py on its own: the store-call seam, and that metrics never fail
a request or a scrape (the scrape end to end: tests/integration/test_metrics.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentcoordd import protocol as p
from agentcoordd.daemon.metrics import Metrics, PrometheusMetrics, TimedStore
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
    assert found[("agentcoord_lanes", frozenset({("state", "active")}))] == 0
    assert found[("agentcoord_connections_open", frozenset())] == 2
    assert found[("agentcoord_connections_refused_total", frozenset({("reason", "limit")}))] == 5
