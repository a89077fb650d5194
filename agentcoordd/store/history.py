"""JSON Lines history kept in a local state root (read-only).

Dashboards and batch runners append `events/*.jsonl`, `history/*.jsonl` and
`events/batches/<batch-id>.jsonl`, one JSON object per line, stamped `at` or
`timestamp`. `JsonlReader` reads them for a LocalStore: a line that is not a
JSON object, not UTF-8, or carries no usable `at`/`timestamp` is reported as a
problem (file + line number) and skipped — one bad line never hides the rest
and never raises. A file that is a symlink, not a regular file, or larger than
`MAX_JSONL_BYTES` is reported and skipped whole. Parsed files are cached per
reader by (inode, mtime, ctime, size); nothing here ever writes.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from agentcoordd.model.timefmt import event_time

MAX_JSONL_BYTES = 64 * 1024 * 1024
MAX_JSONL_LINE_BYTES = 1024 * 1024
MAX_PROBLEMS = 200
CACHED_FILES = 512
_decoder = msgspec.json.Decoder()

Rows = list[dict[str, Any]]


@dataclass
class JsonlHistory:
    events: Rows = field(default_factory=list)
    problems: Rows = field(default_factory=list)  # {file, line?, reason}
    files: list[str] = field(default_factory=list)


class JsonlReader:
    """The JSON Lines history of one state root (blocking; call from a worker thread)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[str, tuple[tuple[int, int, int, int], Rows, Rows]] = {}
        self._lock = threading.Lock()

    def history(self, batch_id: str | None) -> JsonlHistory:
        """Every event, or with `batch_id` only that batch's: `events/batches/<id>.jsonl`
        plus the lines of `events/*.jsonl` / `history/*.jsonl` naming it. Returned
        events must not be mutated (they are cached)."""
        out = JsonlHistory()
        files, out.problems = self._files(batch_id)
        for rel in files:
            events, problems = self.read_file(rel)
            out.files.append(rel)
            out.problems.extend(problems)
            if batch_id is None:
                out.events.extend(events)
            else:
                out.events.extend(e for e in events if e.get("batch_id") == batch_id)
        if len(out.problems) > MAX_PROBLEMS:
            dropped = len(out.problems) - MAX_PROBLEMS
            out.problems = out.problems[:MAX_PROBLEMS] + [
                {"file": "*", "reason": f"{dropped} more problems not shown"}]
        return out

    def batch_file(self, batch_id: str) -> Rows:
        """The events of `events/batches/<batch-id>.jsonl` alone (a stop check)."""
        rel = f"events/batches/{batch_id}.jsonl"
        if not os.path.lexists(self.root / rel):
            return []
        return self.read_file(rel)[0]

    def _files(self, batch_id: str | None) -> tuple[list[str], Rows]:
        """Relative paths of the JSONL files in scope, and problems found listing them."""
        problems: Rows = []
        out: list[str] = []

        def listing(rel_dir: str) -> list[str]:
            full = self.root / rel_dir
            try:
                mode = os.lstat(full).st_mode
            except FileNotFoundError:
                return []
            except OSError as exc:
                problems.append({"file": rel_dir, "reason": f"cannot inspect: {exc.strerror or exc}"})
                return []
            if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
                problems.append({"file": rel_dir, "reason": "not a directory (symlinks are refused)"})
                return []
            try:
                names = sorted(os.listdir(full))
            except OSError as exc:
                problems.append({"file": rel_dir, "reason": f"cannot list: {exc.strerror or exc}"})
                return []
            return [f"{rel_dir}/{n}" for n in names if n.endswith(".jsonl") and not n.startswith(".")]

        out.extend(listing("events"))
        out.extend(listing("history"))
        if batch_id is None:
            out.extend(listing("events/batches"))
        else:
            own = f"events/batches/{batch_id}.jsonl"
            if own in listing("events/batches"):
                out.append(own)
        return out, problems

    def read_file(self, rel: str) -> tuple[Rows, Rows]:
        full = self.root / rel
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            return [], [{"file": rel, "reason": f"cannot open (symlinks are refused): {exc.strerror or exc}"}]
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return [], [{"file": rel, "reason": "not a regular file"}]
            if st.st_size > MAX_JSONL_BYTES:
                return [], [{"file": rel, "reason": f"file too large ({st.st_size} bytes, limit {MAX_JSONL_BYTES})"}]
            ident = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
            with self._lock:
                hit = self._cache.get(rel)
            if hit is not None and hit[0] == ident:
                return hit[1], hit[2]
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        except OSError as exc:
            return [], [{"file": rel, "reason": f"cannot read: {exc.strerror or exc}"}]
        finally:
            os.close(fd)
        events, problems = parse_jsonl(b"".join(chunks), rel)
        with self._lock:
            if len(self._cache) >= CACHED_FILES:
                self._cache.pop(next(iter(self._cache)))
            self._cache[rel] = (ident, events, problems)
        return events, problems


def parse_jsonl(raw: bytes, rel: str) -> tuple[Rows, Rows]:
    events: Rows = []
    problems: Rows = []
    default_batch = None
    if rel.startswith("events/batches/"):
        default_batch = rel.rsplit("/", 1)[-1].removesuffix(".jsonl")
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        if len(line) > MAX_JSONL_LINE_BYTES:
            problems.append({"file": rel, "line": number, "reason": "line too long"})
            continue
        try:
            data = _decoder.decode(line)
        except (msgspec.DecodeError, RecursionError) as exc:
            problems.append({"file": rel, "line": number, "reason": f"invalid JSON: {exc}"})
            continue
        if not isinstance(data, dict):
            problems.append({"file": rel, "line": number, "reason": "not a JSON object"})
            continue
        if not event_time(data):
            problems.append({"file": rel, "line": number, "reason": "no valid at/timestamp"})
            continue
        event = {k: v for k, v in data.items() if k != "schema_version" and v is not None}
        if "at" not in event:
            event["at"] = data["timestamp"]
        if default_batch is not None:
            event.setdefault("batch_id", default_batch)
        event.setdefault("type", "unknown")
        event["source"] = "jsonl"
        event["path"] = f"{rel}:{number}"
        events.append(event)
    return events, problems
