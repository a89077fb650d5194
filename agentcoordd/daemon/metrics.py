"""The daemon's Prometheus metrics (docs/metrics.md), served at `/metrics` by the
loopback HTTP server (agentcoordd/daemon/dashboard.py).

One `CollectorRegistry` owned by the daemon (never prometheus_client's global
one), built in `Services.build` and handed to what records into it:

* the server times every request (`request`), by op and exit code;
* the store pool wraps every store it opens in `TimedStore`, the one seam
  every backend call of the Store protocol passes (`backend_call`);
* the keeper reports each renewal's result and lag (`renewal`);
* what already exists as state (keep-alive lanes by state, outbox depth and
  age, open and refused connections) is read at scrape time by
  `_StateCollector`, never copied on every change;
* the fleet (lanes by state per batch, open requests) is what `status`,
  the dashboard's overview and `health` computed anyway: they hand their
  rows to `FleetGauges` (the Ctx's `seen`), which the scrape reads. A scrape
  never reads the store.

Instrumentation never fails a request: every recording method swallows its
own errors. `Metrics()` (the base class) is the switched-off variant
(`agentcoordd --no-metrics`): it records nothing and does not import
prometheus_client, which is what the cost bench compares against.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agentcoordd import protocol as p
from agentcoordd.coord import holders

# Seconds. Requests include long waits (`wait --until-unblocked`), hence the tail.
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
BACKEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
KEEPALIVE_STATES = ("active", "backoff", "fenced", "ended")
RENEWAL_RESULTS = ("ok", "failed", "ended")
# A request's outcome: a wait that ends on its timeout (exit 2, `timed_out`) is not an error.
OUTCOMES = {p.EXIT_OK: "ok", p.EXIT_USAGE: "usage", p.EXIT_CLAIM_REFUSED: "refused"}
# Batches in the fleet gauges: only those a view found registered, at most this many
# (the least recently seen leave first), each until no view has told of it for an hour.
FLEET_MAX_BATCHES = 100
FLEET_FORGET_AFTER = 3600.0


def outcome(exit_code: int, timed_out: bool) -> str:
    if exit_code == p.EXIT_OPERATIONAL and timed_out:
        return "timeout"
    return OUTCOMES.get(exit_code, "error")


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
    fleet: FleetGauges | None = None  # handed to use cases as Ctx.seen

    def request(self, request: Any, exit_code: int, seconds: float, *, timed_out: bool = False) -> None:
        pass

    def backend_call(self, kind: str, op: str, seconds: float, error: BaseException | None) -> None:
        pass

    def renewal(self, result: str, lag: float | None = None) -> None:
        pass

    def wrap(self, store: Any, kind: str) -> Any:
        return store

    def watch(self, *, server: Any, keeper: Any, outbox: Any, pool: Any = None,
              machine: str | None = None) -> None:
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
        self.requests = Counter("agentcoord_requests", "Daemon requests answered, by op, exit code "
                                "and outcome (ok, usage, refused, error, timeout: a wait that "
                                "ended on its timeout).", ["op", "exit_code", "outcome"], registry=reg)
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
        self.info = Info("agentcoord_daemon", "This daemon's version, wire protocol and machine "
                         "(AGENT_COORD_MACHINE_ID; join it onto any series by instance).", registry=reg)
        self.info.info({"version": p.DAEMON_VERSION, "protocol": str(p.PROTOCOL_VERSION), "machine": ""})
        ProcessCollector(registry=reg)  # process_resident_memory_bytes, open fds, cpu
        for result in RENEWAL_RESULTS:  # present at 0 from the start: rate() needs a first sample
            self.renewals.labels(result)
        self.fleet = FleetGauges()
        self._ops: dict[type, str] = {}
        self._request_children: dict[tuple[str, int, bool], tuple[Any, Any]] = {}
        self._backend_children: dict[tuple[str, str], Any] = {}

    # ---- recording (never raises) ---------------------------------------------------

    def request(self, request: Any, exit_code: int, seconds: float, *, timed_out: bool = False) -> None:
        try:
            kind = type(request)
            op = self._ops.get(kind)
            if op is None:
                op = self._ops[kind] = str(getattr(kind.__struct_config__, "tag", kind.__name__))
            key = (op, exit_code, timed_out)
            children = self._request_children.get(key)
            if children is None:
                children = self._request_children[key] = (
                    self.requests.labels(op, str(exit_code), outcome(exit_code, timed_out)),
                    self.request_seconds.labels(op))
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

    def watch(self, *, server: Any, keeper: Any, outbox: Any, pool: Any = None,
              machine: str | None = None) -> None:
        self.info.info({"version": p.DAEMON_VERSION, "protocol": str(p.PROTOCOL_VERSION),
                        "machine": machine or ""})
        self.registry.register(_StateCollector(server, keeper, outbox, pool, self.fleet))

    def exposition(self) -> tuple[str, bytes]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return CONTENT_TYPE_LATEST, generate_latest(self.registry)


def build(enabled: bool) -> Metrics:
    return PrometheusMetrics() if enabled else Metrics()


@dataclass
class _BatchSeen:
    source: str  # the store whose view told it (Store.name)
    seen_at: float  # Unix time of the last view of its lanes
    lanes: dict[str, int]  # lane_state (coord/holders.py) -> lanes
    open_requests: int = 0
    oldest_request_at: float | None = None  # Unix time the oldest open request was made
    told_requests: bool = False  # a view has counted its open requests


class FleetGauges:
    """What the daemon's views last told of each registered batch (coord.context.ViewsSeen).

    `status` (batch and full scope, so also the dashboard's overview and `status
    --watch`) hands over its lane rows, `status --batch-id` and `health` their open
    requests. A batch enters only from a view that found its manifest; it leaves when
    a full listing of the same store no longer has it (archived, removed), when no
    view told of it for FLEET_FORGET_AFTER, or when FLEET_MAX_BATCHES more recently
    seen ones push it out. Nothing here raises: a view is never failed by its gauges.
    """

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self._batches: dict[str, _BatchSeen] = {}  # least recently seen first

    def lanes(self, source: str, batches: list[dict[str, Any]], *, complete: bool) -> None:
        try:
            now = self._now()
            listed: set[str] = set()
            for batch in batches:
                batch_id = batch.get("batch_id")
                if not isinstance(batch_id, str):
                    continue
                counts = dict.fromkeys(holders.LANE_STATES, 0)
                for lane in batch.get("lanes") or []:
                    state = lane.get("lane_state") if isinstance(lane, dict) else None
                    state = state if state in counts else holders.UNKNOWN_STATE
                    counts[state] += 1
                before = self._batches.pop(batch_id, None)
                seen = self._batches[batch_id] = _BatchSeen(source, now, counts)
                if before is not None and before.source == source:
                    seen.open_requests, seen.oldest_request_at = before.open_requests, before.oldest_request_at
                    seen.told_requests = before.told_requests
                listed.add(batch_id)
            if complete:
                for gone in [b for b, seen in self._batches.items() if seen.source == source and b not in listed]:
                    del self._batches[gone]
            while len(self._batches) > FLEET_MAX_BATCHES:
                del self._batches[next(iter(self._batches))]
        except Exception:  # noqa: BLE001 - gauges never fail a view
            pass

    def open_requests(self, source: str, requests: list[dict[str, Any]], *, batch_id: str | None) -> None:
        """`requests`: a batch's open requests (`batch_id`), or every batch's (None)."""
        try:
            now = self._now()
            told = [batch_id] if batch_id is not None else list(self._batches)
            for name in told:
                seen = self._batches.get(name)
                if seen is None or seen.source != source:
                    continue  # not a batch a view found registered on this store
                pending = requests if batch_id is not None else \
                    [r for r in requests if r.get("batch_id") == name]
                ages = [r["age_seconds"] for r in pending if isinstance(r.get("age_seconds"), (int, float))]
                seen.open_requests = len(pending)
                seen.oldest_request_at = now - max(ages) if ages else None
                seen.told_requests = True
        except Exception:  # noqa: BLE001
            pass

    def batches(self) -> list[tuple[str, _BatchSeen]]:
        """The batches still shown (those no view told of for too long are forgotten)."""
        cutoff = self._now() - FLEET_FORGET_AFTER
        for gone in [b for b, seen in self._batches.items() if seen.seen_at < cutoff]:
            del self._batches[gone]
        return list(self._batches.items())


class _StateCollector:
    """What the daemon already knows, read when Prometheus scrapes (event loop thread)."""

    def __init__(self, server: Any, keeper: Any, outbox: Any, pool: Any = None,
                 fleet: FleetGauges | None = None) -> None:
        self.server = server
        self.keeper = keeper
        self.outbox = outbox
        self.pool = pool
        self.fleet = fleet

    def describe(self) -> list[Any]:
        return []  # names are fixed below; nothing to pre-collect at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for section in (self._lanes, self._fleet, self._outbox, self._connections, self._clocks):
            try:
                yield from section(GaugeMetricFamily, CounterMetricFamily)
            except Exception:  # noqa: BLE001 - one unreadable section never fails the scrape
                continue

    def _lanes(self, gauge: Callable[..., Any], _counter: Callable[..., Any]) -> Iterator[Any]:
        counts = dict.fromkeys(KEEPALIVE_STATES, 0)
        for lane in list(self.keeper.schedule.lanes.values()):
            counts[lane.state] = counts.get(lane.state, 0) + 1
        family = gauge("agentcoord_keepalive_lanes", "Keep-alive lanes this daemon renews, by "
                       "state (ended and fenced lanes stay listed for an hour).", labels=["state"])
        for state, count in counts.items():
            family.add_metric([state], count)
        yield family

    def _fleet(self, gauge: Callable[..., Any], _counter: Callable[..., Any]) -> Iterator[Any]:
        if self.fleet is None:
            return
        now = time.time()
        lanes = gauge("agentcoord_batch_lanes", "Lanes of a registered batch by lane_state "
                      "(coord/holders.py), as status/overview last told them.",
                      labels=["batch_id", "state"])
        requests = gauge("agentcoord_open_requests", "Help and escalation requests of a batch "
                         "without an answer, as status --batch-id or health last told them.",
                         labels=["batch_id"])
        oldest = gauge("agentcoord_open_request_oldest_age_seconds",
                       "Age of the batch's oldest open request now (0 when none).", labels=["batch_id"])
        seen_at = gauge("agentcoord_batch_seen_timestamp_seconds",
                        "When a view last told the batch's lanes (Unix time).", labels=["batch_id"])
        for batch_id, seen in self.fleet.batches():
            for state, count in seen.lanes.items():
                lanes.add_metric([batch_id, state], count)
            seen_at.add_metric([batch_id], seen.seen_at)
            if seen.told_requests:
                requests.add_metric([batch_id], seen.open_requests)
                if seen.open_requests == 0:
                    oldest.add_metric([batch_id], 0.0)
                elif seen.oldest_request_at is not None:
                    oldest.add_metric([batch_id], max(now - seen.oldest_request_at, 0.0))
        yield from (lanes, requests, oldest, seen_at)

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


    def _clocks(self, gauge: Callable[..., Any], _counter: Callable[..., Any]) -> Iterator[Any]:
        if self.pool is None:
            return
        offset = gauge("agentcoord_backend_clock_offset_seconds",
                       "This machine's clock minus a remote backend's (positive: ahead), as "
                       "measured from its responses; takeovers are refused beyond the lease "
                       "policy's bound.",
                       labels=["backend", "location"])
        uncertainty = gauge("agentcoord_backend_clock_offset_uncertainty_seconds",
                            "How far the measured offset may be off.", labels=["backend", "location"])
        for kind, location, measured in self.pool.clocks():
            if measured is not None:
                offset.add_metric([kind, location], measured.seconds)
                uncertainty.add_metric([kind, location], measured.uncertainty)
        yield offset
        yield uncertainty


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
