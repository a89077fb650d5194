"""SharedReads: concurrent pollers share a read for a moment; errors are never shared."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from agentcoordd.daemon.recent import RecentReads, SharedReads
from agentcoordd.store.base import InvalidRecord
from agentcoordd.store.local import LocalStore


class Timer:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "state")


async def test_concurrent_gets_share_one_read_until_it_is_too_old(store: LocalStore) -> None:
    await store.create("batches/b.json", {"batch_id": "b", "n": 1})
    timer = Timer()
    shared = SharedReads(store, max_age=0.25, timer=timer)
    answers = []

    async def poll() -> None:
        answers.append((await shared.get("batches/b.json")).data)

    async with anyio.create_task_group() as tg:
        for _ in range(50):
            tg.start_soon(poll)
    assert answers == [{"batch_id": "b", "n": 1}] * 50
    assert shared.reads == 1
    version = (await store.get("batches/b.json")).version
    await store.replace("batches/b.json", {"batch_id": "b", "n": 2}, version)
    assert (await shared.get("batches/b.json")).data["n"] == 1  # still fresh enough
    timer.now += 0.25
    assert (await shared.get("batches/b.json")).data["n"] == 2
    assert shared.reads == 2
    assert await shared.get("batches/none.json") is None  # a missing record is an answer too
    assert await shared.get("batches/none.json") is None
    assert shared.reads == 3


async def test_a_failed_read_is_not_shared(store: LocalStore) -> None:
    bad = store.root / "batches" / "bad.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    shared = SharedReads(store, timer=Timer())
    for _ in range(3):
        with pytest.raises(InvalidRecord):
            await shared.get("batches/bad.json")
    assert shared.reads == 3


def test_one_view_per_store_and_other_calls_reach_the_store(store: LocalStore, tmp_path: Path) -> None:
    recent = RecentReads()
    view = recent.reads_of(store)
    assert recent.reads_of(store) is view
    assert recent.reads_of(LocalStore(tmp_path / "other")) is not view
    assert view.name == store.name  # delegated


async def test_single_flight_shares_one_call_and_never_a_failure() -> None:
    from agentcoordd.daemon.recent import SingleFlight

    flight = SingleFlight()
    calls: list[str] = []
    gate = anyio.Event()

    async def slow(label: str):
        calls.append(label)
        await gate.wait()
        return {"answer": label}

    answers = []

    async def ask(label: str) -> None:
        answers.append(await flight.do("k", lambda: slow(label)))

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(ask, f"c{n}")
        await anyio.sleep(0.05)
        gate.set()
    assert calls == ["c0"] and answers == [{"answer": "c0"}] * 20

    attempts: list[int] = []

    async def failing_once():
        attempts.append(1)
        await anyio.sleep(0.01)
        if len(attempts) == 1:
            raise OSError("backend down")
        return "ok"

    results: list[object] = []

    async def try_it() -> None:
        try:
            results.append(await flight.do("f", failing_once))
        except OSError as exc:
            results.append(str(exc))

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(try_it)
    assert sorted(map(str, results)) == ["backend down"] + ["ok"] * 4
    assert len(attempts) == 2  # the failure was not shared; one retry served the rest


async def test_a_write_of_this_daemon_is_seen_by_the_next_poll(store: LocalStore) -> None:
    """Read your writes: after forget (a command of this daemon wrote), no read, listing or
    shared answer made before it is served, and one in flight across it is not kept."""
    await store.create("batches/b.json", {"batch_id": "b", "n": 1})
    timer = Timer()
    views = RecentReads()
    shared = views.reads_of(store)
    shared.timer = shared.results.timer = timer
    assert (await shared.get("batches/b.json")).data["n"] == 1
    assert [e.data["n"] for e in (await shared.list("batches")).entries] == [1]
    assert await shared.results.share("k", lambda: _value(1)) == 1
    version = (await store.get("batches/b.json")).version
    await store.replace("batches/b.json", {"batch_id": "b", "n": 2}, version)
    views.forget(store)  # still within max_age: without it, all three would be the old ones
    assert (await shared.get("batches/b.json")).data["n"] == 2
    assert [e.data["n"] for e in (await shared.list("batches")).entries] == [2]
    assert await shared.results.share("k", lambda: _value(2)) == 2

    release = anyio.Event()

    async def slow() -> int:
        await release.wait()
        return 3

    async with anyio.create_task_group() as tg:
        tg.start_soon(shared.results.share, "slow", slow)
        await anyio.sleep(0.01)
        views.forget(store)  # a write finished while that answer was being computed
        release.set()
    assert await shared.results.share("slow", lambda: _value(4)) == 4  # not the one begun before


async def _value(n: int) -> int:
    return n
