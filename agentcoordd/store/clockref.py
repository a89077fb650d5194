"""A remote backend's clock, as its HTTP responses tell it.

Every response of the Worker and of etcd's JSON gateway passes `observe`:
our Worker stamps `X-Agentcoord-Time` (Unix milliseconds), any HTTP server a
`Date` header (seconds). Those samples feed an OffsetEstimate
(model/clockskew.py), so measuring costs no request of its own; `probe` makes
one cheap request when no response was seen for a while.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Awaitable, Callable, Mapping

from agentcoordd.model.clockskew import Offset, OffsetEstimate

TIME_HEADER = "x-agentcoord-time"
# A probe is due when the last sample is older than this (a busy backend needs none).
STALE_SECONDS = 30.0


class ResponseClock:
    """The Store capability `ClockReference` of a store speaking HTTP."""

    def __init__(self, probe: Callable[[], Awaitable[object]]) -> None:
        self._probe = probe
        self._estimate = OffsetEstimate()
        self._date_text = ""
        self._date_value = 0.0

    def observe(self, headers: Mapping[str, str], sent: float, received: float) -> None:
        """One response's stamp; sent/received on this machine's wall clock."""
        try:
            stamp = headers.get(TIME_HEADER)
            if stamp is not None:
                server, resolution = int(stamp) / 1000.0, 0.001
            else:
                date = headers.get("date")
                if not date:
                    return
                if date != self._date_text:  # parsed once per second of server time
                    self._date_value = email.utils.parsedate_to_datetime(date).timestamp()
                    self._date_text = date
                server, resolution = self._date_value, 1.0
        except (TypeError, ValueError, IndexError, OverflowError):
            return  # a stamp we cannot read measures nothing
        self._estimate.add(sent=sent, received=received, server=server, resolution=resolution,
                           at=time.monotonic())

    def offset(self) -> Offset | None:
        return self._estimate.current()

    async def measured(self) -> Offset | None:
        """The offset, probing the backend first when the last sample is stale."""
        current = self._estimate.current()
        if current is None or time.monotonic() - current.measured_at > STALE_SECONDS:
            try:
                await self._probe()
            except Exception:  # noqa: BLE001 - an unreachable backend: what we had is all we know
                pass
            current = self._estimate.current()
        return current
