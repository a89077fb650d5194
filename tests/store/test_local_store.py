"""LocalStore specifics: the existing tool's on-disk format, locking and fail-closed paths."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest

from agentcoordd.store.base import (
    Conflict,
    Create,
    Delete,
    Forbidden,
    Get,
    InvalidPath,
    InvalidRecord,
    NotFound,
    Replace,
    Unavailable,
    list_all,
)
from agentcoordd.store.local import LocalStore, LockBusy

CLAIM = "claims/acme/widgets/1.json"
RECORD = {"schema_version": 1, "agent_id": "agent-a", "status": "active", "targets": [], "meta": {}}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def store(root: Path) -> LocalStore:
    return LocalStore(root)


def leftovers(root: Path) -> list[str]:
    """Temp files of writes (hidden `.<name>.tmp-*` files) anywhere below the root."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob(".*") if ".tmp-" in p.name)


# ---- format and versions -----------------------------------------------------------


async def test_records_are_pretty_json_with_two_space_indent_and_a_newline(store, root):
    await store.create(CLAIM, RECORD)
    expected = json.dumps(RECORD, indent=2, ensure_ascii=False) + "\n"
    assert (root / CLAIM).read_text() == expected


async def test_version_is_the_sha256_of_the_file_bytes(store, root):
    created = await store.create(CLAIM, RECORD)
    digest = hashlib.sha256((root / CLAIM).read_bytes()).hexdigest()
    assert created == digest
    assert (await store.get(CLAIM)).version == digest


async def test_get_returns_the_data_and_none_when_missing(store):
    assert await store.get(CLAIM) is None
    await store.create(CLAIM, RECORD)
    assert (await store.get(CLAIM)).data == RECORD


async def test_create_is_create_only(store):
    await store.create(CLAIM, RECORD)
    with pytest.raises(Conflict) as excinfo:
        await store.create(CLAIM, {"other": 1})
    assert excinfo.value.kind == "already_exists"
    assert (await store.get(CLAIM)).data == RECORD


async def test_replace_is_compare_and_swap(store):
    first = await store.create(CLAIM, RECORD)
    second = await store.replace(CLAIM, {"v": 2}, first)
    with pytest.raises(Conflict) as excinfo:
        await store.replace(CLAIM, {"v": 3}, first)
    assert excinfo.value.kind == "version_conflict"
    assert (await store.get(CLAIM)) .version == second


async def test_replace_of_a_missing_record_is_not_found(store):
    with pytest.raises(NotFound):
        await store.replace(CLAIM, RECORD, "0" * 64)


async def test_delete_is_compare_and_swap(store):
    version = await store.create(CLAIM, RECORD)
    with pytest.raises(Conflict):
        await store.delete(CLAIM, "0" * 64)
    await store.delete(CLAIM, version)
    assert await store.get(CLAIM) is None
    with pytest.raises(NotFound):
        await store.delete(CLAIM, version)


# ---- lock files and temp files -----------------------------------------------------


async def test_every_write_leaves_an_empty_lock_file_next_to_the_record(store, root):
    await store.create(CLAIM, RECORD)
    lock = root / (CLAIM + ".lock")
    assert lock.is_file() and lock.stat().st_size == 0


async def test_lock_file_is_never_unlinked_also_after_delete(store, root):
    version = await store.create(CLAIM, RECORD)
    lock = root / (CLAIM + ".lock")
    inode = lock.stat().st_ino
    version = await store.replace(CLAIM, {"v": 2}, version)
    await store.delete(CLAIM, version)
    assert not (root / CLAIM).exists()
    assert lock.stat().st_ino == inode


async def test_successful_writes_leave_no_temp_files(store, root):
    version = await store.create(CLAIM, RECORD)
    for n in range(5):
        version = await store.replace(CLAIM, {"n": n}, version)
    assert leftovers(root) == []


async def test_a_failed_rename_removes_its_temp_file(store, root, monkeypatch):
    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(Exception) as excinfo:
        await store.create(CLAIM, RECORD)
    assert excinfo.value.exit_code == 2
    assert CLAIM in str(excinfo.value)
    assert leftovers(root) == []
    assert not (root / CLAIM).exists()


# ---- listing -------------------------------------------------------------------------


async def test_list_returns_records_in_path_order_with_cursor_paging(store):
    paths = [f"heartbeats/agent-{n:02d}.json" for n in range(7)]
    for path in reversed(paths):
        await store.create(path, {"p": path})
    first = await store.list("heartbeats", limit=3)
    assert [e.path for e in first.entries] == paths[:3]
    assert first.next_cursor == paths[2]
    rest = await store.list("heartbeats", cursor=first.next_cursor)
    assert [e.path for e in rest.entries] == paths[3:]
    assert rest.next_cursor is None and not rest.partial
    assert [e.data["p"] for e in (await list_all(store, "heartbeats")).entries] == paths


async def test_list_walks_below_the_prefix_and_skips_lock_and_temp_files(store, root):
    await store.create("events/b1/e1.json", {"n": 1})
    await store.create("events/b2/e2.json", {"n": 2})
    (root / "events/b1/.e3.json.tmp-1-abcd").write_text("{half")
    page = await store.list("events")
    assert [e.path for e in page.entries] == ["events/b1/e1.json", "events/b2/e2.json"]
    assert [e.path for e in (await store.list("events/b2")).entries] == ["events/b2/e2.json"]


async def test_list_of_a_missing_family_is_empty(store):
    page = await store.list("batches")
    assert page.entries == [] and page.next_cursor is None


async def test_list_entry_versions_match_get(store):
    await store.create(CLAIM, RECORD)
    (entry,) = (await store.list("claims")).entries
    assert entry.version == (await store.get(CLAIM)).version


# ---- invalid records and paths -------------------------------------------------------


async def test_invalid_json_record_is_an_error_naming_its_path(store, root):
    (root / "claims/acme/widgets").mkdir(parents=True)
    (root / CLAIM).write_text("{not json")
    with pytest.raises(InvalidRecord) as excinfo:
        await store.get(CLAIM)
    assert CLAIM in str(excinfo.value) and excinfo.value.exit_code == 2
    with pytest.raises(InvalidRecord, match=CLAIM):
        await store.list("claims")


@pytest.mark.parametrize("path", ["../x.json", "claims/../../x.json", "/etc/passwd", "claims/a\x00.json", "other/x.json"])
async def test_paths_outside_the_grammar_are_usage_errors_and_touch_nothing(store, root, path):
    with pytest.raises(InvalidPath) as excinfo:
        await store.create(path, RECORD)
    assert excinfo.value.exit_code == 1
    assert list(root.iterdir()) == []


# ---- symlinks fail closed ------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    (path / "acme/widgets").mkdir(parents=True)
    (path / "acme/widgets/1.json").write_text(json.dumps(RECORD))
    return path


async def test_the_root_itself_may_be_a_symlink(tmp_path, root):
    link = tmp_path / "root-link"
    link.symlink_to(root)
    linked = LocalStore(link)
    await linked.create(CLAIM, RECORD)
    assert (await linked.get(CLAIM)).data == RECORD
    assert (root / CLAIM).is_file()


def plant_family_link(root: Path, outside: Path) -> None:
    (root / "claims").symlink_to(outside)


def plant_directory_link(root: Path, outside: Path) -> None:
    (root / "claims").mkdir()
    (root / "claims/acme").symlink_to(outside / "acme")


def plant_record_link(root: Path, outside: Path) -> None:
    (root / "claims/acme/widgets").mkdir(parents=True)
    (root / CLAIM).symlink_to(outside / "acme/widgets/1.json")


SYMLINK_LEVELS = [
    pytest.param(plant_family_link, "claims", id="family"),
    pytest.param(plant_directory_link, "claims/acme", id="directory"),
    pytest.param(plant_record_link, CLAIM, id="record"),
]


@pytest.mark.parametrize(("plant", "named"), SYMLINK_LEVELS)
async def test_symlink_below_the_root_fails_closed_on_read(store, root, outside, plant, named):
    plant(root, outside)
    with pytest.raises(Forbidden) as excinfo:
        await store.get(CLAIM)
    assert named in str(excinfo.value) and excinfo.value.exit_code == 2


@pytest.mark.parametrize(("plant", "named"), SYMLINK_LEVELS)
async def test_symlink_below_the_root_fails_closed_on_write(store, root, outside, plant, named):
    plant(root, outside)
    before = (outside / "acme/widgets/1.json").read_bytes()
    with pytest.raises(Forbidden) as excinfo:
        await store.create(CLAIM, {"hijack": True})
    assert named in str(excinfo.value)
    assert (outside / "acme/widgets/1.json").read_bytes() == before
    assert sorted(p.name for p in (outside / "acme/widgets").iterdir()) == ["1.json"]


@pytest.mark.parametrize(("plant", "named"), SYMLINK_LEVELS)
async def test_symlink_below_the_root_fails_closed_on_list(store, root, outside, plant, named):
    plant(root, outside)
    with pytest.raises(Forbidden) as excinfo:
        await store.list("claims")
    assert named in str(excinfo.value)


async def test_symlinked_lock_file_fails_closed(store, root, tmp_path):
    (root / "claims/acme/widgets").mkdir(parents=True)
    (root / (CLAIM + ".lock")).symlink_to(tmp_path / "elsewhere.lock")
    with pytest.raises(Forbidden, match=r"1\.json\.lock"):
        await store.create(CLAIM, RECORD)
    assert not (tmp_path / "elsewhere.lock").exists()


# ---- interoperability with a foreign writer ------------------------------------------

HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.readline()
    print(time.monotonic(), flush=True)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    """
)


async def test_writer_waits_while_another_process_holds_the_record_lock(store, root):
    """The existing tool flocks `<record>.json.lock` while it writes; we must wait for it
    (from the event loop: no worker thread blocks on the lock)."""
    version = await store.create(CLAIM, RECORD)
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root / (CLAIM + ".lock"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout.readline().strip() == "locked"
            done: dict[str, float] = {}

            async def write() -> None:
                await store.replace(CLAIM, {"v": 2}, version)
                done["at"] = time.monotonic()

            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await anyio.sleep(0.5)
                assert not done, "write completed while another process held the lock"
                assert (await store.get(CLAIM)).data == RECORD
                holder.stdin.write("release\n")
                holder.stdin.flush()
                released_at = float(await anyio.to_thread.run_sync(holder.stdout.readline))
            assert done["at"] >= released_at
            assert (await store.get(CLAIM)).data == {"v": 2}
        finally:
            holder.kill()


async def test_a_lock_held_past_the_deadline_fails_naming_the_lock_file(store, root):
    version = await store.create(CLAIM, RECORD)
    with subprocess.Popen([sys.executable, "-c", HOLDER, str(root / (CLAIM + ".lock"))],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout.readline().strip() == "locked"
            started = time.monotonic()
            with anyio.fail_after(2.0):
                with pytest.raises(Unavailable, match=r"record lock claims/acme/widgets/1\.json\.lock"):
                    with anyio.CancelScope(deadline=anyio.current_time() + 0.6):
                        await store.replace(CLAIM, {"v": 2}, version)
            assert time.monotonic() - started < 1.0
            assert (await store.get(CLAIM)).data == RECORD
        finally:
            holder.kill()


def test_the_blocking_api_never_waits_on_a_held_lock(store, root):
    """Batch renewals run in one worker thread: a held lock is that record's failure."""
    version = store.write_sync(CLAIM, RECORD, None)
    with subprocess.Popen([sys.executable, "-c", HOLDER, str(root / (CLAIM + ".lock"))],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout.readline().strip() == "locked"
            started = time.monotonic()
            with pytest.raises(LockBusy):
                store.write_sync(CLAIM, {"v": 2}, version)
            assert time.monotonic() - started < 0.5
        finally:
            holder.kill()


async def test_record_replaced_underneath_us_makes_our_cas_fail(store, root):
    await store.create(CLAIM, RECORD)
    seen = await store.get(CLAIM)
    foreign = root / "claims/acme/widgets/.foreign-tmp"
    foreign.write_text(json.dumps(dict(RECORD, agent_id="ruby-writer"), indent=2) + "\n")
    os.replace(foreign, root / CLAIM)
    with pytest.raises(Conflict) as excinfo:
        await store.replace(CLAIM, dict(RECORD, agent_id="us"), seen.version)
    assert excinfo.value.kind == "version_conflict"
    assert (await store.get(CLAIM)).data["agent_id"] == "ruby-writer"


async def test_record_deleted_underneath_us_makes_our_cas_fail(store, root):
    await store.create(CLAIM, RECORD)
    seen = await store.get(CLAIM)
    (root / CLAIM).unlink()
    with pytest.raises(NotFound):
        await store.replace(CLAIM, RECORD, seen.version)


# ---- group commit --------------------------------------------------------------------


def _count_dir_syncs(monkeypatch) -> list[str]:
    """Record each directory fsync (the real fsync still runs)."""
    synced: list[str] = []
    real = LocalStore._fsync_dir

    def counting(directory: str) -> None:
        synced.append(directory)
        real(directory)

    monkeypatch.setattr(LocalStore, "_fsync_dir", staticmethod(counting))
    return synced


def test_group_commit_syncs_each_touched_directory_once_at_the_end(store, root, monkeypatch):
    paths = [f"heartbeats/agent-{n}.json" for n in range(20)] + ["claims/acme/w/1.json"]
    for path in paths:
        store.write_sync(path, {"n": 0}, None)
    synced = _count_dir_syncs(monkeypatch)
    with store.group_commit():
        for path in paths:
            current = store.get_sync(path)
            store.write_sync(path, {"n": 1}, current.version)
        assert synced == []  # nothing synced yet
        # Others still see the old records: each is shown (renamed) with the others at the end.
        assert all(json.loads((root / path).read_text()) == {"n": 0} for path in paths)
    assert all(json.loads((root / path).read_text()) == {"n": 1} for path in paths)
    assert sorted(synced) == [str(root / "claims/acme/w"), str(root / "heartbeats")]
    store.write_sync(paths[0], {"n": 2}, store.get_sync(paths[0]).version)
    assert len(synced) == 3  # outside the block: one sync per write again
    assert leftovers(root) == []


def _count_fsync_batches(monkeypatch) -> list[int]:
    """How many temp files each publish of a group commit fsynced together."""
    import agentcoordd.store.commit as commit

    batches: list[int] = []
    real = commit.fsync_many

    def counting(fds):
        batches.append(len(fds))
        return real(fds)

    monkeypatch.setattr(commit, "fsync_many", counting)
    return batches


def test_a_group_commits_temp_files_are_fsynced_together_before_any_rename(store, root, monkeypatch):
    batches = _count_fsync_batches(monkeypatch)
    with store.group_commit():
        for n in range(10):
            store.write_sync(f"heartbeats/agent-{n}.json", {"n": n}, None)
        assert not any((root / f"heartbeats/agent-{n}.json").exists() for n in range(10))
        assert len(leftovers(root)) == 10  # written whole, waiting for the commit
    assert batches == [10]
    assert [json.loads((root / f"heartbeats/agent-{n}.json").read_text()) for n in range(10)] == \
        [{"n": n} for n in range(10)]
    assert leftovers(root) == []


def test_a_group_commit_holds_each_records_lock_until_it_is_shown(store, root):
    import fcntl

    def lock_is_free(path: str) -> bool:
        fd = os.open(root / f"{path}.lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    store.write_sync(CLAIM, RECORD, None)
    with store.group_commit():
        store.write_sync(CLAIM, {**RECORD, "status": "x"}, store.get_sync(CLAIM).version)
        assert not lock_is_free(CLAIM)  # agent-coord cannot read-check-write in between
    assert lock_is_free(CLAIM)
    assert json.loads((root / CLAIM).read_text())["status"] == "x"


def test_a_record_written_twice_in_one_commit_is_shown_before_its_second_write(store, root):
    with store.group_commit():
        first = store.write_sync(CLAIM, {**RECORD, "n": 1}, None)
        assert store.get_sync(CLAIM).data["n"] == 1  # this thread reads its own write
        second = store.write_sync(CLAIM, {**RECORD, "n": 2}, first)  # CAS on the first's version
        with pytest.raises(Conflict):
            store.write_sync(CLAIM, {**RECORD, "n": 3}, first)  # stale: the second one won
    assert store.get_sync(CLAIM).version == second
    assert leftovers(root) == []


def test_a_temp_file_that_does_not_fsync_fails_its_own_owner_only(store, root, monkeypatch):
    """What the keeper's batched renewals rely on: one lane's failure is that lane's."""
    import agentcoordd.store.commit as commit

    real = commit.fsync_many

    def second_fails(fds):
        results = real(fds)
        results[1] = OSError(5, "Input/output error")
        return results

    store.write_sync("heartbeats/b.json", {"n": 0}, None)
    monkeypatch.setattr(commit, "fsync_many", second_fails)
    with store.group_commit() as group:
        for owner, name in enumerate("abc"):
            group.owner = owner
            path = f"heartbeats/{name}.json"
            current = store.get_sync(path)
            store.write_sync(path, {"n": 1}, None if current is None else current.version)
    assert list(group.failed) == [1]
    assert "Input/output error" in str(group.failed[1]) and "heartbeats/b.json" in str(group.failed[1])
    assert json.loads((root / "heartbeats/b.json").read_text()) == {"n": 0}  # not shown: old record kept
    assert json.loads((root / "heartbeats/a.json").read_text()) == {"n": 1}
    assert json.loads((root / "heartbeats/c.json").read_text()) == {"n": 1}
    assert leftovers(root) == []


def test_an_fsync_that_breaks_shows_none_of_its_writes_and_releases_their_locks(store, root, monkeypatch):
    import fcntl

    import agentcoordd.store.commit as commit

    def broken(fds):
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(commit, "fsync_many", broken)
    with store.group_commit() as group:
        for owner in range(3):
            group.owner = owner
            store.write_sync(f"heartbeats/x-{owner}.json", {"n": owner}, None)
    assert sorted(group.failed) == [0, 1, 2]
    assert not any((root / f"heartbeats/x-{n}.json").exists() for n in range(3))
    assert leftovers(root) == []
    for n in range(3):  # every lock released
        fd = os.open(root / f"heartbeats/x-{n}.json.lock", os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)


def test_a_commit_holds_at_most_max_pending_writes_open_at_once(store, root):
    from agentcoordd.store.commit import MAX_PENDING

    held = []
    with store.group_commit():
        for n in range(3 * MAX_PENDING + 5):
            store.write_sync(f"heartbeats/many-{n}.json", {"n": n}, None)
            held.append(len(leftovers(root)))
    assert max(held) == MAX_PENDING  # each pending write holds a temp file (and a lock)
    assert len(list((root / "heartbeats").glob("many-*.json"))) == 3 * MAX_PENDING + 5
    assert leftovers(root) == []


async def test_a_round_takes_at_most_round_calls_calls(store, root):
    from agentcoordd.store.rounds import ROUND_CALLS

    rounds = store._rounds.rounds
    async with anyio.create_task_group() as tg:
        for n in range(3 * ROUND_CALLS):
            tg.start_soon(store.create, f"heartbeats/r-{n}.json", {"n": n})
    assert store._rounds.rounds - rounds >= 3
    assert len(list((root / "heartbeats").glob("r-*.json"))) == 3 * ROUND_CALLS


async def test_a_round_whose_temp_file_does_not_fsync_fails_that_call_and_answers_the_others(
        store, root, monkeypatch):
    import agentcoordd.store.commit as commit

    real = commit.fsync_many

    def failing_for(name: str):
        def fsync_many(fds):
            results = real(fds)
            for index, fd in enumerate(fds):
                if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(f".{name}"):
                    results[index] = OSError(28, "No space left on device")
            return results
        return fsync_many

    monkeypatch.setattr(commit, "fsync_many", failing_for("bad.json"))
    outcomes: dict[str, object] = {}

    async def create(name: str) -> None:
        try:
            outcomes[name] = await store.create(f"heartbeats/{name}.json", {"name": name})
        except Unavailable as exc:
            outcomes[name] = exc

    async with anyio.create_task_group() as tg:
        for name in ("one", "bad", "two", "three"):
            tg.start_soon(create, name)
    assert isinstance(outcomes["bad"], Unavailable) and "No space left" in str(outcomes["bad"])
    assert not (root / "heartbeats/bad.json").exists()
    for name in ("one", "two", "three"):
        body = (root / f"heartbeats/{name}.json").read_bytes()
        assert outcomes[name] == hashlib.sha256(body).hexdigest()
    assert leftovers(root) == []


def test_group_commit_syncs_what_was_written_before_an_error(store, root, monkeypatch):
    synced = _count_dir_syncs(monkeypatch)
    with pytest.raises(Conflict), store.group_commit():
        store.write_sync("heartbeats/a.json", {"n": 0}, None)
        with store.group_commit():  # nested: the outer block syncs
            store.write_sync("heartbeats/b.json", {"n": 0}, None)
        store.write_sync("heartbeats/a.json", {"n": 1}, None)  # create of an existing record
    assert synced == [str(root / "heartbeats")]


def test_group_commit_is_per_thread(store, root, monkeypatch):
    synced = _count_dir_syncs(monkeypatch)
    with store.group_commit():
        worker = threading.Thread(target=store.write_sync, args=("claims/x/y/1.json", RECORD, None))
        worker.start()
        worker.join()
        assert synced == [str(root / "claims/x/y")]  # the other thread synced its own write


# ---- writes that share a directory fsync (files.DirSync, store.rounds) ---------------------


def test_concurrent_syncs_of_one_directory_share_fsyncs_and_each_covers_its_caller():
    """Every caller returns only after an fsync that *started* after its change."""
    from agentcoordd.store.files import DirSync

    changed: set[int] = set()
    covered: list[set[int]] = []  # what each fsync covered: the changes made before it started
    guard = threading.Lock()

    def slow_fsync(directory: str) -> None:
        with guard:
            covered.append(set(changed))
        time.sleep(0.005)

    sync = DirSync(slow_fsync)
    uncovered: list[int] = []

    def writer(n: int) -> None:
        with guard:
            changed.add(n)  # "the rename is done"
        sync.sync("/d")
        if not any(n in seen for seen in covered):
            uncovered.append(n)

    with ThreadPoolExecutor(32) as pool:  # all at once; a thread's exception fails the test
        list(pool.map(writer, range(32)))
    assert uncovered == []
    assert len(covered) < 32  # shared: fewer fsyncs than callers


def test_a_failed_directory_fsync_fails_every_caller_it_covered_and_the_next_one_retries():
    from agentcoordd.store.files import DirSync

    failing = [True]
    started = threading.Event()
    release = threading.Event()

    def fsync(directory: str) -> None:
        if failing[0]:
            started.set()
            release.wait(5)
            raise OSError(5, "Input/output error")

    sync = DirSync(fsync)
    errors: list[BaseException | None] = []

    def writer() -> None:
        try:
            sync.sync("/d")
            errors.append(None)
        except OSError as exc:
            errors.append(exc)

    first = threading.Thread(target=writer)
    first.start()
    assert started.wait(5)
    failing[0] = False  # a writer joining now waits for the next fsync, which succeeds
    second = threading.Thread(target=writer)
    second.start()
    time.sleep(0.05)
    release.set()
    first.join()
    second.join()
    assert sorted(errors, key=lambda e: e is None) == [errors[0], None] and isinstance(errors[0], OSError)


async def test_concurrent_writes_in_one_directory_share_its_fsync_and_each_is_on_disk(store, root, monkeypatch):
    synced = _count_dir_syncs(monkeypatch)
    paths = [f"heartbeats/agent-{n}.json" for n in range(40)]

    async def write(path: str) -> None:
        await store.create(path, {"path": path})
        assert json.loads((root / path).read_text()) == {"path": path}  # written whole before the ack

    async with anyio.create_task_group() as tg:
        for path in paths:
            tg.start_soon(write, path)
    heartbeat_syncs = synced.count(str(root / "heartbeats"))
    assert 1 <= heartbeat_syncs < len(paths)
    assert leftovers(root) == []


async def test_a_failed_directory_fsync_fails_the_writes_it_covered(store, root, monkeypatch):
    await store.create("heartbeats/seed.json", {"n": 0})

    def failing(directory: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LocalStore, "_fsync_dir", staticmethod(failing))
    with pytest.raises(Unavailable, match="No space left on device"):
        await store.create("heartbeats/a.json", {"n": 1})
    monkeypatch.undo()
    seen = await store.get("heartbeats/a.json")  # renamed but reported failed: exit 2 (UNKNOWN), not lost
    assert seen is not None and seen.data == {"n": 1}


async def test_a_foreign_lock_holder_does_not_stall_writes_of_other_records(store, root):
    import fcntl

    await store.create(CLAIM, RECORD)
    held = os.open(root / (CLAIM + ".lock"), os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)  # another writer, hung while holding the lock
    try:
        seen = await store.get(CLAIM)
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            async def blocked() -> None:
                with anyio.fail_after(2.0), pytest.raises(Unavailable, match="not acquired within"):
                    with anyio.CancelScope(deadline=anyio.current_time() + 1.0):
                        await store.replace(CLAIM, {**RECORD, "status": "x"}, seen.version)

            tg.start_soon(blocked)
            for n in range(50):
                await store.create(f"heartbeats/other-{n}.json", {"n": n})
            others_took = time.monotonic() - started
        assert others_took < 0.9, others_took  # not queued behind the busy lock
    finally:
        os.close(held)
    assert (await store.get(CLAIM)).data == RECORD  # the blocked write never happened


async def test_a_cancelled_caller_still_waits_for_its_write_to_finish(store, root):
    with anyio.CancelScope() as scope:
        scope.cancel()
        version = await store.create("heartbeats/late.json", {"n": 1})  # shielded, like a pool hop
    assert version == hashlib.sha256((root / "heartbeats/late.json").read_bytes()).hexdigest()


# ---- batches (BatchOps: gc's chunks) -------------------------------------------------


async def test_a_batch_runs_in_one_round_with_one_fsync_per_directory(store, root, monkeypatch):
    await store.create("heartbeats/old-0.json", {"n": 0})
    old = await store.get("heartbeats/old-0.json")
    synced = _count_dir_syncs(monkeypatch)
    rounds = store._rounds.rounds
    ops = [Create(f"archive/heartbeats/a-{n}.json", {"n": n}) for n in range(20)]
    ops += [Delete("heartbeats/old-0.json", old.version), Get("heartbeats/missing.json"),
            Delete("heartbeats/missing.json", old.version), Replace("heartbeats/nope.json", {}, old.version)]
    outcomes = await store.run_batch(ops)
    assert store._rounds.rounds == rounds + 1
    assert sorted(synced) == [str(root / "archive/heartbeats"), str(root / "heartbeats")]
    for n, version in enumerate(outcomes[:20]):  # each written whole before the ack
        body = (root / f"archive/heartbeats/a-{n}.json").read_bytes()
        assert version == hashlib.sha256(body).hexdigest() and json.loads(body) == {"n": n}
    assert outcomes[20] is None and not (root / "heartbeats/old-0.json").exists()
    assert outcomes[21] is None
    assert isinstance(outcomes[22], NotFound) and isinstance(outcomes[23], NotFound)  # theirs, not the batch's
    assert await store.run_batch([]) == []


async def test_a_batch_op_on_a_busy_lock_waits_alone_and_its_neighbours_finish(store, root):
    import fcntl

    await store.create(CLAIM, RECORD)
    seen = await store.get(CLAIM)
    held = os.open(root / (CLAIM + ".lock"), os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)  # another writer, holding the lock for a moment
    threading.Timer(0.3, os.close, (held,)).start()
    started = time.monotonic()
    outcomes = await store.run_batch([Replace(CLAIM, {**RECORD, "status": "x"}, seen.version),
                                      Create("heartbeats/n.json", {"n": 1})])
    assert time.monotonic() - started >= 0.25  # waited for the holder, then wrote
    assert isinstance(outcomes[0], str) and isinstance(outcomes[1], str)
    assert (await store.get(CLAIM)).data["status"] == "x"


async def test_a_failed_directory_fsync_fails_the_whole_batch(store, root, monkeypatch):
    def failing(directory: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LocalStore, "_fsync_dir", staticmethod(failing))
    with pytest.raises(Unavailable, match="No space left on device"):  # no op's outcome is known
        await store.run_batch([Create("heartbeats/a.json", {"n": 1}), Create("heartbeats/b.json", {"n": 2})])
