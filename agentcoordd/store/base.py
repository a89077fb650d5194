"""The Store protocol every backend implements, and its one error taxonomy.

Records are JSON values (normally objects). A version is an opaque token: the
SHA-256 of the file bytes locally, the Worker's integer version over HTTP, the
etcd mod_revision. Writes are create-only or compare-and-swap; nothing
overwrites blindly.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import msgspec

from agentcoordd.model.errors import OperationalError, UsageError


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


class Store(Protocol):
    """What coord needs from a backend. Paths are validated by the store too."""

    name: str

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


async def list_all(store: Store, prefix: str) -> Page:
    """Every record below `prefix`, following cursors; partial if any page was."""
    entries: list[Entry] = []
    partial = False
    cursor: str | None = None
    while True:
        page = await store.list(prefix, None, cursor)
        entries.extend(page.entries)
        partial = partial or page.partial
        if not page.next_cursor:
            return Page(entries, None, partial)
        cursor = page.next_cursor
