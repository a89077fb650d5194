"""Scanning many records at once, and a parsed-record cache for LocalStore.

Status and audit read whole families (`claims`, `heartbeats`, `events/…`).
`scan(store, prefix, digest, name)` returns, in path order, what a *digest*
function made of each record, plus the records that could not be read
(invalid JSON, not what the digest needs) — one bad record never hides the
rest. A digest keeps only what its reader needs, so a scan over 100,000
events holds 100,000 small values, never 100,000 parsed documents.

`CachingStore(LocalStore(root))` is the daemon's long-lived wrapper: it keeps
each digest keyed by path and the file's (inode, mtime_ns, ctime_ns, size),
so the next scan stats every file (cheap) and re-reads only what changed.
Writers replace records by rename (new inode) and the existing Ruby tool
rewrites in place (new mtime/size), so either kind of change is seen; a
record deleted since the last scan is dropped from the cache. It is a plain
`Store` otherwise (every call delegates), so the daemon opens
`CachingStore(LocalStore(root))` once per local root and keeps it.

Digests must be pure functions of (path, data) and must not be mutated by
callers: cached values are shared between scans.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio.to_thread
import msgspec

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
from agentcoordd.store.local import LocalStore

T = TypeVar("T")

# Per digest name; oldest entries are evicted first past this many.
DEFAULT_MAX_ENTRIES = 250_000

_IDENT = struct.Struct("<QqqQ")
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
        return await anyio.to_thread.run_sync(_scan_local, caps.files, prefix, digest, None)
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
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    except OSError as exc:
        return b"", _Unreadable(f"cannot read: {exc.strerror or exc}")
    finally:
        os.close(fd)
    try:
        data = _decoder.decode(b"".join(chunks))
    except msgspec.DecodeError:
        return _ident(st), _Unreadable("invalid JSON")
    try:
        return _ident(st), digest(path, data)
    except Malformed as exc:
        return _ident(st), _Unreadable(str(exc))


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
        cache[path] = (_IDENT.unpack(ident)[0] if inode is not None and readable else ident, value)
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


def _scan_local(
    store: LocalStore, prefix: str, digest: Digest, cache: dict[str, tuple[Any, Any]] | None
) -> Scan[Any]:
    listed = store.walk_sync(prefix)
    root = str(store.root)
    immutable = prefix.split("/", 1)[0] in _IMMUTABLE
    out: Scan[Any] = Scan()
    rows = out.rows
    get = cache.get if cache is not None else None
    for path, inode in listed:
        if immutable and get is not None:
            hit = get(path)
            if hit is not None and hit[0] == inode:  # the fast path of a warm scan
                rows.append((path, hit[1]))
                continue
        _collect(out, path, _lookup(root, path, digest, cache, inode if immutable else None))
    del listed
    if cache is not None:
        below = prefix + "/"
        cached_below = sum(1 for p in cache if p.startswith(below))
        if cached_below > len(rows) + len(out.unreadable):  # something was deleted
            seen = {p for p, _ in rows}
            seen.update(p for p, _ in out.unreadable)
            for stale in [p for p in cache if p.startswith(below) and p not in seen]:
                del cache[stale]
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


class CachingStore:
    """A LocalStore with a parsed-record cache for `scan` / `read_many`."""

    def __init__(self, inner: LocalStore, *, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.inner = inner
        self.name = inner.name
        self.root = inner.root
        self.max_entries = max_entries
        # The local root's own (blocking calls, path listing and files go to it
        # directly), plus cached scans.
        self.capabilities: Capabilities = dataclasses.replace(inner.capabilities, scans=self)
        self._caches: dict[str, dict[str, tuple[Any, Any]]] = {}
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

    def _scan_sync(self, prefix: str, digest: Digest, name: str, cap: int | None) -> Scan[Any]:
        with self._lock:
            cache = self._caches.setdefault(name, {})
            try:
                return _scan_local(self.inner, prefix, digest, cache)
            finally:
                self._trim(cache, cap)

    def _read_sync(self, paths: list[str], digest: Digest, name: str, cap: int | None) -> Scan[Any]:
        with self._lock:
            cache = self._caches.setdefault(name, {})
            try:
                return _read_local(self.inner, paths, digest, cache)
            finally:
                self._trim(cache, cap)

    def _trim(self, cache: dict[str, tuple[Any, Any]], cap: int | None) -> None:
        limit = self.max_entries if cap is None else min(cap, self.max_entries)
        excess = len(cache) - limit
        if excess > 0:
            for key in list(iter_first(cache, excess)):
                del cache[key]

    def clear(self) -> None:
        with self._lock:
            self._caches.clear()

    def cached_entries(self) -> dict[str, int]:
        """Entries per digest name (for `doctor` / tests)."""
        return {name: len(cache) for name, cache in self._caches.items()}


def iter_first(cache: dict[str, Any], count: int) -> Iterable[str]:
    it = iter(cache)
    for _ in range(count):
        try:
            yield next(it)
        except StopIteration:
            return
