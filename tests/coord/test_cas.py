"""cas_update: a plain `decide` on a local root runs read, decision and write in one round,
under the record's lock; an async one reads, decides and writes in separate calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcoordd.coord.cas import Keep, Put, cas_update
from agentcoordd.model.errors import OperationalError
from agentcoordd.store.local import LocalStore, LockBusy

PATH = "heartbeats/agent-a.json"


async def test_a_plain_decide_reads_and_writes_in_one_round(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.create(PATH, {"n": 0})
    before = store._rounds.rounds

    result = await cas_update(store, PATH, lambda current: Put({"n": current.data["n"] + 1}, "done"))

    assert result == "done"
    assert store._rounds.rounds - before == 1
    assert (await store.get(PATH)).data == {"n": 1}


async def test_a_plain_decide_holds_the_record_lock_so_no_writer_that_honours_it_races(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.create(PATH, {"n": 0})
    raced: list[str] = []

    def decide(current):  # another writer tries to slip in between the read and the write
        try:
            store.write_sync(PATH, {"n": 10}, current.version)
        except LockBusy:
            raced.append("waited")
        return Put({"n": current.data["n"] + 1}, "done")

    assert await cas_update(store, PATH, decide) == "done"
    assert raced == ["waited"]
    assert (await store.get(PATH)).data == {"n": 1}


async def test_an_async_decide_decides_again_after_a_lost_race(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.create(PATH, {"n": 0})
    seen: list[int] = []

    async def decide(current):  # another writer slips in after the first read
        seen.append(current.data["n"])
        if len(seen) == 1:
            await store.replace(PATH, {"n": 10}, current.version)
        return Put({"n": current.data["n"] + 1}, current.data["n"])

    assert await cas_update(store, PATH, decide) == 10
    assert seen == [0, 10]
    assert (await store.get(PATH)).data == {"n": 11}


async def test_an_async_decide_still_works_and_keep_writes_nothing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    version = await store.create(PATH, {"n": 0})

    async def decide(current):
        return Keep(current.data["n"])

    assert await cas_update(store, PATH, decide) == 0
    assert (await store.get(PATH)).version == version


async def test_persistent_contention_is_an_operational_error(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    await store.create(PATH, {"n": 0})

    async def always_lose(current):
        await store.replace(PATH, {"n": current.data["n"] + 1}, current.version)
        return Put({"n": -1}, None)

    with pytest.raises(OperationalError):
        await cas_update(store, PATH, always_lose, attempts=3)
    assert (await store.get(PATH)).data == {"n": 3}
