"""Poisoned records (issue 41, finding 3), shared by tests/reliability and
bench/reliability.py: a Worker holding a good batch and, put straight into its
D1 (as a Worker without our bounds, or an older one, would have stored them),
records no client can read — nested 1,000 and 100,000 levels deep, just over 1 MiB
large. Every reader on another machine must name them and serve the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio

REPO = "acme/poison"
BATCH = "pb1"
GOOD_CLAIMS = [f"claims/{REPO}/1.json", f"claims/{REPO}/2.json"]
# the finding's record: a machine that may write only claims/acme/widgets stored it
DEEP_CLAIM = "claims/acme/widgets/666.json"
# a lane's target held by a record nobody can read (ready names it, never calls it free)
LANE_CLAIM = f"claims/{REPO}/3.json"
DEEP_EVENT = f"events/{BATCH}/20260613T000000.000000Z-deadbeef.json"
LARGE_HEARTBEAT = "heartbeats/poisoner.json"
POISONED = (DEEP_CLAIM, LANE_CLAIM, DEEP_EVENT, LARGE_HEARTBEAT)


def poisoned_rows() -> list[tuple[str, bytes, str]]:
    """(path, JSON text, the machine that stored it) of each poisoned record."""
    deep_claim = (b'{"schema_version":1,"repo":"acme/widgets","target":"666","agent_id":"x",'
                  b'"status":"active","meta":' + b"[" * 1000 + b"]" * 1000 + b"}")
    lane_claim = (f'{{"repo":"{REPO}","target":"3","x":'.encode() + b'{"a":' * 80 + b"1"
                  + b"}" * 80 + b"}")
    deep_event = (f'{{"schema_version":1,"event_id":"20260613T000000.000000Z-deadbeef",'
                  f'"batch_id":"{BATCH}","type":"note","at":"2026-06-13T00:00:00Z","x":'.encode()
                  + b"[" * 100_000 + b"]" * 100_000 + b"}")
    large_beat = b'{"schema_version":1,"agent_id":"poisoner","status":"active","x":"' + b"a" * (1024 * 1024) + b'"}'
    return [(DEEP_CLAIM, deep_claim, "widgets-only"), (LANE_CLAIM, lane_claim, "ops"),
            (DEEP_EVENT, deep_event, "ops"), (LARGE_HEARTBEAT, large_beat, "ops")]


def seed(worker: Any, now: str) -> None:
    """A registered batch with three lanes, two lanes' claims, heartbeats and events
    (written through our client), then the poisoned rows (straight into D1)."""
    lanes = [{"name": f"lane{n}", "owner": f"agent-{n}", "targets": [str(n)]} for n in (1, 2, 3)]
    manifest = {"schema_version": 1, "batch_id": BATCH, "repo": REPO, "objective": "poison",
                "launch_prompt": "Batch id: pb1", "lanes": lanes, "created_at": now}

    async def write() -> None:
        async with worker.store("ops") as store:
            await store.create(f"batches/{BATCH}.json", manifest)
            for n in (1, 2):
                await store.create(f"claims/{REPO}/{n}.json", {
                    "schema_version": 1, "repo": REPO, "target": str(n), "agent_id": f"agent-{n}",
                    "batch_id": BATCH, "status": "active", "claimed_at": now, "updated_at": now,
                    "expires_at": "2099-01-01T00:00:00Z", "machine_id": "m-seed"})
                await store.create(f"heartbeats/agent-{n}.json", {
                    "schema_version": 1, "agent_id": f"agent-{n}", "batch_id": BATCH, "repo": REPO,
                    "target": str(n), "status": "active", "updated_at": now,
                    "expires_at": "2099-01-01T00:00:00Z", "machine_id": "m-seed"})
                await store.create(f"events/{BATCH}/20260613T00000{n}.000000Z-0000000{n}.json", {
                    "schema_version": 1, "event_id": f"20260613T00000{n}.000000Z-0000000{n}",
                    "batch_id": BATCH, "type": "claim.acquired", "agent_id": f"agent-{n}",
                    "repo": REPO, "target": str(n), "at": "2026-06-13T00:00:0%dZ" % n,
                    "machine_id": "m-seed"})

    anyio.run(write)
    worker.put_raw(poisoned_rows())


# Every reader of the fleet's state, as another machine's agent runs it: its
# arguments, the poisoned records it reads (and so must name), and a good record
# it must still show.
READERS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "status": (("status",), POISONED, f"{REPO}#1 active agent-1"),
    "status --json": (("status", "--json"), POISONED, GOOD_CLAIMS[0]),
    "status --batch-id": (("status", "--batch-id", BATCH, "--json"), (DEEP_EVENT,), "claim.acquired"),
    "status --repo --target": (("status", "--repo", REPO, "--target", "1", "--json"), (),
                               GOOD_CLAIMS[0]),
    # lane3 is inside its first-heartbeat grace (docs/health.md): health serves the batch
    "health": (("health", "--json"), POISONED, f'"batch_id": "{BATCH}"'),
    "gc --dry-run": (("gc", "--dry-run"), POISONED, "dry-run"),
    "doctor --deep": (("doctor", "--deep", "--json"), POISONED, '"records": 3'),
    "batch-audit": (("batch-audit", "--batch-id", BATCH, "--json"), (DEEP_EVENT,), "lane1"),
    "ready": (("ready", "--batch-id", BATCH, "--json"), (LANE_CLAIM,), "lane1"),
    "events": (("events", "--batch-id", BATCH, "--json"), (DEEP_EVENT,), "claim.acquired"),
}
# What each exits with: 0/1 (a bad record is named, never an UNKNOWN for the rest);
# doctor --deep exists to find bad records, and says so with its `error` verdict.
EXPECTED_EXIT = {"status": 0, "status --json": 0, "status --batch-id": 0, "status --repo --target": 0,
                 "health": 1, "gc --dry-run": 0, "doctor --deep": 2, "batch-audit": 1, "ready": 0,
                 "events": 0}


def read_everything(ctl: Callable[..., Any]) -> dict[str, dict[str, Any]]:
    """Each reader: its exit code, whether it named every poisoned record it reads,
    whether it still served a good record, and no internal error."""
    out: dict[str, dict[str, Any]] = {}
    for name, (args, reads, good) in READERS.items():
        result = ctl(*args)
        text = result.stdout.decode() + result.stderr.decode()
        out[name] = {"exit": result.returncode, "named": all(path in text for path in reads),
                     "served": good in text,
                     "internal_error": "internal error" in text or "Traceback" in text}
    return out


def dashboard_reads(get: Callable[[str], Any]) -> dict[str, dict[str, Any]]:
    """The dashboard's API over the same state: 200, the poisoned records named."""
    out = {}
    for route, reads in (("api/overview", POISONED), ("api/health", POISONED),
                         (f"api/batch?batch_id={BATCH}", (DEEP_EVENT,))):
        response = get(route)
        out[route] = {"exit": response.status_code,
                      "named": all(path in response.text for path in reads),
                      "served": REPO in response.text,
                      "internal_error": "internal error" in response.text}
    return out


def summary(reads: dict[str, dict[str, Any]]) -> str:
    return json.dumps({name: r["exit"] for name, r in reads.items()})
