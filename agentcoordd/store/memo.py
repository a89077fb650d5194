"""Listing pages kept for revalidation: the same listing again asks the backend
whether anything below the prefix changed (HTTP: an ETag; etcd: a revision and
a key count) and, when nothing did, is answered from what was kept.

Kept are the raw bytes a page was decoded from, never the decoded records, so
every caller gets records of its own to change. The memo holds at most `budget`
bytes in all; the oldest page kept is dropped first.
"""

from __future__ import annotations

from typing import Generic, TypeVar

Key = tuple[str, int | None, str | None]  # (prefix, limit, cursor) of a listing
Tag = TypeVar("Tag")
Kept = TypeVar("Kept")

LISTING_MEMO_BYTES = 32 * 1024 * 1024


class ListingMemo(Generic[Tag, Kept]):
    def __init__(self, budget: int = LISTING_MEMO_BYTES) -> None:
        self.budget = budget
        self.used = 0
        self._kept: dict[Key, tuple[Tag, Kept, int]] = {}

    def get(self, key: Key) -> tuple[Tag, Kept] | None:
        found = self._kept.get(key)
        return None if found is None else (found[0], found[1])

    def drop(self, key: Key) -> None:
        old = self._kept.pop(key, None)
        if old is not None:
            self.used -= old[2]

    def keep(self, key: Key, tag: Tag | None, kept: Kept, size: int) -> None:
        """Keep `kept` (`size` bytes) under `tag`; no tag or too big: keep nothing."""
        self.drop(key)
        if tag is None or size > self.budget:
            return
        self._kept[key] = (tag, kept, size)
        self.used += size
        while self.used > self.budget:
            self.drop(next(iter(self._kept)))
