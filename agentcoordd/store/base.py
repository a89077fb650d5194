"""The Store protocol every backend implements, and its one error taxonomy.

Records are JSON values (normally objects). A version is an opaque token: the
SHA-256 of the file bytes locally, the Worker's integer version over HTTP, the
etcd mod_revision. Writes are create-only or compare-and-swap; nothing
overwrites blindly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import anyio
import msgspec

from agentcoordd.model import bounds
from agentcoordd.model.clockskew import Offset
from agentcoordd.model.errors import OperationalError, UsageError

T = TypeVar("T")
_decoder = msgspec.json.Decoder()


class StoreError(OperationalError):
    """Base of backend errors; exit 2 unless a subclass says otherwise."""


class NotFound(StoreError):
    pass


class Conflict(StoreError):
    """A create-only write met an existing record, or a CAS met a newer version."""

    def __init__(self, message: str, kind: Literal["already_exists", "version_conflict"]):
        super().__init__(message)
        self.kind = kind


class Forbidden(StoreError):
    """The backend refused this path for the caller's credentials or layout."""


class Unavailable(StoreError):
    """The backend could not be reached or failed; the result is UNKNOWN."""


class InvalidRecord(StoreError):
    """A stored record is not valid JSON (or not what its family requires)."""


class UnreadableEntries(InvalidRecord):
    """A listing met records it cannot decode (say, JSON holding a lone UTF-16
    surrogate, stored by a Worker that accepts it). `page` is everything else
    the listing returned (its cursor and `partial` included); `unreadable`
    names the others as (path, reason). Callers that report unreadable records
    one by one (scans, doctor) carry on with `page`; any other caller sees an
    InvalidRecord, as it would for a torn local file."""

    def __init__(self, message: str, page: Page, unreadable: list[tuple[str, str]]):
        super().__init__(message)
        self.page = page
        self.unreadable = unreadable


class InvalidPath(UsageError):
    """The caller asked for a path outside the state grammar."""


class Versioned(msgspec.Struct, frozen=True):
    data: Any
    version: str


class Entry(msgspec.Struct, frozen=True):
    path: str
    data: Any
    version: str


class Page(msgspec.Struct, frozen=True):
    entries: list[Entry]
    next_cursor: str | None = None
    # True when the backend filtered the listing by the caller's scope: what is
    # missing is unknown, so audits must not conclude "complete" from it.
    partial: bool = False


# ---- optional capabilities: typed, and named by each store --------------------


class GroupCommit(Protocol):
    """One thread's writes made durable together (a local store's store/commit.py):
    a write's failure is charged to the `owner` set when it was made; after the
    block, `failed` maps each such owner to its error."""

    owner: Hashable
    failed: dict[Hashable, Exception]


class BlockingStore(Protocol):
    """Calls that can run inline in one worker thread (local files): the daemon
    renews many lanes in one thread hop, their directory fsyncs shared."""

    def get_sync(self, path: str) -> Versioned | None: ...

    def write_sync(self, path: str, data: Any, expected: str | None) -> str: ...

    def update_sync(self, path: str, decide: Callable[[Versioned | None], tuple[Any, T]]) -> T:
        """Read, `decide` (record to write or None; result) and write under the record's lock."""
        ...

    def group_commit(self) -> AbstractContextManager[GroupCommit]:
        """Writes by this thread in the block are made durable together at its end;
        the caller reads which of them failed from `failed` (nothing is raised)."""
        ...

    async def in_round(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`, made of the calls above, in one of the store's write rounds
        (store.rounds); a busy record lock is waited for between rounds."""
        ...


class PathListing(Protocol):
    async def list_paths(self, prefix: str) -> list[str]:
        """Record paths below `prefix`, sorted, without reading them."""
        ...


class Introspection(Protocol):
    """A remote service that can say whether it is up and who the caller is."""

    async def health(self) -> bool: ...

    async def whoami(self) -> Any: ...


class ClockReference(Protocol):
    """A backend with a clock of its own: how far it is from this machine's
    (store/clockref.py). Lease decisions are judged against it (coord/lease.py)."""

    def offset(self) -> Offset | None:
        """The latest estimate, without asking the backend (None: never measured)."""
        ...

    async def measured(self) -> Offset | None:
        """The estimate, measured again first when it is stale (None: the backend gives no time)."""
        ...


class ArchiveMoves(Protocol):
    async def move_to_archive(self, path: str, version: str) -> str:
        """Move `path` at `version` to `archive/<path>` in one step; the archive version."""
        ...


class LocalFiles(Protocol):
    """A local state root: where it is, and the JSON Lines history dashboards keep
    there (store/history.py; blocking calls)."""

    root: Path

    def jsonl_history(self, batch_id: str | None) -> Any: ...

    def jsonl_batch_file(self, batch_id: str) -> list[dict[str, Any]]: ...

    def events_fingerprint(self, batch_id: str) -> tuple[int, ...]:
        """Changes whenever an event of the batch is added or removed (two stats)."""
        ...


class Scanning(Protocol):
    """Whole-family reads through a digest, with a parsed-record cache (store/cache.py)."""

    async def scan(self, prefix: str, digest: Any, name: str, cap: int | None = None) -> Any: ...

    async def read_many(self, paths: list[str], digest: Any, name: str,
                        cap: int | None = None) -> Any: ...


# ---- batched operations (BatchOps) --------------------------------------------


@dataclass(frozen=True)
class Get:
    path: str


@dataclass(frozen=True)
class Create:
    path: str
    data: Any


@dataclass(frozen=True)
class Replace:
    path: str
    data: Any
    version: str


@dataclass(frozen=True)
class Delete:
    path: str
    version: str


Op = Get | Create | Replace | Delete
# Per op, what its single call returns (Versioned | None for Get, the new version
# for Create/Replace, None for Delete) or the error it raises (a StoreError, or
# InvalidPath for a path outside the grammar).
Outcome = Any


def known(outcome: Outcome) -> Any:
    """An op's result, or its error raised as the single call would have raised it."""
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


class BatchOps(Protocol):
    async def run_batch(self, ops: list[Op]) -> list[Outcome]:
        """Each op as its single call would do it; one op's error is its outcome,
        never its neighbours'. The ops name distinct paths (their order is then
        immaterial). Raises only when no op's outcome is known."""
        ...


class ChangeNotices(Protocol):
    """Change detection below a prefix (the event feed's one source per batch)."""

    def changes(self, prefix: str) -> AsyncIterator[str]:
        """Yields once when watching has begun, then whenever records below `prefix`
        may have changed (never misses one; may yield without a change). The value
        names the mechanism ("watch", "inotify", "stat", "poll") for `daemon status`."""
        ...


@dataclass(frozen=True)
class Capabilities:
    """What a store can do beyond the protocol; None where it cannot."""

    blocking: BlockingStore | None = None
    scans: Scanning | None = None
    paths: PathListing | None = None
    introspection: Introspection | None = None
    archive: ArchiveMoves | None = None
    files: LocalFiles | None = None
    changes: ChangeNotices | None = None
    batch: BatchOps | None = None
    clock: ClockReference | None = None  # None: the backend's clock is this machine's (local files)


class Store(Protocol):
    """What coord needs from a backend. Paths are validated by the store too."""

    name: str
    capabilities: Capabilities

    async def get(self, path: str) -> Versioned | None: ...

    async def create(self, path: str, data: Any) -> str:
        """Create-only write; raises Conflict(already_exists). Returns the version."""
        ...

    async def replace(self, path: str, data: Any, version: str) -> str:
        """Compare-and-swap write; raises Conflict(version_conflict) or NotFound."""
        ...

    async def delete(self, path: str, version: str) -> None:
        """Compare-and-swap delete; raises Conflict(version_conflict) or NotFound."""
        ...

    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Page:
        """Records below a directory prefix in path order, `path > cursor`."""
        ...

    async def aclose(self) -> None: ...


def record_problem(raw: bytes, path: str) -> tuple[Any, str | None]:
    """(the record, None) when its JSON text reads within the bounds every store reads
    with (model.bounds); else (None, why it cannot be read)."""
    problem = bounds.problem(raw)
    if problem is not None:
        return None, problem
    try:
        return _decoder.decode(raw), None
    except msgspec.DecodeError:
        return None, "invalid JSON"


def decode_record(raw: bytes, path: str) -> Any:
    """A stored record; InvalidRecord naming it when it cannot be read."""
    data, problem = record_problem(raw, path)
    if problem is not None:
        raise InvalidRecord(f"{problem} in record {path}")
    return data


def page_of(rows: Iterable[tuple[str, bytes, str]], next_cursor: str | None = None,
            partial: bool = False, unreadable: list[tuple[str, str]] | None = None) -> Page:
    """A page of (path, JSON text, version) rows, each read by record_problem; rows it
    cannot read (and `unreadable` ones found before) are named, (path, why), in one
    UnreadableEntries that carries every other row."""
    entries: list[Entry] = []
    unreadable = list(unreadable or ())
    for path, raw, version in rows:
        data, problem = record_problem(raw, path)
        if problem is None:
            entries.append(Entry(path, data, version))
        else:
            unreadable.append((path, problem))
    page = Page(entries, next_cursor, partial)
    if unreadable:
        path, why = unreadable[0]
        more = f"{len(unreadable)} unreadable records; the first: " if len(unreadable) > 1 else ""
        raise UnreadableEntries(f"{more}{why} in record {path}", page, unreadable)
    return page


async def run_singly(store: Store, ops: list[Op], concurrency: int = 1) -> list[Outcome]:
    """BatchOps.run_batch for any store: each op as its single call, `concurrency`
    at a time (1: one after another, in order)."""
    outcomes: list[Outcome] = [None] * len(ops)
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(index: int, op: Op) -> None:
        async with limiter:
            try:
                if isinstance(op, Get):
                    outcomes[index] = await store.get(op.path)
                elif isinstance(op, Create):
                    outcomes[index] = await store.create(op.path, op.data)
                elif isinstance(op, Replace):
                    outcomes[index] = await store.replace(op.path, op.data, op.version)
                else:
                    await store.delete(op.path, op.version)
            except Exception as exc:  # noqa: BLE001 - this op's outcome, never its neighbours'
                outcomes[index] = exc

    if concurrency == 1:
        for index, op in enumerate(ops):
            await one(index, op)
        return outcomes
    async with anyio.create_task_group() as tg:
        for index, op in enumerate(ops):
            tg.start_soon(one, index, op)
    return outcomes


async def list_all(store: Store, prefix: str) -> Page:
    """Every record below `prefix`, following cursors; partial if any page was.

    Pages with undecodable records are read to the end too; then one
    UnreadableEntries carries all the readable entries and names the others.
    """
    entries: list[Entry] = []
    unreadable: list[tuple[str, str]] = []
    first = ""
    partial = False
    cursor: str | None = None
    while True:
        try:
            page = await store.list(prefix, None, cursor)
        except UnreadableEntries as exc:
            page = exc.page
            first = first or exc.message
            unreadable.extend(exc.unreadable)
        entries.extend(page.entries)
        partial = partial or page.partial
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    if unreadable:
        raise UnreadableEntries(first, Page(entries, None, partial), unreadable)
    return Page(entries, None, partial)
