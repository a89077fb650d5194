"""The daemon's Prometheus metrics (docs/metrics.md), served at `/metrics` by the
loopback HTTP server (agentcoordd/daemon/dashboard.py).

One `CollectorRegistry` owned by the daemon (never prometheus_client's global
one), built in `Services.build` and handed to what records into it:

* the server times every request (`request`), by op and exit code;
* the store pool wraps every store it opens in `TimedStore`, the one seam
  every backend call of the Store protocol passes (`backend_call`);
* the keeper reports each renewal's result and lag (`renewal`);
* what already exists as state (lanes by state, outbox depth and age, open
  and refused connections) is read at scrape time by `_StateCollector`,
  never copied on every change.

Instrumentation never fails a request: every recording method swallows its
own errors. `Metrics()` (the base class) is the switched-off variant
(`agentcoordd --no-metrics`): it records nothing and does not import
prometheus_client, which is what the cost bench compares against.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from agentcoordd import protocol as p

# Seconds. Requests include long waits (`wait --until-unblocked`), hence the tail.
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
BACKEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LANE_STATES = ("active", "backoff", "fenced", "ended")
RENEWAL_RESULTS = ("ok", "failed", "ended")


def _error_label(error: BaseException) -> str:
    """A backend error as a small fixed label set (the Store error taxonomy)."""
    from agentcoordd.store import base

    for cls, label in ((base.Conflict, "conflict"), (base.NotFound, "not_found"),
                       (base.Forbidden, "forbidden"), (base.Unavailable, "unavailable"),
                       (base.InvalidRecord, "invalid_record"), (base.InvalidPath, "invalid_path")):
        if isinstance(error, cls):
            return label
    return "other"


class Metrics:
    """Metrics switched off: every call is a no-op."""

    enabled = False

    def request(self, request: Any, exit_code: int, seconds: float) -> None:
        pass

    def backend_call(self, kind: str, op: str, seconds: float, error: BaseException | None) -> None:
        pass

    def renewal(self, result: str, lag: float | None = None) -> None:
        pass

    def wrap(self, store: Any, kind: str) -> Any:
        return store

    def watch(self, *, server: Any, keeper: Any, outbox: Any) -> None:
        pass

    def exposition(self) -> tuple[str, bytes] | None:
        return None


class PrometheusMetrics(Metrics):
    enabled = True

    def __init__(self) -> None:
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            Info,
            disable_created_metrics,
        )
        from prometheus_client.process_collector import ProcessCollector

        disable_created_metrics()  # no `_created` series: a third of the output, unused here

        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.requests = Counter("agentcoord_requests", "Daemon requests answered, by op and exit code.",
                                ["op", "exit_code"], registry=reg)
        self.request_seconds = Histogram("agentcoord_request_duration_seconds",
                                         "Time from a decoded request to its reply, by op.", ["op"],
                                         buckets=REQUEST_BUCKETS, registry=reg)
        self.claims_refused = Counter("agentcoord_claims_refused",
                                      "Requests answered with exit 3 (CLAIM_REFUSED), by op.", ["op"],
                                      registry=reg)
        self.backend_seconds = Histogram("agentcoord_backend_request_duration_seconds",
                                         "Store calls (get/create/replace/delete/list), by backend "
                                         "kind and operation; failed calls included.",
                                         ["backend", "operation"], buckets=BACKEND_BUCKETS, registry=reg)
        self.backend_errors = Counter("agentcoord_backend_errors",
                                      "Store calls that raised, by backend kind, operation and error.",
                                      ["backend", "operation", "error"], registry=reg)
        self.renewals = Counter("agentcoord_renewals", "Keep-alive heartbeat renewals, by result "
                                "(ok, failed: retried with backoff, ended: the lane ended).",
                                ["result"], registry=reg)
        self.renewal_lag = Histogram("agentcoord_renewal_lag_seconds",
                                     "How late a successful renewal ran after it was due.",
                                     buckets=LAG_BUCKETS, registry=reg)
        Gauge("agentcoord_daemon_start_time_seconds", "When this daemon started (Unix time).",
              registry=reg).set(time.time())
        Info("agentcoord_daemon", "This daemon's version and wire protocol.",
             registry=reg).info({"version": p.DAEMON_VERSION, "protocol": str(p.PROTOCOL_VERSION)})
        ProcessCollector(registry=reg)  # process_resident_memory_bytes, open fds, cpu
        for result in RENEWAL_RESULTS:  # present at 0 from the start: rate() needs a first sample
            self.renewals.labels(result)
        self._ops: dict[type, str] = {}
        self._request_children: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._backend_children: dict[tuple[str, str], Any] = {}

    # ---- recording (never raises) ---------------------------------------------------

    def request(self, request: Any, exit_code: int, seconds: float) -> None:
        try:
            kind = type(request)
            op = self._ops.get(kind)
            if op is None:
                op = self._ops[kind] = str(getattr(kind.__struct_config__, "tag", kind.__name__))
            children = self._request_children.get((op, exit_code))
            if children is None:
                children = self._request_children[(op, exit_code)] = (
                    self.requests.labels(op, str(exit_code)), self.request_seconds.labels(op))
            children[0].inc()
            children[1].observe(seconds)
            if exit_code == p.EXIT_CLAIM_REFUSED:
                self.claims_refused.labels(op).inc()
        except Exception:  # noqa: BLE001 - metrics never fail a request
            pass

    def backend_call(self, kind: str, op: str, seconds: float, error: BaseException | None) -> None:
        try:
            child = self._backend_children.get((kind, op))
            if child is None:
                child = self._backend_children[(kind, op)] = self.backend_seconds.labels(kind, op)
            child.observe(seconds)
            if error is not None:
                self.backend_errors.labels(kind, op, _error_label(error)).inc()
        except Exception:  # noqa: BLE001
            pass

    def renewal(self, result: str, lag: float | None = None) -> None:
        try:
            self.renewals.labels(result).inc()
            if lag is not None:
                self.renewal_lag.observe(lag)
        except Exception:  # noqa: BLE001
            pass

    def wrap(self, store: Any, kind: str) -> Any:
        return TimedStore(store, kind, self.backend_call)

    # ---- scrape-time state and exposition -----------------------------------------

    def watch(self, *, server: Any, keeper: Any, outbox: Any) -> None:
        self.registry.register(_StateCollector(server, keeper, outbox))

    def exposition(self) -> tuple[str, bytes]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return CONTENT_TYPE_LATEST, generate_latest(self.registry)


def build(enabled: bool) -> Metrics:
    return PrometheusMetrics() if enabled else Metrics()


class _StateCollector:
    """What the daemon already knows, read when Prometheus scrapes (event loop thread)."""

    def __init__(self, server: Any, keeper: Any, outbox: Any) -> None:
        self.server = server
        self.keeper = keeper
        self.outbox = outbox

    def describe(self) -> list[Any]:
        return []  # names are fixed below; nothing to pre-collect at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for section in (self._lanes, self._outbox, self._connections):
            try:
                yield from section(GaugeMetricFamily, CounterMetricFamily)
            except Exception:  # noqa: BLE001 - one unreadable section never fails the scrape
                continue

    def _lanes(self, gauge: Callable[..., Any], _counter: Callable[..., Any]) -> Iterator[Any]:
        counts = dict.fromkeys(LANE_STATES, 0)
        for lane in list(self.keeper.schedule.lanes.values()):
            counts[lane.state] = counts.get(lane.state, 0) + 1
        family = gauge("agentcoord_lanes", "Keep-alive lanes the daemon knows, by state "
                       "(ended and fenced lanes stay listed for an hour).", labels=["state"])
        for state, count in counts.items():
            family.add_metric([state], count)
        yield family

    def _outbox(self, gauge: Callable[..., Any], counter: Callable[..., Any]) -> Iterator[Any]:
        summary = self.outbox.summary()
        yield gauge("agentcoord_outbox_depth", "Events queued in the durable outbox.",
                    value=summary["depth"])
        yield gauge("agentcoord_outbox_oldest_age_seconds",
                    "Age of the oldest queued outbox entry (0 when empty).",
                    value=summary["oldest_age_seconds"] or 0.0)
        yield gauge("agentcoord_outbox_waiting_for_token",
                    "Queued entries whose backend needs a token nobody brought yet.",
                    value=summary.get("waiting_for_token", 0))
        yield counter("agentcoord_outbox_queued", "Events this daemon queued in the outbox.",
                      value=self.outbox.queued)
        yield counter("agentcoord_outbox_delivered", "Outbox entries this daemon delivered.",
                      value=self.outbox.delivered)

    def _connections(self, gauge: Callable[..., Any], counter: Callable[..., Any]) -> Iterator[Any]:
        state = self.server.describe()
        yield gauge("agentcoord_connections_open", "Client connections open now.",
                    value=state["connections"])
        refused = counter("agentcoord_connections_refused",
                          "Connections refused: over --max-connections (limit) or another "
                          "user's (peer_uid).", labels=["reason"])
        refused.add_metric(["limit"], state["refused_connections"])
        refused.add_metric(["peer_uid"], state["refused_peers"])
        yield refused
        yield counter("agentcoord_bad_clients", "Connections dropped for a protocol violation "
                      "or a lost peer.", value=state["bad_clients"])


class TimedStore:
    """A Store that times each call of the protocol on the store it wraps.

    Capabilities (scans, blocking group-commit renewals, introspection) are the
    wrapped store's own and are not timed: they are not one backend call each.
    """

    def __init__(self, inner: Any, kind: str, record: Callable[[str, str, float, BaseException | None], None]) -> None:
        self.inner = inner
        self.kind = kind
        self.name = inner.name
        self.capabilities = inner.capabilities
        self._record = record

    async def _timed(self, op: str, work: Any) -> Any:
        started = time.perf_counter()
        try:
            result = await work
        except Exception as exc:
            self._record(self.kind, op, time.perf_counter() - started, exc)
            raise
        self._record(self.kind, op, time.perf_counter() - started, None)
        return result

    async def get(self, path: str) -> Any:
        return await self._timed("get", self.inner.get(path))

    async def create(self, path: str, data: Any) -> str:
        return await self._timed("create", self.inner.create(path, data))

    async def replace(self, path: str, data: Any, version: str) -> str:
        return await self._timed("replace", self.inner.replace(path, data, version))

    async def delete(self, path: str, version: str) -> None:
        return await self._timed("delete", self.inner.delete(path, version))

    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Any:
        return await self._timed("list", self.inner.list(prefix, limit, cursor))

    async def aclose(self) -> None:
        await self.inner.aclose()
