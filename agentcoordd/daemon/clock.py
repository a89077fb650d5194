"""The real clocks; everything below the daemon gets them injected."""

from __future__ import annotations

import datetime as dt
import time

UTC = dt.timezone.utc


class SystemClock:
    """Wall-clock time for record timestamps."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(UTC)


def boottime() -> float:
    """Seconds on a clock that keeps counting through suspend (Linux BOOTTIME)."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clock) if clock is not None else time.monotonic()
