"""One renewal scheduler for every keep-alive lane on the machine.

A timer queue (a heap of deadlines), not a task per lane. Deadlines are on a
suspend-aware clock (Linux CLOCK_BOOTTIME) passed in as `timer`; when the
timer jumped further than the loop slept, the machine was suspended, and every
lane is treated as due so each is checked before anything else happens.

The scheduler decides *when*; the `renew` callback decides *what* (it re-reads
and CAS-writes the heartbeat, and raises LaneEnded when the lane must stop).
With `renew_batch`, the lanes due in one wake are handed over together (the
daemon renews a local store's batch in one worker thread, one fsync per
directory) and each lane's outcome is settled the same way.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentcoordd.model.backoff import RENEWAL

JITTER = 0.10
DEFAULT_IDLE_TIMEOUT = 2 * 3600.0
# A loop that slept this much longer than it asked for was suspended.
SLEEP_SLACK_SECONDS = 5.0


@dataclass
class Lane:
    """A registered keep-alive lane as the scheduler sees it."""

    key: str
    ttl: float
    renew_every: float
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    touched: float = 0.0  # timer value of the last ctl call for this lane
    next_due: float = 0.0
    failures: int = 0
    state: str = "active"  # active | backoff | fenced | ended
    end_reason: str | None = None
    last_success: float | None = None
    last_error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.state in ("active", "backoff")


def jittered(interval: float, rng: random.Random) -> float:
    """interval ± 10 %."""
    return interval * rng.uniform(1.0 - JITTER, 1.0 + JITTER)


def backoff_delay(failures: int, ttl: float) -> float:
    """Exponential backoff after `failures` consecutive errors, capped below the TTL.

    The cap (a quarter of the TTL) leaves several retries before the heartbeat
    could expire, and never waits longer than the lease it protects.
    """
    cap = max(ttl / 4.0, 0.5)
    return min(RENEWAL.delay(max(failures, 1)), cap)


class Schedule:
    """The pure timer queue: which lane is due when. No I/O, no clock reads."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.lanes: dict[str, Lane] = {}
        # Lanes with a watched process: the pid check walks these, not every lane.
        self.watched: dict[str, Lane] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = 0
        self.rng = rng or random.Random()

    def _push(self, lane: Lane) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (lane.next_due, self._seq, lane.key))

    def add(self, lane: Lane, now: float, *, due_now: bool = False) -> None:
        lane.touched = lane.touched or now
        lane.next_due = now if due_now else now + jittered(lane.renew_every, self.rng)
        self.lanes[lane.key] = lane
        if lane.info.get("watch_pid"):
            self.watched[lane.key] = lane
        else:
            self.watched.pop(lane.key, None)
        self._push(lane)

    def touch(self, key: str, now: float) -> None:
        lane = self.lanes.get(key)
        if lane is not None:
            lane.touched = now

    def end(self, key: str, reason: str, state: str = "ended") -> Lane | None:
        lane = self.lanes.get(key)
        if lane is not None and lane.live:
            lane.state = state
            lane.end_reason = reason
        return lane

    def forget(self, key: str) -> Lane | None:
        self.watched.pop(key, None)
        return self.lanes.pop(key, None)

    def next_deadline(self) -> float | None:
        while self._heap:
            due, _, key = self._heap[0]
            lane = self.lanes.get(key)
            if lane is None or not lane.live or lane.next_due != due:
                heapq.heappop(self._heap)  # stale entry: lane ended or rescheduled
                continue
            return due
        return None

    def pop_due(self, now: float) -> list[Lane]:
        """Lanes due at `now`, removed from the queue until rescheduled."""
        due: list[Lane] = []
        while (deadline := self.next_deadline()) is not None and deadline <= now:
            _, _, key = heapq.heappop(self._heap)
            due.append(self.lanes[key])
        return due

    def idle(self, lane: Lane, now: float) -> bool:
        return now - lane.touched >= lane.idle_timeout

    def succeeded(self, lane: Lane, now: float, wall: float | None = None) -> None:
        lane.failures = 0
        lane.state = "active"
        lane.last_success = wall if wall is not None else now
        lane.next_due = now + jittered(lane.renew_every, self.rng)
        self._push(lane)

    def failed(self, lane: Lane, now: float, error: str) -> None:
        lane.failures += 1
        lane.state = "backoff"
        lane.last_error = error
        lane.next_due = now + backoff_delay(lane.failures, lane.ttl)
        self._push(lane)

    def all_due(self, now: float) -> None:
        """After a detected suspend: every live lane is checked right away."""
        for lane in self.lanes.values():
            if lane.live:
                lane.next_due = now
                self._push(lane)


def slept(asked: float, timer_elapsed: float) -> bool:
    """True when the suspend-aware timer advanced well past what the loop asked."""
    return timer_elapsed - asked > SLEEP_SLACK_SECONDS


Renew = Callable[[Lane], Awaitable[None]]
# One outcome per lane, in order: None for renewed, else the exception renew raised.
RenewBatch = Callable[[list[Lane]], Awaitable[list[BaseException | None]]]
OnEnd = Callable[[Lane], Awaitable[None]]


class RenewalLoop:
    """Drives a Schedule: sleeps until the next deadline, renews what is due.

    `renew(lane)` raises LaneEnded-like exceptions for permanent ends (their
    `reason`/`state` attributes are used) and anything else for a retryable
    backend error. `pid_alive(pid)` watches the lane's process when it has one.
    """

    def __init__(
        self,
        schedule: Schedule,
        *,
        timer: Callable[[], float],
        wall: Callable[[], float],
        renew: Renew,
        on_end: OnEnd,
        pid_alive: Callable[[int], bool],
        on_tick: Callable[[], None] | None = None,
        renew_batch: RenewBatch | None = None,
        batch_max: int = 64,
        concurrency: int = 64,
        max_sleep: float = 5.0,
        watch_interval: float = 0.0,
        min_sleep: float = 0.0,
    ) -> None:
        import anyio

        self.schedule = schedule
        self.timer = timer
        self.wall = wall
        self.renew = renew
        self.renew_batch = renew_batch
        self.batch_max = batch_max
        self.on_end = on_end
        self.pid_alive = pid_alive
        self.on_tick = on_tick
        self.max_sleep = max_sleep
        # Checking watched pids costs a kill(0) per watched lane: with thousands
        # of them and a wake per deadline, do it at most this often.
        self.watch_interval = watch_interval
        # Renew what is due in small batches instead of waking once per deadline
        # (thousands of lanes): a lane is at most min_sleep late.
        self.min_sleep = min_sleep
        self._last_watch_check: float | None = None
        self._limiter = anyio.CapacityLimiter(concurrency)
        self._wake = anyio.Event()
        self.suspends_detected = 0

    def wake(self) -> None:
        """Re-plan now (a lane was added, touched or stopped)."""
        self._wake.set()

    async def run(self) -> None:
        import anyio

        async with anyio.create_task_group() as tg:
            while True:
                deadline = self.schedule.next_deadline()
                now = self.timer()
                # Wake at least every max_sleep: watched pids and the watchdog need it.
                asked = self.max_sleep if deadline is None else min(max(deadline - now, 0.0), self.max_sleep)
                if 0.0 < asked < self.min_sleep:
                    asked = self.min_sleep
                with anyio.move_on_after(asked):
                    await self._wake.wait()
                self._wake = anyio.Event()
                after = self.timer()
                if slept(asked, after - now):
                    self.suspends_detected += 1
                    self.schedule.all_due(after)
                if self.on_tick:
                    self.on_tick()
                if self._last_watch_check is None or after - self._last_watch_check >= self.watch_interval:
                    self._last_watch_check = after
                    await self._check_watched(after)
                due: list[Lane] = []
                for lane in self.schedule.pop_due(after):
                    if self.schedule.idle(lane, after):
                        await self._end(lane, "idle_timeout")
                    else:
                        due.append(lane)
                if self.renew_batch is not None:
                    # Bounded batches: a burst (resume, suspend) still renews in parallel.
                    for start in range(0, len(due), self.batch_max):
                        tg.start_soon(self._renew_batch, due[start:start + self.batch_max])
                else:
                    for lane in due:
                        tg.start_soon(self._renew_one, lane)

    async def _check_watched(self, now: float) -> None:
        for lane in list(self.schedule.watched.values()):
            pid = lane.info.get("watch_pid")
            if lane.live and pid and not self.pid_alive(pid):
                await self._end(lane, "watched_process_exited")

    async def _end(self, lane: Lane, reason: str, state: str = "ended") -> None:
        self.schedule.end(lane.key, reason, state)
        await self.on_end(lane)

    async def _renew_one(self, lane: Lane) -> None:
        async with self._limiter:
            if not lane.live:
                return
            try:
                await self.renew(lane)
            except Exception as exc:  # noqa: BLE001 - classified below, never kills the loop
                await self._settle(lane, exc)
                return
            await self._settle(lane, None)

    async def _renew_batch(self, lanes: list[Lane]) -> None:
        assert self.renew_batch is not None
        async with self._limiter:
            lanes = [lane for lane in lanes if lane.live]
            try:
                outcomes = await self.renew_batch(lanes)
            except Exception as exc:  # noqa: BLE001 - the whole batch failed: each lane backs off
                outcomes = [exc] * len(lanes)
            for lane, outcome in zip(lanes, outcomes, strict=True):
                await self._settle(lane, outcome)

    async def _settle(self, lane: Lane, error: BaseException | None) -> None:
        """Reschedule, back off or end `lane` after its renewal finished."""
        if not lane.live:
            return  # ended (released, stopped, …) while the renewal ran
        if error is not None:
            reason = getattr(error, "reason", None)
            if reason is not None:
                await self._end(lane, reason, "fenced" if reason == "fenced" else "ended")
                return
            self.schedule.failed(lane, self.timer(), getattr(error, "message", None) or repr(error))
            return
        if self.schedule.lanes.get(lane.key) is not lane:
            return  # replaced while the renewal ran: never revive it
        self.schedule.succeeded(lane, self.timer(), self.wall())
