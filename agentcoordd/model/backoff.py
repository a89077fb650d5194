"""Every retry schedule of agentcoord, in one place (pure: no sleeping here).

`Backoff.delay(n)` is the pause before retry `n` (1 for the first retry):
`first * factor**(n - 1)`, at most `cap`; with `jitter` a uniform draw in
[0, that], so the losers of a hot record spread out instead of colliding again.
"""

from __future__ import annotations

import random

import msgspec


class Backoff(msgspec.Struct, frozen=True):  # a Struct: no dataclasses import on ctl start-up
    first: float
    cap: float
    factor: float = 2.0
    jitter: bool = False

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        if retry < 1:
            return 0.0
        exponent = min(retry - 1, 64)  # beyond this every schedule is at its cap
        pause = min(self.first * self.factor ** exponent, self.cap)
        if self.jitter:
            return (rng or random).uniform(0.0, pause)
        return pause


# A lost compare-and-swap race re-reads and decides again (coord/cas.py).
CAS = Backoff(first=0.008, cap=0.25, jitter=True)
# A batch manifest every lane of the batch rewrites is hotter than a claim.
MANIFEST_CAS = Backoff(first=0.008, cap=0.5, jitter=True)
# A keep-alive lane's failed renewal (further capped at a quarter of its TTL).
RENEWAL = Backoff(first=1.0, cap=float("inf"))
# The claim of a lane whose watched process exited, released while the backend does not
# answer: soon again, at most every 30 s (the target stays blocked meanwhile).
RELEASE_RETRY = Backoff(first=0.5, cap=30.0)
# An outbox entry after k failed deliveries waits 2**k s, at most 5 minutes.
OUTBOX = Backoff(first=2.0, cap=300.0)
# A read the Worker did not answer (only idempotent requests are retried).
HTTP_RETRY = Backoff(first=0.05, cap=float("inf"), factor=4.0)
# A round over every etcd endpoint that failed.
ETCD_ROUND = Backoff(first=0.1, cap=1.0)
# A busy record lock: tried briefly in the worker thread, then waited for from
# the event loop (store/local.py).
LOCK_SPIN = Backoff(first=0.0005, cap=0.008)
LOCK_WAIT = Backoff(first=0.002, cap=0.05)
# ctl: a daemon's full listen backlog, and a daemon that is still starting.
CONNECT = Backoff(first=0.001, cap=0.05)
AUTOSTART = Backoff(first=0.005, cap=0.1)
