"""fsync_many: many files fsynced at once (Linux AIO, else a thread pool), one outcome each."""

from __future__ import annotations

import os
import platform
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentcoordd.store import fsyncs


def open_files(directory: Path, count: int) -> list[int]:
    fds = []
    for n in range(count):
        fd = os.open(directory / f"f{n}", os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"x" * 100)
        fds.append(fd)
    return fds


@pytest.fixture(params=["aio", "pool"])
def fsync_many(request, monkeypatch):
    if request.param == "pool":
        monkeypatch.setattr(fsyncs._fsyncs, "_aio", None)
    return fsyncs.fsync_many


def test_every_file_is_fsynced_and_answered_in_order(tmp_path, fsync_many):
    fds = open_files(tmp_path, 300)  # more than one AIO turn (AIO_EVENTS)
    try:
        assert fsync_many(fds) == [None] * 300
    finally:
        for fd in fds:
            os.close(fd)


def test_a_descriptor_that_cannot_fsync_gets_its_own_error(tmp_path, fsync_many):
    fds = open_files(tmp_path, 4)
    os.close(fds[2])  # EBADF for this one only
    try:
        results = fsync_many(fds)
    finally:
        for fd in fds[:2] + fds[3:]:
            os.close(fd)
    assert results[:2] == [None, None] and results[3] is None
    assert isinstance(results[2], OSError) and results[2].errno == 9


def test_threads_fsync_at_the_same_time_without_taking_each_others_answers(tmp_path, fsync_many):
    answers: dict[int, list[OSError | None]] = {}

    def worker(n: int) -> None:
        directory = tmp_path / str(n)
        directory.mkdir()
        fds = open_files(directory, 20)
        try:
            for _ in range(10):
                answers.setdefault(n, []).extend(fsync_many(fds))
        finally:
            for fd in fds:
                os.close(fd)

    with ThreadPoolExecutor(6) as pool:  # all at once; a thread's exception fails the test
        list(pool.map(worker, range(6)))
    assert {n: len(a) for n, a in answers.items()} == {n: 200 for n in range(6)}
    assert all(result is None for a in answers.values() for result in a)


@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"),
                    reason="Linux AIO fsync is used on x86_64 and aarch64 Linux only")
def test_linux_uses_aio_for_the_batch(tmp_path):
    """CI runs on Linux: the fast path is the one tested, not only the fallback."""
    fds = open_files(tmp_path, 8)
    try:
        assert fsyncs.fsync_many(fds) == [None] * 8
    finally:
        for fd in fds:
            os.close(fd)
    assert fsyncs.uses_aio()


def test_a_thread_that_gets_no_aio_context_uses_the_pool_and_the_others_keep_aio(tmp_path, monkeypatch):
    def no_context(self, *args):  # io_setup's EAGAIN: aio-max-nr reached
        self._ctx = None
        raise fsyncs._NoContext("Resource temporarily unavailable")

    monkeypatch.setattr(fsyncs._AioContext, "__init__", no_context)
    aio_before = fsyncs.uses_aio()
    fds = open_files(tmp_path, 4)
    answers = []
    try:
        worker = threading.Thread(target=lambda: answers.append(fsyncs.fsync_many(fds)))
        worker.start()
        worker.join()
    finally:
        for fd in fds:
            os.close(fd)
    assert answers == [[None] * 4]
    assert fsyncs.uses_aio() == aio_before
