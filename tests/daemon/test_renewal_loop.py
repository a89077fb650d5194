"""RenewalLoop details the daemon relies on: an ended or replaced lane is never
revived by a renewal that was in flight."""

from __future__ import annotations

import random

from agentcoordd.daemon.renewal import Lane, RenewalLoop, Schedule


class Timer:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _loop(schedule: Schedule, timer: Timer, renew, pid_alive=lambda pid: True, **kw) -> RenewalLoop:
    async def on_end(lane: Lane) -> None:
        return None

    return RenewalLoop(schedule, timer=timer, wall=lambda: 0.0, renew=renew, on_end=on_end,
                       pid_alive=pid_alive, **kw)


async def test_a_lane_ended_while_its_renewal_ran_is_not_revived() -> None:
    schedule, timer = Schedule(random.Random(1)), Timer()
    lane = Lane(key="a", ttl=30.0, renew_every=10.0)
    schedule.add(lane, timer(), due_now=True)

    async def renew(item: Lane) -> None:
        schedule.end("a", "released")  # e.g. a release request landed meanwhile

    loop = _loop(schedule, timer, renew)
    [due] = schedule.pop_due(timer())
    await loop._renew_one(due)
    assert (lane.state, lane.end_reason) == ("ended", "released")
    assert schedule.next_deadline() is None


async def test_a_replaced_lane_is_not_rescheduled_by_the_old_renewal() -> None:
    schedule, timer = Schedule(random.Random(1)), Timer()
    old = Lane(key="a", ttl=30.0, renew_every=10.0)
    schedule.add(old, timer(), due_now=True)
    new = Lane(key="a", ttl=30.0, renew_every=10.0)

    async def renew(item: Lane) -> None:
        schedule.forget("a")
        schedule.add(new, timer())

    loop = _loop(schedule, timer, renew)
    [due] = schedule.pop_due(timer())
    await loop._renew_one(due)
    assert old.last_success is None and schedule.lanes["a"] is new
