"""What every use case receives: a store, a clock and the caller's identity."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentcoordd.model.identity import Identity
from agentcoordd.store.base import Store

if TYPE_CHECKING:
    from agentcoordd.coord.closeout import StampQueue


class Clock(Protocol):
    def now(self) -> dt.datetime: ...


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
    # The daemon's shared lane-stamp group commit (closeout); None: stamp directly.
    stamps: StampQueue | None = None

    def warn(self, message: str) -> None:
        self.warnings.append(message)
