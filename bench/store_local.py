"""LocalStore throughput: create, CAS update, get and list over N records (default 10,000).

    .venv/bin/python bench/store_local.py [--records N] [--dir PATH]

Runs through the async Store API (what coord uses: one worker-thread hop per
call) on a temporary root, sequentially, and prints ops/s. Every write is
durable (temp file + fsync + rename + fsync of the directory), so the write
numbers mostly measure the file system's fsync.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import anyio

from agentcoordd.store.local import LocalStore


def record(n: int, revision: int) -> dict:
    return {
        "schema_version": 1,
        "agent_id": f"agent-{n:06d}",
        "status": "in_progress",
        "repo": "acme/bench",
        "target": str(n),
        "revision": revision,
        "updated_at": "2026-06-13T00:30:00Z",
        "expires_at": "2026-06-13T00:45:00Z",
    }


def path(n: int) -> str:
    return f"heartbeats/agent-{n:06d}.json"


async def run(root: str, count: int) -> None:
    store = LocalStore(root)
    versions: list[str] = []

    def report(name: str, ops: int, seconds: float, unit: str = "ops") -> None:
        print(f"{name:<28} {ops:>7} {unit:<8} {seconds:8.2f} s {ops / seconds:12,.0f} {unit}/s")

    start = time.perf_counter()
    for n in range(count):
        versions.append(await store.create(path(n), record(n, 0)))
    report("create (create-only)", count, time.perf_counter() - start)

    start = time.perf_counter()
    for n in range(count):
        versions[n] = await store.replace(path(n), record(n, 1), versions[n])
    report("CAS update (replace)", count, time.perf_counter() - start)

    start = time.perf_counter()
    for n in range(count):
        got = await store.get(path(n))
        assert got is not None and got.version == versions[n]
    report("get", count, time.perf_counter() - start)

    lists = 3
    start = time.perf_counter()
    for _ in range(lists):
        page = await store.list("heartbeats")
        assert len(page.entries) == count
    elapsed = time.perf_counter() - start
    report(f"list (full, {count} records)", lists, elapsed, "lists")
    report("  = records listed", lists * count, elapsed, "records")

    start = time.perf_counter()
    page = await list_all_paged(store)
    elapsed = time.perf_counter() - start
    report("list (pages of 500)", page, elapsed, "records")


async def list_all_paged(store: LocalStore) -> int:
    seen, cursor = 0, None
    while True:
        page = await store.list("heartbeats", 500, cursor)
        seen += len(page.entries)
        if not page.next_cursor:
            return seen
        cursor = page.next_cursor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--dir", help="parent directory for the temporary root (default: system temp)")
    args = parser.parse_args()
    print(f"LocalStore bench: {args.records} records, Python {platform.python_version()}, "
          f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="agentcoord-bench-", dir=args.dir) as root:
        print(f"root: {root}")
        anyio.run(run, root, args.records)


if __name__ == "__main__":
    main()
