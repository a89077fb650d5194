"""The daemon's services: built once at start, passed to every request handler.

No component looks another up: each gets what it uses when it is built here,
and a handler reaches them through the one `Services` object it is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio.abc

from agentcoordd.coord.closeout import StampQueue
from agentcoordd.daemon import envfiles
from agentcoordd.daemon.backends import StorePool, own_machine_id
from agentcoordd.daemon.background import Background, Pollers
from agentcoordd.daemon.clock import SystemClock
from agentcoordd.daemon.credentials import Credentials
from agentcoordd.daemon.dashboard_host import DashboardHost
from agentcoordd.daemon.delivery import Delivery
from agentcoordd.daemon.feed import Feed
from agentcoordd.daemon.keeper import LaneKeeper
from agentcoordd.daemon.lease_settings import Leases
from agentcoordd.daemon.metrics import Metrics, build as build_metrics
from agentcoordd.daemon.notify import Notifier
from agentcoordd.daemon.recent import RecentReads
from agentcoordd.daemon.stopnotice import StopNotices


class ServerControl(Protocol):
    """What handlers may ask of the server: describe it, stop it."""

    def describe(self) -> dict[str, Any]: ...

    def request_stop(self, reason: str, **fields: Any) -> None: ...


@dataclass
class Services:
    server: ServerControl
    log: Any
    clock: SystemClock
    pool: StorePool
    credentials: Credentials  # callers' tokens, in memory only
    outbox: Delivery  # the durable event outbox and its delivery
    keeper: LaneKeeper  # keep-alive lanes and their renewal loop
    stop_notices: StopNotices  # stop requests reach agents
    shared_reads: RecentReads  # concurrent waiters share their polls' reads
    stamps: StampQueue  # concurrent closeouts of a batch share one manifest write
    dashboards: DashboardHost
    pollers: Pollers
    background: Background
    metrics: Metrics  # the daemon's own Prometheus registry (daemon/metrics.py)
    notifier: Notifier  # notifications to people, through their own durable outbox
    feed: Feed  # the live event feed: one source per followed batch
    leases: Leases  # the machine's lease bounds (max TTL, clock offset), re-read on change
    http_port: int | None = None  # serve the loopback dashboard + /metrics from the start

    @classmethod
    def build(cls, server: ServerControl, state_dir: str, log: Any, *, metrics: bool = True,
              http_port: int | None = None, config: str | None = None, metrics_open: bool = False,
              dashboard_token: Path | None = None) -> Services:
        clock = SystemClock()
        recorder = build_metrics(metrics)
        pool = StorePool(metrics=recorder)
        credentials = Credentials()
        notifier = Notifier(state_dir=state_dir, log=log, config_flag=config)
        outbox = Delivery(pool=pool, credentials=credentials, state_dir=state_dir, log=log,
                          on_delivered=notifier.on_event_delivered)
        keeper = LaneKeeper(pool=pool, clock=clock, credentials=credentials, outbox=outbox,
                            state_dir=state_dir, log=log, metrics=recorder, notifier=notifier)
        recorder.watch(server=server, keeper=keeper, outbox=outbox, pool=pool,
                       machine=own_machine_id(os.environ, envfiles.existing(os.environ)))
        stop_notices = StopNotices()
        background = Background()
        feed = Feed(background=background, clock=clock, log=log)
        return cls(server=server, log=log, clock=clock, pool=pool, credentials=credentials,
                   outbox=outbox, keeper=keeper, stop_notices=stop_notices,
                   shared_reads=RecentReads(), stamps=StampQueue(),
                   dashboards=DashboardHost(pool=pool, clock=clock, stop_notices=stop_notices,
                                            background=background, log=log,
                                            metrics=recorder.exposition if recorder.enabled else None,
                                            on_events=notifier.notice, feed=feed,
                                            token_file=dashboard_token, metrics_open=metrics_open,
                                            seen=recorder.fleet),
                   pollers=Pollers(), background=background, metrics=recorder,
                   notifier=notifier, feed=feed, http_port=http_port,
                   leases=Leases(os.environ, config, log))

    def start(self, tasks: anyio.abc.TaskGroup) -> None:
        """The loops that run for the daemon's lifetime, in the server's task group."""
        self.background.attach(tasks)
        tasks.start_soon(self.keeper.run)  # keep-alive renewals
        tasks.start_soon(self.outbox.run)  # outbox retries
        tasks.start_soon(self.notifier.run)  # notification retries
        if self.http_port is not None:  # --metrics-port: scrapeable without `agentcoordctl dashboard`
            tasks.start_soon(self.dashboards.serve_at_start, self.http_port)

    async def aclose(self) -> None:
        """After the last request: the final lanes save, then close the stores."""
        self.background.attach(None)
        self.keeper.close()
        await self.notifier.aclose()
        await self.pool.aclose()
