"""LocalStore: the existing tool's on-disk layout, safe to share with it live.

* `<record>.json.lock` is held with flock(LOCK_EX) around every check-and-write;
  lock files are never unlinked (another writer may be waiting on the inode).
  A lock is never waited for in a blocked thread: a worker thread tries it
  briefly (`LOCK_SPIN_SECONDS`), and the async call retries from the event loop until
  its deadline (the caller's `--timeout`, at most `LOCK_WAIT_CAP`), then fails
  naming the lock file. A stuck or foreign holder costs the calls on that
  record, never the worker threads every other record needs.
* Private by default: directories 0700, records, temp and lock files 0600.
  `mode` (AGENT_COORD_STATE_MODE, e.g. 0750) loosens a root an operator shares.
* A new directory is fsynced into its parent, so a first record survives a
  power cut with its path. Temp files a dead writer left (`.<name>.tmp-<pid>-…`)
  are swept on the store's first write.
* The version token is the SHA-256 hex of the record file's bytes.
* Writes go to a temp file in the same directory, fsync, rename, fsync the dir:
  a reader sees the old record or the new one, never half of one. The
  directory fsync is group-committed (`files.DirSync`): writers in one
  directory at the same time share one, and each returns only once its own
  rename is durable. Inside `group_commit()` (a write round, the daemon's
  batched renewals) one thread's writes are published together
  (store/commit.py): their temp files fsynced at once, then renamed, then
  each touched directory fsynced once.
* Records are pretty-printed JSON (2-space indent) with a trailing newline.
* The root may be a symlink (operator's choice); anything below it fails closed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import msgspec

from agentcoordd.model import bounds, ids
from agentcoordd.store import inotify
from agentcoordd.model.backoff import LOCK_SPIN, LOCK_WAIT
from agentcoordd.store.base import (
    Capabilities,
    Conflict,
    Create,
    Get,
    Forbidden,
    InvalidPath,
    InvalidRecord,
    NotFound,
    Op,
    Outcome,
    Page,
    Replace,
    Unavailable,
    Versioned,
    decode_record,
    page_of,
    run_singly,
)
from agentcoordd.model.errors import UsageError
from agentcoordd.store.history import JsonlHistory, JsonlReader
from agentcoordd.store.commit import Commit
from agentcoordd.store.rounds import Rounds
from agentcoordd.store.files import (
    PRIVATE_DIR_MODE,
    DirSync,
    file_mode,
    fsync_dir,
    sweep_stale_temps,
    temp_suffix,
    write_whole,
)

T = TypeVar("T")
# The event feed's stat poll: a few stats per batch this often (without inotify).
CHANGE_POLL = 0.05
# With inotify: the stamp is still checked this often (directories created later).
INOTIFY_SAFETY = 1.0
INOTIFY_COALESCE = 0.01  # one wake-up for the bursts of one write
_encoder = msgspec.json.Encoder()
LOCK_SPIN_SECONDS = 0.02  # in-thread tries of a busy lock before handing the wait to the event loop
LOCK_WAIT_CAP = 30.0  # a call without a deadline of its own waits at most this
LOCK_MARGIN = 0.1  # answer before the caller's deadline cuts the call off
READ_CHUNK = 1 << 16


class LockBusy(Unavailable):
    """A record lock is held by someone else right now (retried by the async API)."""

    def __init__(self, message: str, lock_path: str) -> None:
        super().__init__(message)
        self.lock_path = lock_path


def encode_record(data: Any, path: str) -> bytes:
    """Pretty JSON exactly as the existing tool writes it (2 spaces, newline); a
    record outside the read bounds (model.bounds) is refused: no reader could read it."""
    compact = _encoder.encode(data)
    problem = bounds.problem(compact)
    if problem is not None:
        raise InvalidRecord(f"record {path} not written: {problem}")
    return msgspec.json.format(compact, indent=2) + b"\n"


def version_of(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _valid(check: Callable[[str], str], value: str) -> str:
    try:
        return check(value)
    except UsageError as exc:
        raise InvalidPath(exc.message) from None


def _stat_stamp(path: str) -> tuple[int, ...]:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return (-1,)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class LocalStore:
    """A Store over a directory tree. Blocking I/O runs in worker threads."""

    def __init__(self, root: str | os.PathLike[str], mode: int = PRIVATE_DIR_MODE) -> None:
        self.root = Path(root)
        self.name = f"local:{self.root}"
        # Hot paths join plain strings: pathlib showed up in per-renewal CPU.
        self._root = os.fspath(self.root)
        # Per thread: its group commit (`commit`), how long it spins on a busy lock (`lock_spin`).
        self._local = threading.local()
        # Concurrent writers in one directory share its fsync (looked up per call: tests count them).
        self._dir_sync = DirSync(lambda directory: self._fsync_dir(directory))
        self._rounds = Rounds(self._round_commit, name=f"agentcoord-rounds:{self._root}")
        self._dir_mode = mode
        self._file_mode = file_mode(mode)
        self._loosened = mode != PRIVATE_DIR_MODE  # umask may strip bits: set them exactly
        self._swept = False
        self._sweep_lock = threading.Lock()
        self._history = JsonlReader(self.root)
        self.capabilities = Capabilities(blocking=self, paths=self, files=self, changes=self, batch=self)

    # ---- async Store API -------------------------------------------------

    async def get(self, path: str) -> Versioned | None:
        return await self._rounds.run(self.get_sync, path)

    async def create(self, path: str, data: Any) -> str:
        return await self._run_locking(self.write_sync, path, data, None)

    async def replace(self, path: str, data: Any, version: str) -> str:
        return await self._run_locking(self.write_sync, path, data, version)

    async def delete(self, path: str, version: str) -> None:
        await self._run_locking(self.delete_sync, path, version)

    async def in_round(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._run_locking(fn, *args)

    async def run_batch(self, ops: list[Op]) -> list[Outcome]:
        """BatchOps: the ops in one round, so each directory they touch is fsynced
        once for all of them (gc's chunks); an op that met a busy lock runs again
        on its own, waiting for the lock as its single call would."""
        if not ops:
            return []
        outcomes = await self._rounds.run(self._batch_sync, ops)
        for index, outcome in enumerate(outcomes):
            if isinstance(outcome, LockBusy):
                outcomes[index] = (await run_singly(self, [ops[index]]))[0]
        return outcomes

    def _batch_sync(self, ops: list[Op]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for op in ops:
            try:
                if isinstance(op, Get):
                    outcomes.append(self.get_sync(op.path))
                elif isinstance(op, Create):
                    outcomes.append(self.write_sync(op.path, op.data, None))
                elif isinstance(op, Replace):
                    outcomes.append(self.write_sync(op.path, op.data, op.version))
                else:
                    self.delete_sync(op.path, op.version)
                    outcomes.append(None)
            except Exception as exc:  # noqa: BLE001 - this op's outcome, never its neighbours'
                outcomes.append(exc)
        return outcomes

    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Page:
        return await self._run(self.list_sync, prefix, limit, cursor)

    async def list_paths(self, prefix: str) -> list[str]:
        """Record paths below `prefix`, sorted, without reading them (doctor's layout walk)."""
        return await self._run(self.list_paths_sync, prefix)

    async def aclose(self) -> None:
        return None

    # ---- local files: JSON Lines history (blocking) --------------------------

    def jsonl_history(self, batch_id: str | None) -> JsonlHistory:
        return self._history.history(batch_id)

    def jsonl_batch_file(self, batch_id: str) -> list[dict[str, Any]]:
        return self._history.batch_file(batch_id)

    def events_fingerprint(self, batch_id: str) -> tuple[int, ...]:
        """The batch's event directory (a new event file changes its mtime) and its
        dashboard JSONL file; -1s where absent."""
        stamp: list[int] = []
        for path, fields in ((f"{self._root}/events/{batch_id}", ("st_mtime_ns", "st_ino")),
                             (f"{self._root}/events/batches/{batch_id}.jsonl",
                              ("st_mtime_ns", "st_size", "st_ino"))):
            try:
                st = os.stat(path)
            except OSError:
                stamp.extend(-1 for _ in fields)
                continue
            stamp.extend(getattr(st, f) for f in fields)
        return tuple(stamp)

    # ---- change detection (the event feed) ---------------------------------

    async def changes(self, prefix: str) -> AsyncIterator[str]:
        """What changed is decided by a stat stamp (`change_stamp_sync`): the prefix's
        directory (a new record file changes its mtime) and, below `events/`, every
        JSON Lines history file (appended in place: mtime and size). inotify (Linux)
        wakes the check when a watched directory changes, with a stat poll every
        `INOTIFY_SAFETY` seconds for directories created later; elsewhere the stamp
        is polled every `CHANGE_POLL` seconds. Yields "inotify" or "stat"."""
        prefix = ids.state_prefix(prefix).rstrip("/")
        notify = inotify.open_inotify()
        how = "stat" if notify is None else "inotify"

        def stamp() -> tuple[Any, ...]:
            # Watches first, then the stamp: a write after it always wakes the wait.
            if notify is not None:
                for rel in self._change_dirs(prefix):
                    notify.watch(f"{self._root}/{rel}")
            return self.change_stamp_sync(prefix)

        try:
            # Stamped before the first notice: a write right after it is a change.
            last = await self._run(stamp)
            yield how
            while True:
                if notify is None:
                    await anyio.sleep(CHANGE_POLL)
                else:
                    with anyio.move_on_after(INOTIFY_SAFETY):
                        await anyio.wait_readable(notify.fd)
                        await anyio.sleep(INOTIFY_COALESCE)  # a write is temp file + rename
                    notify.drain()
                now = await self._run(stamp)
                if now != last:
                    last = now
                    yield how
        finally:
            if notify is not None:
                notify.close()

    @staticmethod
    def _change_dirs(prefix: str) -> list[str]:
        """The directories whose entries make the stamp: the prefix's own, and below
        `events/` the JSON Lines directories (`events/batches` for the batch's file)."""
        if not prefix.startswith("events/"):
            return [prefix]
        return [prefix, "events", "history", "events/batches"]

    def change_stamp_sync(self, prefix: str) -> tuple[Any, ...]:
        stamp: list[Any] = []
        if prefix.startswith("events/"):
            batch = prefix.split("/", 2)[1]
            stamp.append(_stat_stamp(f"{self._root}/events/batches/{batch}.jsonl"))
        for rel in self._change_dirs(prefix)[:3]:
            full = f"{self._root}/{rel}"
            if rel == prefix:
                stamp.append(_stat_stamp(full))
                continue
            try:  # JSON Lines files only: other batches' directories are not this batch's change
                with os.scandir(full) as listing:
                    for entry in listing:
                        if entry.name.endswith(".jsonl"):
                            stamp.append((entry.name, _stat_stamp(entry.path)))
            except OSError:
                continue
        return tuple(stamp)

    @staticmethod
    async def _run(fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args)

    async def _run_locking(self, fn: Callable[..., T], *args: Any) -> T:
        """A locked write; a busy lock is waited for here, between thread hops."""
        started = anyio.current_time()
        deadline = min(anyio.current_effective_deadline() - LOCK_MARGIN, started + LOCK_WAIT_CAP)
        retry = 0
        while True:
            try:
                return await self._rounds.run(fn, *args)
            except LockBusy as busy:
                retry += 1
                delay = LOCK_WAIT.delay(retry)
                now = anyio.current_time()
                if now + delay > deadline:
                    raise Unavailable(
                        f"record lock {busy.lock_path} not acquired within {now - started:.1f}s: "
                        "another process holds it (a hung writer?); coordination state is UNKNOWN"
                    ) from None
                await anyio.sleep(delay)

    # ---- blocking implementation ------------------------------------------

    @contextlib.contextmanager
    def group_commit(self) -> Iterator[Commit]:
        """Writes by this thread inside the block are published together at its end
        (store/commit.py); the writes that could not be made durable are in the
        commit's `failed`, by the `owner` set when each was made.

        Each record is still written whole and fsynced before its rename, so a
        crash before the end can only lose renames: the previous, complete
        records stay.
        """
        outer: Commit | None = getattr(self._local, "commit", None)
        if outer is not None:
            yield outer  # nested: the outer block publishes
            return
        with self._committing(LOCK_SPIN_SECONDS) as commit:
            yield commit

    def _round_commit(self) -> contextlib.AbstractContextManager[Commit]:
        """A round of record calls (store.rounds): busy locks not waited for."""
        return self._committing(0.0)

    @contextlib.contextmanager
    def _committing(self, lock_spin: float) -> Iterator[Commit]:
        commit = Commit(self._dir_sync, self._os_error, self._root)
        self._local.commit, self._local.lock_spin = commit, lock_spin
        try:
            yield commit
        finally:
            self._local.commit, self._local.lock_spin = None, LOCK_SPIN_SECONDS
            commit.finish()

    def get_sync(self, path: str) -> Versioned | None:
        full = self._checked(path)
        raw = self._read_bytes(full, path)
        if raw is None:
            return None
        return Versioned(decode_record(raw, path), version_of(raw))

    def write_sync(self, path: str, data: Any, expected: str | None) -> str:
        """Create-only when `expected` is None, else compare-and-swap."""
        if not self._swept:
            self._sweep_once()
        full = self._checked(path, create_dirs=True)
        body = encode_record(data, path)
        with self._locked(full, path):
            current = self._read_bytes(full, path)
            if expected is None and current is not None:
                raise Conflict(f"record already exists: {path}", "already_exists")
            if expected is not None:
                if current is None:
                    raise NotFound(f"record not found: {path}")
                if version_of(current) != expected:
                    raise Conflict(f"record changed underneath us: {path}", "version_conflict")
            self._atomic_write(full, body, path)
        return version_of(body)

    def update_sync(self, path: str, decide: Callable[[Versioned | None], tuple[Any, T]]) -> T:
        """Read, decide and write one record under its lock: the read made under the
        lock is the write's guard, so it is the only read (get_sync + write_sync read
        twice). `decide(current)` returns (the record to write, or None to keep it; result)."""
        if not self._swept:
            self._sweep_once()
        full = self._checked(path, create_dirs=True)
        with self._locked(full, path):
            raw = self._read_bytes(full, path)
            current = None if raw is None else Versioned(decode_record(raw, path), version_of(raw))
            data, result = decide(current)
            if data is not None:
                self._atomic_write(full, encode_record(data, path), path)
        return result

    def delete_sync(self, path: str, expected: str) -> None:
        full = self._checked(path)
        with self._locked(full, path):
            current = self._read_bytes(full, path)
            if current is None:
                raise NotFound(f"record not found: {path}")
            if version_of(current) != expected:
                raise Conflict(f"record changed underneath us: {path}", "version_conflict")
            try:
                os.unlink(full)
                self._dir_changed(os.path.dirname(full))
            except OSError as exc:
                raise self._os_error("cannot delete", path, exc) from None

    def list_sync(self, prefix: str, limit: int | None, cursor: str | None) -> Page:
        if limit is not None and limit < 1:
            raise InvalidPath(f"invalid listing limit: {limit}")
        paths = [path for path, _inode in self.walk_sync(prefix)]
        if cursor is not None:
            paths = [p for p in paths if p > cursor]
        next_cursor = None
        if limit is not None and len(paths) > limit:
            paths = paths[:limit]
            next_cursor = paths[-1]
        rows = []
        for rel in paths:
            raw = self._read_bytes(f"{self._root}/{rel}", rel)
            if raw is not None:  # deleted between walk and read: not listed
                rows.append((rel, raw, version_of(raw)))
        return page_of(rows, next_cursor)

    def list_paths_sync(self, prefix: str) -> list[str]:
        """Sorted record paths below `prefix` without reading them."""
        return [path for path, _inode in self.walk_sync(prefix)]

    def sweep_sync(self) -> int:
        """Remove temp files of dead writers anywhere below the root; how many."""
        removed = 0
        stack = [self._root]
        while stack:
            directory = stack.pop()
            try:
                with os.scandir(directory) as it:
                    subdirs = [e.path for e in it if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            removed += sweep_stale_temps(directory)
            stack.extend(subdirs)
        return removed

    def _sweep_once(self) -> None:
        with self._sweep_lock:
            if not self._swept:
                self._swept = True
                self.sweep_sync()

    # ---- helpers -----------------------------------------------------------

    def _checked(self, path: str, create_dirs: bool = False) -> str:
        path = _valid(ids.state_path, path)
        parent = path.rpartition("/")[0]
        if create_dirs:
            self._make_dirs(parent, path)
        else:
            self._check_no_symlinks(parent, must_be_dir=False)
        return f"{self._root}/{path}"

    def _check_no_symlinks(self, rel_dir: str, must_be_dir: bool) -> None:
        """Fail closed on a symlink at any level below the root."""
        current = self._root
        shown = ""
        for segment in rel_dir.split("/"):
            current = f"{current}/{segment}"
            shown = f"{shown}/{segment}" if shown else segment
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                return
            except OSError as exc:
                raise self._os_error("cannot inspect", shown, exc) from None
            self._require_dir(mode, shown)

    @staticmethod
    def _require_dir(mode: int, shown: str) -> None:
        if stat.S_ISLNK(mode):
            raise Forbidden(f"symlink below state root refused: {shown}")
        if not stat.S_ISDIR(mode):
            raise Forbidden(f"state layout invalid: {shown} is not a directory")  # agent-coord's words

    def _make_dirs(self, rel_dir: str, path: str) -> None:
        current = self._root
        shown = ""
        for segment in rel_dir.split("/"):
            parent = current
            current = f"{current}/{segment}"
            shown = f"{shown}/{segment}" if shown else segment
            try:
                self._require_dir(os.lstat(current).st_mode, shown)
                continue  # the common case: it exists (no exception, no mkdir)
            except FileNotFoundError:
                pass
            if not self.root.is_dir():  # a first write creates the root (reads never do)
                try:
                    self.root.mkdir(parents=True, exist_ok=True, mode=self._dir_mode)
                    fsync_dir(self.root.parent)
                except OSError as exc:
                    raise self._os_error("cannot create state root for", path, exc) from None
            try:
                os.mkdir(current, self._dir_mode)
                if self._loosened:
                    os.chmod(current, self._dir_mode)
                fsync_dir(parent)  # the new directory's entry, before any record in it
            except FileExistsError:
                self._require_dir(os.lstat(current).st_mode, shown)  # raced another writer
            except OSError as exc:
                raise self._os_error("cannot create directory for", path, exc) from None

    def _read_bytes(self, full: str, path: str) -> bytes | None:
        self._publish_pending(full)
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Forbidden(f"symlink below state root refused: {path}") from None
            raise self._os_error("cannot read", path, exc) from None
        # Plain reads until EOF: a buffered file object costs four more system calls per
        # record (fstat, isatty, two seeks) — per renewal, per heartbeat.
        try:
            chunks = []
            while chunk := os.read(fd, READ_CHUNK):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise self._os_error("cannot read", path, exc) from None
        finally:
            os.close(fd)

    def _publish_pending(self, full: str) -> None:
        """This thread's commit still holds a write of `full`: publish it first."""
        commit: Commit | None = getattr(self._local, "commit", None)
        if commit is not None and commit.holds(full):
            commit.publish()

    @contextlib.contextmanager
    def _locked(self, full: str, path: str) -> Iterator[None]:
        """flock `<full>.lock` around the block; a write the block left pending in this
        thread's commit keeps the lock until it is published."""
        self._publish_pending(full)
        lock_path = full + ".lock"
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                         self._file_mode)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Forbidden(f"symlink below state root refused: {path}.lock") from None
            raise self._os_error("cannot lock", path, exc) from None
        try:
            self._acquire(fd, f"{path}.lock")
            yield
        finally:
            commit: Commit | None = getattr(self._local, "commit", None)
            if commit is None or not commit.keep_lock(full, fd):
                os.close(fd)  # closing releases the flock; the lock file stays

    def _acquire(self, fd: int, shown: str) -> None:
        """flock within LOCK_SPIN_SECONDS, else LockBusy (the async caller waits on, threadless)."""
        give_up = time.monotonic() + getattr(self._local, "lock_spin", LOCK_SPIN_SECONDS)
        retry = 0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            retry += 1
            pause = LOCK_SPIN.delay(retry)
            if time.monotonic() + pause > give_up:
                raise LockBusy(f"record lock {shown} under {self.root} is held by another process",
                               f"{shown} under {self.root}")
            time.sleep(pause)

    def _atomic_write(self, full: str, body: bytes, path: str) -> None:
        """Temp file, fsync, rename, directory fsync — or, inside a group commit,
        the temp file written and handed to the commit, which does the rest."""
        directory, _, name = full.rpartition("/")
        tmp = f"{directory}/.{name}.tmp-{temp_suffix()}"
        commit: Commit | None = getattr(self._local, "commit", None)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         self._file_mode)
        except OSError as exc:
            raise self._os_error("cannot write", path, exc) from None
        try:
            try:
                if self._loosened:
                    os.fchmod(fd, self._file_mode)
                write_whole(fd, body)
                if commit is not None:
                    commit.defer(full, path, fd, tmp)
                    return
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
            os.replace(tmp, full)
            self._dir_changed(directory)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise self._os_error("cannot write", path, exc) from None

    def _dir_changed(self, directory: str) -> None:
        """An entry of `directory` was renamed in or unlinked: fsync it now, or when
        this thread's group commit finishes."""
        commit: Commit | None = getattr(self._local, "commit", None)
        if commit is None:
            self._dir_sync.sync(directory)
        else:
            commit.changed(directory)

    _fsync_dir = staticmethod(fsync_dir)

    def checked_prefix(self, prefix: str) -> str:
        """`prefix` validated, without a trailing slash; a symlink or a file on its way fails closed."""
        prefix = _valid(ids.state_prefix, prefix)
        self._check_no_symlinks(prefix, must_be_dir=True)
        return prefix

    def walk_sync(self, prefix: str) -> list[tuple[str, int]]:
        """(path, inode) of every record below `prefix`, sorted by path.

        The prefix is validated, a symlink at any level fails closed, dot files
        (in-flight temp files) are skipped. The inode comes with the directory
        entry (no stat): the parsed-record cache keys immutable families by it.
        """
        prefix = self.checked_prefix(prefix)
        root = self._root
        per_dir: list[tuple[str, list[tuple[str, int]]]] = []
        mixed = False  # a directory holding records and subdirectories
        stack = [prefix]
        while stack:
            rel = stack.pop()
            try:
                it = os.scandir(f"{root}/{rel}")
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise self._os_error("cannot list", rel, exc) from None
            files: list[tuple[str, int]] = []
            subdirs = 0
            with it:
                for entry in it:
                    name = entry.name
                    if name[0] == ".":
                        continue  # temp files of in-flight writes
                    if entry.is_symlink():
                        raise Forbidden(f"symlink below state root refused: {rel}/{name}")
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(f"{rel}/{name}")
                        subdirs += 1
                    elif name.endswith(".json"):
                        files.append((name, entry.inode()))
            if files:
                mixed = mixed or subdirs > 0
                per_dir.append((rel + "/", files))
        if mixed:  # rare layout: fall back to sorting whole paths
            found = [(d + name, ino) for d, files in per_dir for name, ino in files]
            found.sort()
            return found
        # Records only in leaf directories: path order = directory order, then name.
        per_dir.sort()
        found = []
        for d, files in per_dir:
            files.sort()
            found.extend([(d + name, ino) for name, ino in files])
        return found

    def _os_error(self, action: str, path: str, exc: OSError) -> Exception:
        reason = exc.strerror or str(exc)
        if isinstance(exc, PermissionError):
            return Forbidden(f"{action} {path} under {self.root}: {reason}")
        return Unavailable(f"{action} {path} under {self.root}: {reason}")
