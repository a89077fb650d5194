"""How many connections the loopback HTTP server holds, and which it lets go.

* At most `limit` connections are open; at most `streams` of them are event
  streams (`/api/feed`), so the page, its API and `/metrics` always have the
  rest.
* A connection is *waiting* while no request of its is being served: reading
  a request (a slow client sending its head a byte at a time) or idle between
  keep-alive requests. Waiting is bounded (`REQUEST_TIMEOUT` from the end of
  the previous response, or from the accept), and when the server is full a
  newcomer takes the slot of the connection that has been waiting longest —
  a request that arrives whole is served however many connections sit idle.
* When every slot is serving (or streaming), a newcomer is answered `503`
  with `Retry-After` at once and closed: nothing queues for a slot.
* A stream's slot is freed when its client closes (the server watches the
  connection while it streams), not at the next keep-alive comment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import anyio

MAX_CONNECTIONS = 128
MAX_STREAMS = 32
REQUEST_TIMEOUT = 5.0  # a whole request (head and body), or an idle keep-alive connection
RETRY_AFTER_SECONDS = 1


@dataclass(eq=False)
class Slot:
    """One open connection. `scope` is cancelled when the server takes its slot back."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    waiting_since: float | None = None  # monotonic; None while a request is served
    streaming: bool = False

    def serving(self) -> None:
        self.waiting_since = None

    def waiting(self) -> None:
        self.waiting_since = time.monotonic()


class Slots:
    def __init__(self, limit: int = MAX_CONNECTIONS, streams: int = MAX_STREAMS) -> None:
        if not 0 < streams < limit:
            raise ValueError(f"event streams ({streams}) must leave room below the limit ({limit})")
        self.limit = limit
        self.stream_limit = streams
        self.open: set[Slot] = set()
        self.refused = 0
        self.evicted = 0

    @property
    def streams(self) -> int:
        return sum(1 for slot in self.open if slot.streaming)

    def admit(self) -> Slot | None:
        """A slot for a new connection (waiting), or None: refuse it (503)."""
        if len(self.open) >= self.limit:
            idle = [slot for slot in self.open if slot.waiting_since is not None]
            if not idle:
                self.refused += 1
                return None
            oldest = min(idle, key=lambda slot: slot.waiting_since or 0.0)
            self.release(oldest)
            oldest.scope.cancel()
            self.evicted += 1
        slot = Slot()
        slot.waiting()
        self.open.add(slot)
        return slot

    def start_stream(self, slot: Slot) -> bool:
        """Make `slot` an event stream; False when the stream limit is reached."""
        if self.streams >= self.stream_limit:
            self.refused += 1
            return False
        slot.streaming = True
        return True

    def release(self, slot: Slot) -> None:
        self.open.discard(slot)
        slot.streaming = False
