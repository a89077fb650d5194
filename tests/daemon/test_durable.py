"""daemon/durable.py Saves: a caller's exit 0 waits for a save that covers its change;
a failed save is its caller's exit 2 and is retried; a stopped saver never strands a
waiter (the daemon's shutdown cancels it before in-flight requests drain)."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from agentcoordd.daemon.durable import Saves, StateDirError


class Target:
    """What is saved: a counter, written to a file (or failing like a full disk)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.value = 0
        self.full = False
        self.writes = 0

    def write(self, value: int) -> None:
        self.writes += 1
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.path.write_text(str(value))


def _saves(target: Target) -> Saves[int]:
    return Saves(lambda: target.value, target.write, directory=target.path.parent, what="the test file",
                 interval=0.25, cost_factor=20, retry=0.2)


@contextlib.asynccontextmanager
async def running(saves: Saves[int]) -> AsyncIterator[None]:
    """The saver's loop for the block, stopped (cancelled, as at shutdown) after it."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(saves.run)
        yield
        tg.cancel_scope.cancel()


async def test_durable_returns_once_a_save_covers_the_change(tmp_path: Path) -> None:
    target = Target(tmp_path / "f")
    saves = _saves(target)
    async with running(saves):
        for n in range(1, 4):
            target.value = n
            saves.changed()
            await saves.durable()
            assert target.path.read_text() == str(n)  # on disk when durable() returned


async def test_a_failed_save_is_a_state_dir_error_and_is_retried_until_it_lands(tmp_path: Path) -> None:
    target = Target(tmp_path / "f")
    saves = _saves(target)
    async with running(saves):
        target.full, target.value = True, 7
        saves.changed()
        with pytest.raises(StateDirError, match="is full"):
            await saves.durable()
        target.full = False  # space comes back: nobody calls again, the file catches up
        with anyio.fail_after(5):
            while not target.path.exists():
                await anyio.sleep(0.05)
        assert target.path.read_text() == "7"


async def test_a_waiter_is_not_stranded_when_the_saver_stops(tmp_path: Path) -> None:
    target = Target(tmp_path / "f")
    saves = _saves(target)
    async with running(saves):  # then the daemon's shutdown cancels the saver
        await anyio.sleep(0.05)
    target.value = 3
    saves.changed()
    with anyio.fail_after(5):
        await saves.durable()  # saves by itself
    assert target.path.read_text() == "3"


async def test_a_waiter_of_a_save_cut_short_by_shutdown_saves_by_itself(tmp_path: Path) -> None:
    import time

    target = Target(tmp_path / "f")
    slow = target.write

    def write(value: int) -> None:
        time.sleep(0.3)
        slow(value)

    saves = Saves(lambda: target.value, write, directory=tmp_path, what="the test file",
                  interval=0.25, cost_factor=20)
    waited: list[bool] = []

    async def waiter() -> None:
        await saves.durable()
        waited.append(True)

    async with anyio.create_task_group() as outer:
        async with anyio.create_task_group() as tg:
            tg.start_soon(saves.run)
            target.value = 5
            saves.changed()
            outer.start_soon(waiter)
            await anyio.sleep(0.1)  # the save is in its thread
            tg.cancel_scope.cancel()
        with anyio.fail_after(5):
            while not waited:
                await anyio.sleep(0.05)
    assert target.path.read_text() == "5" and waited == [True]
