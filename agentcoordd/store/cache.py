"""Scanning many records at once, and a parsed-record cache for LocalStore.

Status and audit read whole families (`claims`, `heartbeats`, `events/…`).
`scan(store, prefix, digest, name)` returns, in path order, what a *digest*
function made of each record, plus the records that could not be read
(invalid JSON, not what the digest needs) — one bad record never hides the
rest. A digest keeps only what its reader needs, so a scan over 100,000
events holds 100,000 small values, never 100,000 parsed documents.

`CachingStore(LocalStore(root))` is the daemon's long-lived wrapper, opened
once per local root: a warm scan costs what changed since the last one. A
directory index (`store/dirindex.py`: inotify where it can, stat stamps
elsewhere) says which directories were re-listed and which records were
named by a change notice; each digest keeps, per directory, the values and
rows it made, so an unchanged directory's rows are reused without a system
call and a changed one re-reads only the records that changed. Without
notices, every mutable record is checked by its (inode, mtime_ns, ctime_ns,
size): writers replace records by rename (new inode) and the existing Ruby
tool rewrites in place (new mtime/size); a record changed too recently for
its timestamps to tell is re-read. `read_many` keeps the same identities per
path. It is a plain `Store` otherwise (every call delegates).

Digests must be pure functions of (path, data) and must not be mutated by
callers: cached values are shared between scans.
"""

from __future__ import annotations

import dataclasses
import errno
import gc
import os
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio.to_thread
import msgspec

from agentcoordd.model import bounds
from agentcoordd.store.base import (
    Capabilities,
    Forbidden,
    Get,
    InvalidRecord,
    Page,
    Store,
    UnreadableEntries,
    Versioned,
    known,
    list_all,
)
from agentcoordd.store.dirindex import RACY_NS, DirIndex, DirState, Listing
from agentcoordd.store.local import LocalStore

T = TypeVar("T")

# Per digest name; oldest entries are evicted first past this many.
DEFAULT_MAX_ENTRIES = 250_000

# Parsed records are acyclic (JSON trees) and long-lived: once this many more are
# cached, they are moved out of the cyclic collector's sight (`gc.freeze`), so a
# full collection — triggered by any request that allocates — no longer walks
# them all (76 ms per collection with a 10k/100k root cached). Reference counting
# still frees them when evicted.
FREEZE_AFTER = 10_000

_IDENT = struct.Struct("<QqqQ")
# A file this many times its record bound is not read at all (a pretty-printed
# record is larger than its compact JSON, never by this much).
NEVER_READ = 16
_decoder = msgspec.json.Decoder()


class Malformed(Exception):
    """Raised by a digest: the record is valid JSON but not usable here."""


@dataclass
class Scan(Generic[T]):
    rows: list[tuple[str, T]] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    partial: bool = False


class _Unreadable:
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


Digest = Callable[[str, Any], Any]


def caches(store: Store) -> bool:
    """True when per-record reads are cheap for this store (local files)."""
    caps = store.capabilities
    return caps.scans is not None or caps.files is not None


async def scan(
    store: Store, prefix: str, digest: Digest, name: str, *, cap: int | None = None
) -> Scan[Any]:
    """Every record below `prefix` through `digest`; see the module docstring.

    `name` identifies the digest in a cache (one name, one digest); `cap`
    bounds how many of its values a cache keeps. Store errors other than a
    single unreadable record (Unavailable, Forbidden, an invalid prefix)
    propagate to the caller.
    """
    caps = store.capabilities
    if caps.scans is not None:
        return await caps.scans.scan(prefix, digest, name, cap)
    if isinstance(caps.files, LocalStore):
        return await anyio.to_thread.run_sync(_scan_local, caps.files, prefix, digest)
    return await _scan_generic(store, prefix, digest)


async def read_many(
    store: Store, paths: Iterable[str], digest: Digest, name: str, *, cap: int | None = None
) -> Scan[Any]:
    """`digest` of each named record, in the given order; missing ones are absent."""
    caps = store.capabilities
    paths = list(paths)
    if caps.scans is not None:
        return await caps.scans.read_many(paths, digest, name, cap)
    if isinstance(caps.files, LocalStore):
        return await anyio.to_thread.run_sync(_read_local, caps.files, paths, digest, None)
    out: Scan[Any] = Scan()
    if caps.batch is not None:  # one round trip per 64 records (HTTP)
        unique = list(dict.fromkeys(paths))
        read = dict(zip(unique, await caps.batch.run_batch([Get(path) for path in unique]), strict=True))
    for path in paths:
        try:
            current = known(read[path]) if caps.batch is not None else await store.get(path)
        except InvalidRecord as exc:
            out.unreadable.append((path, exc.message))
            continue
        if current is not None:
            _apply(out, path, current.data, digest)
    return out



def _apply(out: Scan[Any], path: str, data: Any, digest: Digest) -> None:
    try:
        out.rows.append((path, digest(path, data)))
    except Malformed as exc:
        out.unreadable.append((path, str(exc)))


async def _scan_generic(store: Store, prefix: str, digest: Digest) -> Scan[Any]:
    try:
        page = await list_all(store, prefix)
        unreadable: list[tuple[str, str]] = []
    except UnreadableEntries as exc:  # one bad record never hides the rest
        page, unreadable = exc.page, exc.unreadable
    out: Scan[Any] = Scan(unreadable=list(unreadable), partial=page.partial)
    for entry in page.entries:
        _apply(out, entry.path, entry.data, digest)
    return out


# ---- the local implementation (blocking; runs in one worker thread) --------


def _ident(st: os.stat_result) -> bytes:
    return _IDENT.pack(st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


# The identity of bytes read too soon after their last change: another write in
# the same timestamp tick would leave (mtime, ctime, size) as they are, so a stat
# never confirms it and the record is read again.
_RACY = b"racy"


def _read_ident(st: os.stat_result) -> bytes:
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_NS:
        return _RACY
    return _ident(st)


def _load(full: str, path: str, digest: Digest) -> tuple[bytes, Any] | None:
    """(identity of the bytes read, digest or _Unreadable); None if gone."""
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Forbidden(f"symlink below state root refused: {path}") from None
        return b"", _Unreadable(f"cannot read: {exc.strerror or exc}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", _Unreadable("not a regular file")
        if st.st_size > NEVER_READ * bounds.MAX_BYTES:  # not even read into memory
            return _read_ident(st), _Unreadable(bounds.too_large(st.st_size))
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    except OSError as exc:
        return b"", _Unreadable(f"cannot read: {exc.strerror or exc}")
    finally:
        os.close(fd)
    ident = _read_ident(st)
    raw = b"".join(chunks)
    problem = bounds.problem(raw)
    if problem is not None:
        return ident, _Unreadable(problem)
    try:
        data = _decoder.decode(raw)
    except msgspec.DecodeError:
        return ident, _Unreadable("invalid JSON")
    try:
        return ident, digest(path, data)
    except Malformed as exc:
        return ident, _Unreadable(str(exc))


def _lookup(
    root: str,
    path: str,
    digest: Digest,
    cache: dict[str, tuple[Any, Any]] | None,
    inode: int | None = None,
) -> Any:
    """The digest of one record (cached while its identity is unchanged), or None.

    With `inode` (an immutable family, listed by scandir) a readable cached
    record whose inode is unchanged is trusted without a stat.
    """
    full = f"{root}/{path}"
    hit = cache.get(path) if cache is not None else None
    if hit is not None and inode is not None and hit[0] == inode:
        return hit[1]
    if cache is not None and hit is not None:
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            cache.pop(path, None)
            return None
        except OSError:
            st = None
        if st is not None and hit[0] == _ident(st):
            return hit[1]
    loaded = _load(full, path, digest)
    if loaded is None:
        if cache is not None:
            cache.pop(path, None)
        return None
    ident, value = loaded
    if cache is not None and ident:
        readable = not isinstance(value, _Unreadable)
        # Immutable records are keyed by inode alone; an unreadable one (say, a
        # half-written file of a writer that writes in place) by full identity.
        key: Any = ident
        if inode is not None and readable and ident != _RACY:
            read_inode = _IDENT.unpack(ident)[0]
            key = inode if read_inode == inode else read_inode  # the listing's int: one object per record
        cache[path] = (key, value)
    return value


def _collect(out: Scan[Any], path: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, _Unreadable):
        out.unreadable.append((path, value.reason))
    else:
        out.rows.append((path, value))


# Families whose records are never rewritten in place (append-only events;
# lane_closed is create-only): a cached record is valid while its inode is.
_IMMUTABLE = ("events",)


def _scan_local(store: LocalStore, prefix: str, digest: Digest) -> Scan[Any]:
    """A scan without a cache (a LocalStore used on its own)."""
    root = str(store.root)
    out: Scan[Any] = Scan()
    for path, _inode in store.walk_sync(prefix):
        _collect(out, path, _lookup(root, path, digest, None))
    return out


def _read_local(
    store: LocalStore, paths: list[str], digest: Digest, cache: dict[str, tuple[Any, Any]] | None
) -> Scan[Any]:
    from agentcoordd.model import ids

    root = str(store.root)
    out: Scan[Any] = Scan()
    for path in paths:
        ids.state_path(path)
        store._check_no_symlinks(path.rpartition("/")[0], must_be_dir=False)
        _collect(out, path, _lookup(root, path, digest, cache))
    return out


@dataclass(slots=True, eq=False)
class _DirRows:
    """One digest's view of one directory: its records' cached values (path ->
    (identity, value), as `_lookup` keeps them) and the rows they made."""

    state: DirState
    listing: Listing
    gen: int
    entries: dict[str, tuple[Any, Any]]
    rows: list[tuple[str, Any]]
    unreadable: list[tuple[str, str]]


def _dir_rows(
    root: str, d: str, state: DirState, listing: Listing, memo: _DirRows | None, digest: Digest, immutable: bool
) -> _DirRows:
    """The rows of directory `d` (its path with a trailing slash), reusing `memo`
    for what the index says did not change."""
    fresh = memo is None or memo.state is not state or memo.gen < state.reset_gen
    if (memo is not None and not fresh and memo.listing is listing and memo.gen == state.gen
            and (state.watched or immutable)):
        return memo  # nothing changed: no system call
    entries = {} if memo is None or fresh else memo.entries
    # Watched: only records named by a notice since the memo are checked again.
    changed = None
    if memo is not None and not fresh and state.watched:
        changed = {d + name for name, gen in state.name_gens.items() if gen > memo.gen}
    kept: dict[str, tuple[Any, Any]] = {}
    rows: list[tuple[str, Any]] = []
    unreadable: list[tuple[str, str]] = []
    for path, inode in listing.files:
        hit = entries.get(path)
        if hit is None or changed is None or path in changed:
            value = _lookup(root, path, digest, entries, inode if immutable else None)
            hit = entries.get(path)
        else:
            value = hit[1]
        if hit is not None:
            kept[path] = hit
        if value is None:
            continue
        if isinstance(value, _Unreadable):
            unreadable.append((path, value.reason))
        else:
            rows.append((path, value))
    return _DirRows(state, listing, state.gen, kept, rows, unreadable)


class CachingStore:
    """A LocalStore with a parsed-record cache for `scan` / `read_many`."""

    def __init__(self, inner: LocalStore, *, max_entries: int = DEFAULT_MAX_ENTRIES, notify: bool = True) -> None:
        self.inner = inner
        self.name = inner.name
        self.root = inner.root
        self.max_entries = max_entries
        # The local root's own (blocking calls, path listing and files go to it
        # directly), plus cached scans.
        self.capabilities: Capabilities = dataclasses.replace(inner.capabilities, scans=self)
        self._notify = notify
        self._index: DirIndex | None = None  # opened by the first scan
        self._scans: dict[str, dict[str, _DirRows]] = {}  # digest name -> directory -> rows
        self._caches: dict[str, dict[str, tuple[Any, Any]]] = {}  # read_many: digest name -> path -> entry
        self._frozen = 0  # cached entries when the collector last froze
        self._lock = threading.Lock()

    # ---- Store protocol: plain delegation --------------------------------

    async def get(self, path: str) -> Versioned | None:
        return await self.inner.get(path)

    async def create(self, path: str, data: Any) -> str:
        return await self.inner.create(path, data)

    async def replace(self, path: str, data: Any, version: str) -> str:
        return await self.inner.replace(path, data, version)

    async def delete(self, path: str, version: str) -> None:
        await self.inner.delete(path, version)

    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Page:
        return await self.inner.list(prefix, limit, cursor)

    async def aclose(self) -> None:
        self.clear()
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None
        await self.inner.aclose()

    async def list_paths(self, prefix: str) -> list[str]:
        return await self.inner.list_paths(prefix)


    # ---- cached reads ------------------------------------------------------

    async def scan(
        self, prefix: str, digest: Digest, name: str, cap: int | None = None
    ) -> Scan[Any]:
        return await anyio.to_thread.run_sync(self._scan_sync, prefix, digest, name, cap)

    async def read_many(
        self, paths: list[str], digest: Digest, name: str, cap: int | None = None
    ) -> Scan[Any]:
        return await anyio.to_thread.run_sync(self._read_sync, paths, digest, name, cap)

    @property
    def change_detection(self) -> str:
        """How a warm scan learns what changed: "inotify" or "stat"."""
        with self._lock:
            return self._opened_index().mechanism

    def _opened_index(self) -> DirIndex:
        if self._index is None:
            self._index = DirIndex(str(self.root), notify=self._notify)
        return self._index

    def _scan_sync(self, prefix: str, digest: Digest, name: str, cap: int | None) -> Scan[Any]:
        with self._lock:
            memos = self._scans.setdefault(name, {})
            try:
                return self._scan_indexed(prefix, digest, memos)
            finally:
                self._trim_scans(memos, cap)
                self._freeze_when_grown()

    def _scan_indexed(self, prefix: str, digest: Digest, memos: dict[str, _DirRows]) -> Scan[Any]:
        prefix = self.inner.checked_prefix(prefix)
        index = self._opened_index()
        index.refresh()
        root = str(self.root)
        below = prefix + "/"
        try:
            start = os.lstat(f"{root}/{prefix}").st_ino
        except FileNotFoundError:
            start = None
        except OSError as exc:
            raise self.inner._os_error("cannot list", prefix, exc) from None
        found: list[tuple[str, DirState, Listing]] = []
        mixed = False  # a directory holding records and subdirectories
        stack = [] if start is None else [(prefix, start)]
        while stack:
            rel, ino = stack.pop()
            state = index.state(rel, ino)
            try:
                listing = index.listing(state)
            except OSError as exc:
                raise self.inner._os_error("cannot list", rel, exc) from None
            if listing is None:
                continue
            if listing.symlink is not None:
                raise Forbidden(f"symlink below state root refused: {rel}/{listing.symlink}")
            stack.extend((f"{rel}/{sub}", sub_ino) for sub, sub_ino in listing.subdirs.items())
            if listing.files:
                mixed = mixed or bool(listing.subdirs)
                found.append((rel + "/", state, listing))
        immutable = prefix.split("/", 1)[0] in _IMMUTABLE
        seen = set()
        for d, state, listing in found:
            memos[d] = _dir_rows(root, d, state, listing, memos.get(d), digest, immutable)
            seen.add(d)
        for gone in [d for d in memos if (d == below or d.startswith(below)) and d not in seen]:
            del memos[gone]
        found.sort(key=lambda item: item[0])
        out: Scan[Any] = Scan()
        for d, _state, _listing in found:
            memo = memos[d]
            out.rows.extend(memo.rows)
            out.unreadable.extend(memo.unreadable)
        if mixed:  # rare layout: records beside subdirectories; path order needs a full sort
            out.rows.sort(key=lambda row: row[0])
            out.unreadable.sort()
        return out

    def _read_sync(self, paths: list[str], digest: Digest, name: str, cap: int | None) -> Scan[Any]:
        with self._lock:
            cache = self._caches.setdefault(name, {})
            try:
                return _read_local(self.inner, paths, digest, cache)
            finally:
                self._trim(cache, cap)

    def _freeze_when_grown(self) -> None:
        cached = sum(len(memo.entries) for memos in self._scans.values() for memo in memos.values())
        if cached - self._frozen > FREEZE_AFTER:
            gc.collect()  # garbage first: only what is alive is frozen
            gc.freeze()
            self._frozen = cached
        elif cached < self._frozen:  # evicted or deleted: count growth from here
            self._frozen = cached

    def _limit(self, cap: int | None) -> int:
        return self.max_entries if cap is None else min(cap, self.max_entries)

    def _trim(self, cache: dict[str, tuple[Any, Any]], cap: int | None) -> None:
        excess = len(cache) - self._limit(cap)
        if excess > 0:
            for key in list(iter_first(cache, excess)):
                del cache[key]

    def _trim_scans(self, memos: dict[str, _DirRows], cap: int | None) -> None:
        """Past the limit, whole directories are forgotten (the oldest first)."""
        excess = sum(len(memo.entries) for memo in memos.values()) - self._limit(cap)
        while excess > 0 and memos:
            oldest = next(iter(memos))
            excess -= len(memos.pop(oldest).entries)

    def clear(self) -> None:
        with self._lock:
            self._scans.clear()
            self._caches.clear()

    def cached_entries(self) -> dict[str, int]:
        """Entries per digest name (for `doctor` / tests)."""
        counts = {name: sum(len(memo.entries) for memo in memos.values()) for name, memos in self._scans.items()}
        for name, cache in self._caches.items():
            counts[name] = counts.get(name, 0) + len(cache)
        return counts


def iter_first(cache: dict[str, Any], count: int) -> Iterable[str]:
    it = iter(cache)
    for _ in range(count):
        try:
            yield next(it)
        except StopIteration:
            return
