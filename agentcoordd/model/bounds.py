"""How deep and how large a stored record may be.

Every store reads with these bounds (local files, the Worker, etcd) and writes
nothing outside them, and our Worker accepts nothing outside them
(worker/src/index.ts), so whatever one machine can write, every other can read
(docs/backends.md, "Record bounds"):

* **depth**: arrays and objects nest at most `MAX_DEPTH` levels (a record of
  ours nests 4–6; parsers recurse per level and stop near 1,000) — the Worker
  refuses deeper data with the same number;
* **size**: its compact JSON text is at most `MAX_BYTES` (1 MiB; a 1,000-lane
  batch manifest is about 350 KB) — the Worker's own caps lie within it (256
  KiB, 1 MiB under `archive/`: the existing Worker's protocol).

A record outside them is *unreadable*, like one that does not parse: its reader
names it and serves everything else. `problem(raw, path)` measures the text
before anything parses it (jsonscan: no recursion).
"""

from __future__ import annotations

from agentcoordd.model import jsonscan

MAX_DEPTH = 64
MAX_BYTES = 1024 * 1024
_NOT_LAYOUT = bytes(b for b in range(256) if b not in b" \t\n\r")


def too_large(size: int) -> str:
    return f"JSON of {size} bytes (the bound is {MAX_BYTES // (1024 * 1024)} MiB)"


def compact_size(raw: bytes) -> int:
    """The length of `raw` without the whitespace between its tokens (a local record
    is pretty-printed; the bound is on its compact text, as the Worker stores it)."""
    layout = len(raw.translate(None, _NOT_LAYOUT))
    if not layout:
        return len(raw)
    inside = sum(len(s.translate(None, _NOT_LAYOUT)) for s in jsonscan.strings(raw))
    return len(raw) - layout + inside


def problem(raw: bytes) -> str | None:
    """Why the record text `raw` is outside the bounds; None when inside."""
    if len(raw) > MAX_BYTES and (size := compact_size(raw)) > MAX_BYTES:
        return too_large(size)
    if not jsonscan.within(raw, MAX_DEPTH):
        return f"JSON nested {jsonscan.depth(raw)} levels deep (the bound is {MAX_DEPTH})"
    return None
