"""The renewal timer queue on a fake timer: jitter, backoff, idle, sleep, scale."""

from __future__ import annotations

import random

import pytest

from agentcoordd.daemon.renewal import (
    JITTER,
    Lane,
    Schedule,
    backoff_delay,
    jittered,
    slept,
)


def lane(key: str = "a", ttl: float = 120.0, every: float = 40.0, **kw) -> Lane:
    return Lane(key=key, ttl=ttl, renew_every=every, **kw)


def test_jitter_stays_within_ten_percent() -> None:
    rng = random.Random(7)
    values = [jittered(100.0, rng) for _ in range(10_000)]
    assert min(values) >= 100.0 * (1 - JITTER)
    assert max(values) <= 100.0 * (1 + JITTER)
    assert max(values) - min(values) > 15.0  # it really spreads


def test_backoff_doubles_and_is_capped_below_the_ttl() -> None:
    delays = [backoff_delay(n, ttl=120.0) for n in range(1, 10)]
    assert delays[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert max(delays) == 30.0 < 120.0
    assert backoff_delay(50, ttl=1.0) < 1.0


def test_lane_is_due_after_its_interval_and_rescheduled_on_success() -> None:
    schedule = Schedule(random.Random(1))
    a = lane()
    schedule.add(a, now=0.0)
    assert schedule.pop_due(30.0) == []
    assert schedule.pop_due(44.0) == [a]
    schedule.succeeded(a, now=44.0)
    assert 44.0 + 36.0 <= a.next_due <= 44.0 + 44.0
    assert schedule.pop_due(60.0) == []


def test_failures_back_off_then_success_resets() -> None:
    schedule = Schedule(random.Random(1))
    a = lane()
    schedule.add(a, now=0.0, due_now=True)
    [due] = schedule.pop_due(0.0)
    schedule.failed(due, now=0.0, error="boom")
    assert a.state == "backoff" and a.next_due == 1.0 and a.last_error == "boom"
    schedule.pop_due(1.0)
    schedule.failed(a, now=1.0, error="boom")
    assert a.next_due == 3.0
    schedule.pop_due(3.0)
    schedule.succeeded(a, now=3.0)
    assert a.failures == 0 and a.state == "active"


def test_idle_timeout_counts_from_the_last_touch() -> None:
    schedule = Schedule()
    a = lane(idle_timeout=100.0)
    schedule.add(a, now=0.0)
    assert not schedule.idle(a, 99.0)
    schedule.touch("a", 50.0)
    assert not schedule.idle(a, 149.0)
    assert schedule.idle(a, 150.0)


def test_ended_lanes_leave_the_queue() -> None:
    schedule = Schedule()
    a, b = lane("a"), lane("b")
    schedule.add(a, now=0.0, due_now=True)
    schedule.add(b, now=0.0, due_now=True)
    schedule.end("a", "released")
    assert schedule.pop_due(0.0) == [b]
    assert a.state == "ended" and a.end_reason == "released"


def test_sleep_detection_makes_every_lane_due() -> None:
    assert not slept(asked=5.0, timer_elapsed=5.2)
    assert slept(asked=5.0, timer_elapsed=3600.0)
    schedule = Schedule()
    lanes = [lane(str(i)) for i in range(5)]
    for item in lanes:
        schedule.add(item, now=0.0)
    schedule.all_due(3600.0)
    assert sorted(x.key for x in schedule.pop_due(3600.0)) == sorted(x.key for x in lanes)


@pytest.mark.parametrize("count", [10_000])
def test_thousands_of_lanes_each_renew_once_per_interval(count: int) -> None:
    schedule = Schedule(random.Random(3))
    for i in range(count):
        schedule.add(lane(str(i), ttl=120.0, every=40.0), now=0.0)
    renewed: dict[str, int] = {}
    now = 0.0
    while now < 400.0:
        now += 0.5
        for item in schedule.pop_due(now):
            renewed[item.key] = renewed.get(item.key, 0) + 1
            schedule.succeeded(item, now)
    # every lane renewed about every 40 s (±10 %): 9 or 10 times in 400 s, never missed
    assert set(renewed.values()) <= {9, 10, 11}
    assert len(renewed) == count
