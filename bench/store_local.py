"""LocalStore throughput: create, CAS update, get and list over N records (default 10,000).

    .venv/bin/python bench/store_local.py [--records N] [--dir PATH]

Runs through the async Store API (what coord uses) on a temporary root,
sequentially, and prints ops/s. Every write is durable (temp file + fsync +
rename + fsync of the directory), so the write numbers mostly measure the file
system's fsync. Then `--writers` concurrent tasks each CAS-update their own
record in one directory for `--seconds` (a fleet's heartbeats): what group
commit of directory fsyncs and the store's write rounds are for. Uses only
the Store API, so the same file runs against an older checkout for a ratio.
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


async def concurrent_updates(root: str, writers: int, seconds: float) -> None:
    """`writers` tasks, each get + replace of its own record in one directory, for `seconds`."""
    store = LocalStore(root)
    done = [0] * writers

    async def writer(n: int) -> None:
        name = f"heartbeats/writer-{n:03d}.json"
        version = await store.create(name, record(n, 0))
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            current = await store.get(name)
            assert current is not None and current.version == version
            version = await store.replace(name, record(n, current.data["revision"] + 1), version)
            done[n] += 1

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for n in range(writers):
            tg.start_soon(writer, n)
    elapsed = time.perf_counter() - start
    print(f"{writers} concurrent writers (get + replace, one directory): "
          f"{sum(done) / elapsed:,.0f} updates/s")


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
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--only-concurrent", action="store_true", help="skip the sequential part")
    args = parser.parse_args()
    print(f"LocalStore bench: {args.records} records, Python {platform.python_version()}, "
          f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="agentcoord-bench-", dir=args.dir) as root:
        print(f"root: {root}")
        if not args.only_concurrent:
            anyio.run(run, root, args.records)
        anyio.run(concurrent_updates, root, args.writers, args.seconds)


if __name__ == "__main__":
    main()
