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


class Ended(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def test_a_batch_settles_each_lane_by_its_own_outcome() -> None:
    schedule, timer = Schedule(random.Random(1)), Timer()
    lanes = {key: Lane(key=key, ttl=30.0, renew_every=10.0) for key in ("ok", "fenced", "down", "gone")}
    for lane in lanes.values():
        schedule.add(lane, timer(), due_now=True)
    batches: list[list[str]] = []

    async def renew_batch(batch: list[Lane]) -> list[BaseException | None]:
        batches.append([lane.key for lane in batch])
        schedule.end("gone", "stopped")  # ended while the batch ran: not revived
        outcome = {"ok": None, "fenced": Ended("fenced"), "down": OSError("disk gone"), "gone": None}
        return [outcome[lane.key] for lane in batch]

    async def renew(lane: Lane) -> None:
        raise AssertionError("batch mode renews through renew_batch only")

    loop = _loop(schedule, timer, renew, renew_batch=renew_batch)
    await loop._renew_batch(schedule.pop_due(timer()))
    assert sorted(batches[0]) == ["down", "fenced", "gone", "ok"]
    assert lanes["ok"].state == "active" and lanes["ok"].last_success == 0.0
    assert 100.0 + 9.0 <= lanes["ok"].next_due <= 100.0 + 11.0
    assert (lanes["fenced"].state, lanes["fenced"].end_reason) == ("fenced", "fenced")
    assert lanes["down"].state == "backoff" and "disk gone" in lanes["down"].last_error
    assert lanes["down"].next_due == 100.0 + 1.0
    assert (lanes["gone"].state, lanes["gone"].last_success) == ("ended", None)


async def test_a_failing_batch_backs_off_every_lane_in_it() -> None:
    schedule, timer = Schedule(random.Random(1)), Timer()
    for key in ("a", "b"):
        schedule.add(Lane(key=key, ttl=30.0, renew_every=10.0), timer(), due_now=True)

    async def renew_batch(batch: list[Lane]) -> list[BaseException | None]:
        raise OSError("cannot sync heartbeats")

    loop = _loop(schedule, timer, lambda lane: None, renew_batch=renew_batch)
    await loop._renew_batch(schedule.pop_due(timer()))
    assert [lane.state for lane in schedule.lanes.values()] == ["backoff", "backoff"]
    assert schedule.next_deadline() == 101.0


async def test_due_lanes_are_handed_over_in_bounded_batches() -> None:
    import anyio

    schedule, timer = Schedule(random.Random(1)), Timer()
    for n in range(10):
        schedule.add(Lane(key=f"l{n}", ttl=30.0, renew_every=10.0), timer(), due_now=True)
    sizes: list[int] = []

    async def renew_batch(batch: list[Lane]) -> list[BaseException | None]:
        sizes.append(len(batch))
        return [None] * len(batch)

    loop = _loop(schedule, timer, lambda lane: None, renew_batch=renew_batch, batch_max=4,
                 min_sleep=0.0, max_sleep=0.01)
    with anyio.move_on_after(0.5):
        await loop.run()
    assert sorted(sizes) == [2, 4, 4]
    assert all(lane.state == "active" and lane.last_success is not None for lane in schedule.lanes.values())


async def test_the_pid_check_asks_only_about_watched_lanes_and_ends_the_dead_ones() -> None:
    schedule, timer = Schedule(random.Random(1)), Timer()
    for n in range(1000):
        schedule.add(Lane(key=f"plain-{n}", ttl=30.0, renew_every=10.0), timer())
    watched = Lane(key="w", ttl=30.0, renew_every=10.0, info={"watch_pid": 4242})
    schedule.add(watched, timer())
    # Re-registered without a watched process: no longer checked.
    schedule.add(Lane(key="r", ttl=30.0, renew_every=10.0, info={"watch_pid": 4343}), timer())
    schedule.forget("r")
    schedule.add(Lane(key="r", ttl=30.0, renew_every=10.0), timer())
    asked: list[int] = []

    def pid_alive(pid: int) -> bool:
        asked.append(pid)
        return False

    loop = _loop(schedule, timer, renew=None, pid_alive=pid_alive)
    await loop._check_watched(timer())
    assert asked == [4242]
    assert (watched.state, watched.end_reason) == ("ended", "watched_process_exited")
    assert all(lane.live for key, lane in schedule.lanes.items() if key != "w")
    schedule.forget("w")
    asked.clear()
    await loop._check_watched(timer())
    assert asked == [] and "w" not in schedule.watched
