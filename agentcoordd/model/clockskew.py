"""How far our clock is from a backend's, from the times its responses carry.

A response stamped with the server's time S (to a resolution r: an HTTP `Date`
header says the second, our Worker's `X-Agentcoord-Time` the millisecond) that
we sent at local time t0 and received at t1 tells us the server's clock minus
ours lies in [S - t1, S + r - t0]: the server stamped it somewhere inside our
round trip. Intersecting the intervals of recent samples narrows that to
about the shortest round trip. A sample that contradicts the intersection (a
clock was stepped on either side) starts it again. Pure: the caller passes
every time.
"""

from __future__ import annotations

from dataclasses import dataclass

# Samples older than this no longer narrow the estimate: clocks drift and get stepped.
WINDOW_SECONDS = 600.0


@dataclass(frozen=True)
class Offset:
    """Our clock minus the backend's (positive: ours is ahead): `seconds`, the middle of
    what the samples allow, give or take `uncertainty`; `measured_at` is the local
    monotonic time of the last sample."""

    seconds: float
    uncertainty: float
    measured_at: float

    def certainly_beyond(self, bound: float) -> bool:
        """Every offset the samples allow is further from zero than `bound`."""
        return abs(self.seconds) - self.uncertainty > bound


class OffsetEstimate:
    """The intersection of recent samples' offset intervals."""

    def __init__(self, window: float = WINDOW_SECONDS) -> None:
        self.window = window
        self._low = 0.0
        self._high = 0.0
        self._since: float | None = None  # monotonic time the intersection started
        self._last: float | None = None

    def add(self, *, sent: float, received: float, server: float, resolution: float,
            at: float) -> None:
        """One response: sent/received on our wall clock, `server` its stamp, `at` our
        monotonic time (for the window)."""
        low, high = server - received, server + resolution - sent
        if high < low:  # a clock moved inside the round trip: this sample says nothing
            return
        fresh = self._since is None or at - self._since > self.window
        if not fresh and (high < self._low or low > self._high):
            fresh = True  # contradicts what we knew: a clock was stepped
        if fresh:
            self._low, self._high, self._since = low, high, at
        else:
            self._low, self._high = max(self._low, low), min(self._high, high)
        self._last = at

    def current(self) -> Offset | None:
        if self._last is None:
            return None
        # the samples bound the server's clock minus ours; an Offset is ours minus the server's
        return Offset(seconds=-(self._low + self._high) / 2,
                      uncertainty=(self._high - self._low) / 2, measured_at=self._last)
