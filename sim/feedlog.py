"""The run's live feed: one `events --follow --json` process for the whole fleet.

`start` launches it right after the batch is registered (stdout to
feed.jsonl); `finish` lets it catch up with the final listing and ends it.
The verifier (`check`) then holds the feed against the final `status
--all-events` listing: every event arrived exactly once, nothing else arrived,
and the printed order is (at, event_id) order except for events the feed
marked `late` (written with an earlier `at` than one already printed: whole-
second timestamps of concurrent writers).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

FEED = "feed.jsonl"


def start(ctl: str, env: dict[str, str], batch: str, out: Path) -> subprocess.Popen:
    with open(out / FEED, "ab") as sink, open(out / "feed.err", "ab") as errors:
        # The child keeps its own copies of both descriptors.
        return subprocess.Popen([ctl, "events", "--batch-id", batch, "--follow", "--json"],
                                env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=errors)


def _printed_ids(out: Path) -> set[str]:
    return {row.get("event_id", "") for row in read(out)}


def finish(proc: subprocess.Popen, out: Path, expected: set[str], wait: float = 30.0) -> float:
    """Give the follower up to `wait` s to print every expected event, then end it (SIGTERM).
    Returns the seconds it needed (or `wait`)."""
    started = time.monotonic()
    while time.monotonic() - started < wait and proc.poll() is None:
        if expected <= _printed_ids(out):
            break
        time.sleep(0.2)
    needed = time.monotonic() - started
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return needed


def read(out: Path) -> list[dict[str, Any]]:
    rows = []
    path = out / FEED
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line torn by the SIGTERM at the end
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _key(event: dict[str, Any]) -> tuple[str, str]:
    return (str(event.get("event_id", "")), str(event.get("type", "")))


def check(out: Path, events: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """(violations, summary) of the feed against the final listing `events`."""
    rows = read(out)
    violations: list[str] = []
    printed = Counter(_key(r) for r in rows)
    listed = Counter(_key(e) for e in events)
    for key, n in printed.items():
        if n > 1:
            violations.append(f"feed: event {key[0]} ({key[1]}) printed {n} times")
    missing = sorted(k for k in listed if k not in printed)
    extra = sorted(k for k in printed if k not in listed)
    for key in missing[:20]:
        violations.append(f"feed: event {key[0]} ({key[1]}) never printed by events --follow")
    for key in extra[:20]:
        violations.append(f"feed: printed event {key[0]} ({key[1]}) is not in the final listing")
    # Lateness is judged by `at` alone (docs/events.md): within one second the
    # id order says nothing, so only an earlier `at` than the high-water needs `late`.
    high_water = ""
    late = 0
    for r in rows:
        at, event_id = str(r.get("at", "")), str(r.get("event_id", ""))
        if r.get("late"):
            late += 1
            if at >= high_water:
                violations.append(f"feed: event {event_id} marked `late` but not earlier than the high-water")
        elif at < high_water:
            violations.append(f"feed: event {event_id} printed out of order without `late`")
        else:
            high_water = at
        if not r.get("cursor"):
            violations.append(f"feed: event {event_id} printed without a cursor")
    return violations, {"feed_events": len(rows), "feed_late": late, "feed_missing": len(missing)}
