"""What every use case receives: a store, a clock and the caller's identity."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentcoordd.model.identity import Identity
from agentcoordd.store.base import Store


class Clock(Protocol):
    def now(self) -> dt.datetime: ...


class LaneStamps(Protocol):
    """Group commit of lane closeout stamps (coord.closeout.StampQueue)."""

    async def stamp(self, ctx: Ctx, batch_id: str, lane: str, event: dict[str, Any]) -> None: ...


class ViewsSeen(Protocol):
    """Where the daemon keeps what its views told of the fleet (the fleet gauges of
    daemon/metrics.py): status and health hand over what they computed anyway."""

    def lanes(self, source: str, batches: list[dict[str, Any]], *, complete: bool) -> None: ...

    def open_requests(self, source: str, requests: list[dict[str, Any]], *,
                      batch_id: str | None) -> None: ...


@dataclass(frozen=True)
class LeasePolicy:
    """The machine's bounds on leases (agentcoordd.toml `[leases]`, the env file; coord/lease.py)."""

    max_ttl: int = 86_400  # seconds a claim or heartbeat may promise (24 h)
    max_clock_offset: float = 5.0  # seconds this clock may differ from the backend's


@dataclass
class Ctx:
    """One command's context. Warnings go to the caller's stderr, never fail it."""

    store: Store
    clock: Clock
    identity: Identity = field(default_factory=Identity)
    warnings: list[str] = field(default_factory=list)
    # Lifecycle events that could not be written, with their final path and
    # record; the daemon hands them to its durable outbox for retry.
    undelivered: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # Events this command wrote, with their path and record (the daemon's notifications).
    written: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # The daemon's shared lane-stamp group commit (closeout); None: stamp directly.
    stamps: LaneStamps | None = None
    lease: LeasePolicy = LeasePolicy()
    # The daemon's fleet gauges; None: nobody keeps what the views told.
    seen: ViewsSeen | None = None

    def warn(self, message: str) -> None:
        self.warnings.append(message)
