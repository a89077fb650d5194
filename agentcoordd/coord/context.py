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

    def warn(self, message: str) -> None:
        self.warnings.append(message)
