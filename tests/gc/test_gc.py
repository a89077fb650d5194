"""gc: every row of the retention table on a fixed clock, then execute, replay, expiry."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from agentcoordd.coord import gc
from agentcoordd.coord.context import Ctx
from agentcoordd.model.errors import OperationalError, UsageError
from agentcoordd.model.timefmt import format_ts
from agentcoordd.store.base import Conflict, Delete, Op, Outcome
from agentcoordd.store.local import LocalStore

NOW = dt.datetime(2026, 7, 20, 12, 0, tzinfo=dt.timezone.utc)


def ts(**delta: float) -> str:
    return format_ts(NOW + dt.timedelta(**delta))


def put(root: Path, rel: str, data: Any) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def event(batch: str, eid: str, at: str, **fields: Any) -> dict[str, Any]:
    return {"schema_version": 1, "event_id": eid, "batch_id": batch, "at": at, **fields}


def lane_closed(batch: str, lane: str, target: str, at: str) -> dict[str, Any]:
    return {
        "schema_version": 2, "event_id": f"lane_closed-{lane}", "batch_id": batch, "type": "lane_closed",
        "lane": lane, "agent_id": "agent-a", "repo": "acme/widgets", "target": target, "terminal": "done",
        "workspace": "default", "closed_by": {"agent_id": "agent-a", "machine": "m1"}, "at": at,
    }


def claim(target: str, status: str, at: str, **extra: Any) -> dict[str, Any]:
    return {
        "schema_version": 1, "repo": "acme/widgets", "target": target, "agent_id": "agent-a",
        "status": status, "claimed_at": at, "updated_at": at, "expires_at": at,
        **({"released_by": "agent-a", "released_at": at} if status == "released" else {}), **extra,
    }


def heartbeat(agent: str, updated: str, expires: str, status: str = "in_progress", **extra: Any) -> dict:
    return {"schema_version": 1, "agent_id": agent, "status": status, "updated_at": updated,
            "expires_at": expires, **extra}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    # claims
    put(r, "claims/acme/widgets/1.json", claim("1", "released", ts(days=-10)))
    put(r, "claims/acme/widgets/2.json", claim("2", "released", ts(days=-3)))  # inside 7 days
    put(r, "claims/acme/widgets/3.json", claim("3", "released", ts(days=-2), synthetic=True, synthetic_kind="smoke"))
    put(r, "claims/acme/widgets/4.json", claim("4", "active", ts(days=-30), synthetic=True))  # active stays
    # heartbeats
    put(r, "heartbeats/dead.json", heartbeat("dead", ts(days=-10), ts(days=-10, minutes=15)))
    put(r, "heartbeats/done.json", heartbeat("done", ts(days=-8), ts(days=-8, minutes=15), "done"))
    put(r, "heartbeats/live.json", heartbeat("live", ts(minutes=-1), ts(minutes=14)))
    put(r, "heartbeats/stale.json", heartbeat("stale", ts(minutes=-20), ts(minutes=-5)))
    put(r, "heartbeats/synth.json", heartbeat("synth", ts(days=-2), ts(days=-2, minutes=15), synthetic=True))
    # batches
    put(r, "batches/b1.json", {"batch_id": "b1", "lanes": [], "status": "completed", "completed_at": ts(days=-9)})
    put(r, "batches/b2.json", {"batch_id": "b2", "lanes": [{"name": "x"}], "updated_at": ts(days=-90)})
    # events: a terminal lane, a lane-less event joining it, a renewal, a transition
    put(r, "events/b1/e1.json", event("b1", "e1", ts(days=-12), type="claim.acquired", repo="acme/widgets", target="1"))
    put(r, "events/b1/e2.json", event("b1", "e2", ts(days=-11, hours=-1), type="phase", lane="backend", repo="acme/widgets", target="1", phase="implementing"))
    put(r, "events/b1/e3.json", event("b1", "e3", ts(days=-11), type="phase", lane="backend", repo="acme/widgets", target="1", phase="implementing"))
    put(r, "events/b1/e4.json", event("b1", "e4", ts(days=-10, hours=-1), type="phase", lane="backend", repo="acme/widgets", target="1", phase="validating"))
    put(r, "events/b1/lane_closed-backend.json", lane_closed("b1", "backend", "1", ts(days=-10)))
    # a non-synthetic orphan (no terminal marker) stays hot; a synthetic metadata-less legacy
    # event is its own orphan generation and compacts (the spec: "missing repository or
    # target metadata ... rather than blocking cleanup"; agent-coord does, differential
    # scenario gc_existing_archives_and_orphans)
    put(r, "events/b1/o1.json", event("b1", "o1", ts(days=-40), type="note", repo="acme/widgets", target="9"))
    put(r, "events/b1/legacy.json", event("b1", "legacy", ts(days=-40), type="note", synthetic=True))
    # a fully synthetic orphan generation compacts after the synthetic window
    put(r, "events/sim/s1.json", event("sim", "s1", ts(days=-3), type="phase", lane="l1", synthetic=True))
    put(r, "events/sim/s2.json", event("sim", "s2", ts(days=-2), type="phase", lane="l1", synthetic=True))
    # a synthetic orphan still inside its window waits for every event
    put(r, "events/sim/s3.json", event("sim", "s3", ts(days=-3), type="phase", lane="l2", synthetic=True))
    put(r, "events/sim/s4.json", event("sim", "s4", ts(hours=-1), type="phase", lane="l2", synthetic=True))
    return r


class FixedClock:
    def __init__(self, now: dt.datetime) -> None:
        self.current = now

    def now(self) -> dt.datetime:
        return self.current


def ctx_for(store: Any, when: dt.datetime = NOW) -> Ctx:
    return Ctx(store, FixedClock(when))


def hot_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.json") if not str(p.relative_to(root)).startswith("archive/")}


async def test_plan_covers_every_retention_row(root: Path) -> None:
    plan = await gc.gc(ctx_for(LocalStore(root)), execute=False)
    got = {(a["reason"], a.get("source_path") or tuple(a["source_paths"])) for a in plan["actions"]}
    assert got == {
        ("terminal_claim", "claims/acme/widgets/1.json"),
        ("terminal_claim", "claims/acme/widgets/3.json"),  # synthetic: 1-day window
        ("dead_heartbeat", "heartbeats/dead.json"),
        ("terminal_heartbeat", "heartbeats/done.json"),
        ("dead_heartbeat", "heartbeats/synth.json"),
        ("completed_batch", "batches/b1.json"),
        ("terminal_target_events", ("events/b1/e1.json", "events/b1/e2.json", "events/b1/e3.json",
                                    "events/b1/e4.json", "events/b1/lane_closed-backend.json")),
        ("synthetic_orphan_events", ("events/sim/s1.json", "events/sim/s2.json")),
        ("synthetic_orphan_events", ("events/b1/legacy.json",)),
    }
    assert plan["mode"] == "dry-run"
    assert plan["policy"] == {"archive_days": 30, "hot_days": 7, "synthetic_hot_days": 1}


async def test_dry_run_writes_nothing(root: Path) -> None:
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    await gc.gc(ctx_for(LocalStore(root)), execute=False)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


async def test_execute_then_replay_then_expiry(root: Path) -> None:
    store = LocalStore(root)
    first = await gc.gc(ctx_for(store), execute=True)
    assert len(first["actions"]) == 9
    assert hot_files(root) == {
        "claims/acme/widgets/2.json", "claims/acme/widgets/4.json", "heartbeats/live.json",
        "heartbeats/stale.json", "batches/b2.json", "events/b1/o1.json",
        "events/sim/s3.json", "events/sim/s4.json",
    }
    # lock files of deleted records stay: never unlink a lock file
    assert (root / "claims/acme/widgets/1.json.lock").exists()
    compact = [a for a in first["actions"] if a["reason"] == "terminal_target_events"][0]
    envelope = json.loads((root / compact["archive_path"]).read_text())
    kept = [r["event_id"] for r in envelope["records"]]
    # first, last, terminal and the real implementing -> validating transition; e3 is a renewal
    assert kept == ["e1", "e4", "lane_closed-backend"]
    assert len(envelope["source_paths"]) == 5

    replay = await gc.gc(ctx_for(store), execute=True)
    assert replay["actions"] == []

    later = NOW + dt.timedelta(days=31)
    expiry = await gc.gc(ctx_for(store, later), execute=False)
    expired = {a["source_path"] for a in expiry["actions"] if a["action"] == "delete"}
    first_archives = {a["archive_path"] for a in first["actions"]}
    assert expired == first_archives
    await gc.gc(ctx_for(store, later), execute=True)
    assert not any((root / path).exists() for path in first_archives)


async def test_identical_compaction_retry_reuses_the_envelope(root: Path) -> None:
    """A crash after the archive write and before the deletes converges on rerun."""

    class CrashAfterArchive(LocalStore):
        crashed = False

        async def run_batch(self, ops: list[Op]) -> list[Outcome]:
            if not self.crashed and any(isinstance(op, Delete) and op.path.startswith("events/") for op in ops):
                self.crashed = True
                raise OperationalError("simulated crash between archive write and hot delete")
            return await super().run_batch(ops)

    crashing = CrashAfterArchive(root)
    with pytest.raises(OperationalError):
        await gc.gc(ctx_for(crashing), execute=True, prefixes=["events"])
    written = set((root / "archive/events/b1").glob("compact-*.json"))
    assert written
    await gc.gc(ctx_for(LocalStore(root)), execute=True, prefixes=["events"])
    assert set((root / "archive/events/b1").glob("compact-*.json")) == written
    assert not (root / "events/b1/e1.json").exists()


async def test_every_archive_is_written_before_any_source_is_deleted(root: Path) -> None:
    """Copy-before-delete across the whole run (many chunks), not only per chunk; the
    progress still counts every action up to the total."""
    for n in range(150):  # several chunks of dead heartbeats
        put(root, f"heartbeats/gone-{n}.json", heartbeat(f"gone-{n}", ts(days=-10), ts(days=-10, minutes=15)))

    class Recording(LocalStore):
        ops: list[Op] = []

        async def run_batch(self, ops: list[Op]) -> list[Outcome]:
            self.ops.extend(ops)
            return await super().run_batch(ops)

    store = Recording(root)
    progress: list[tuple[str, int, int]] = []
    plan = await gc.gc(ctx_for(store), execute=True, progress=lambda *row: progress.append(row))
    kinds = [type(op).__name__ for op in store.ops]
    assert kinds.count("Create") >= 150 and "Delete" in kinds
    assert max(i for i, k in enumerate(kinds) if k == "Create") < kinds.index("Delete")
    applied = [row for row in progress if row[0] == "applied"]
    assert applied[-1] == ("applied", len(plan["actions"]), len(plan["actions"]))
    assert [done for _, done, _ in applied] == sorted(done for _, done, _ in applied)
    assert not any((root / f"heartbeats/gone-{n}.json").exists() for n in range(150))


async def test_record_renewed_after_planning_is_never_deleted(root: Path) -> None:
    """CAS: a heartbeat renewed between plan and delete stays, with its new content."""

    class RenewBeforeDelete(LocalStore):
        def delete_sync(self, path: str, expected: str) -> None:  # batched and single deletes
            if path == "heartbeats/dead.json":
                current = self.get_sync(path)
                assert current is not None
                renewed = heartbeat("dead", ts(), ts(minutes=15))
                self.write_sync(path, renewed, current.version)
            super().delete_sync(path, expected)

    c = ctx_for(RenewBeforeDelete(root))
    await gc.gc(c, execute=True, prefixes=["heartbeats"])
    data = json.loads((root / "heartbeats/dead.json").read_text())
    assert data["updated_at"] == ts()
    assert any("changed after planning" in w for w in c.warnings)


async def test_oversized_envelope_fails_both_modes_before_any_write(root: Path) -> None:
    for n in range(5):  # each within the 256 KiB record bound (a phase change each: all
        # retained), together over the 1 MiB envelope
        put(root, f"events/b1/huge{n}.json", event("b1", f"huge{n}", ts(days=-13, seconds=n),
                                                    type="phase", phase=f"p{n}", lane="backend",
                                                    repo="acme/widgets", target="1",
                                                    message="x" * (250 * 1024)))
    for execute in (False, True):
        with pytest.raises(OperationalError, match="1 MiB"):
            await gc.gc(ctx_for(LocalStore(root)), execute=execute)
    assert not (root / "archive").exists()


async def test_malformed_eligible_record_fails_the_plan_naming_it(root: Path) -> None:
    put(root, "claims/acme/widgets/7.json", {"status": "released", "repo": "acme/widgets"})
    with pytest.raises(OperationalError, match="claims/acme/widgets/7.json"):
        await gc.gc(ctx_for(LocalStore(root)), execute=False)


async def test_unknown_non_eligible_records_stay_untouched(root: Path) -> None:
    put(root, "claims/acme/widgets/8.json", {"status": "mystery"})
    plan = await gc.gc(ctx_for(LocalStore(root)), execute=True)
    assert "claims/acme/widgets/8.json" not in json.dumps(plan)
    assert (root / "claims/acme/widgets/8.json").exists()


async def test_prefix_restricts_hot_scans_but_archive_expiry_is_always_scanned(root: Path) -> None:
    plan = await gc.gc(ctx_for(LocalStore(root)), execute=False, prefixes=["claims"])
    assert {a["reason"] for a in plan["actions"]} == {"terminal_claim"}
    assert plan["prefixes"] == ["claims"]


@pytest.mark.parametrize(("bad", "message"), [
    ({"prefixes": ["archive"]}, "--prefix must be one of: claims, heartbeats, batches, events"),
    ({"prefixes": ["../x"]}, "--prefix must be one of: claims, heartbeats, batches, events"),
    ({"hot_days": -1}, "--hot-days must be zero or greater"),
    ({"synthetic_hot_days": -1}, "--synthetic-hot-days must be zero or greater"),
])
async def test_bad_options_are_usage_errors(root: Path, bad: dict, message: str) -> None:
    with pytest.raises(UsageError) as excinfo:
        await gc.gc(ctx_for(LocalStore(root)), execute=False, **bad)
    assert str(excinfo.value) == message


async def test_huge_retention_windows_are_accepted_and_archive_nothing(root: Path) -> None:
    """agent-coord takes any window; delete_after then clamps at year 9999."""
    plan = await gc.gc(ctx_for(LocalStore(root)), execute=False, hot_days=10**11,
                       archive_days=10**10, synthetic_hot_days=10**11)
    assert plan["actions"] == [] and plan["policy"]["hot_days"] == 10**11


@pytest.mark.parametrize(("record", "message"), [
    ({"status": "released", "updated_at": "last tuesday"},
     "gc record has invalid retention timestamp at claims/acme/widgets/9.json: last tuesday"),
    ({"status": "released"}, "gc record is missing a retention timestamp at claims/acme/widgets/9.json"),
])
async def test_an_eligible_record_without_a_readable_retention_time_stops_gc(
        root: Path, record: dict, message: str) -> None:
    put(root, "claims/acme/widgets/9.json", {"schema_version": 1, **record})
    with pytest.raises(OperationalError) as excinfo:
        await gc.gc(ctx_for(LocalStore(root)), execute=False)
    assert str(excinfo.value) == message and excinfo.value.exit_code == 2


async def test_archive_conflict_with_a_different_record_keeps_the_source(root: Path) -> None:
    put(root, "archive/claims/acme/widgets/1.json", {"schema_version": 1, "record_family": "archived_record",
        "source_path": "claims/acme/widgets/1.json", "reason": "terminal_claim", "synthetic": False,
        "archived_at": ts(days=-1), "delete_after": ts(days=29), "data": {"other": True}})
    c = ctx_for(LocalStore(root))
    plan = await gc.gc(c, execute=True, prefixes=["claims"])
    # agent-coord's rule: a source whose archive destination holds another record that
    # has not expired stays hot (not planned at all)
    assert "claims/acme/widgets/1.json" not in [a.get("source_path") for a in plan["actions"]]
    assert (root / "claims/acme/widgets/1.json").exists()
    assert json.loads((root / "archive/claims/acme/widgets/1.json").read_text())["data"] == {"other": True}


async def test_an_expired_archive_copy_is_replaced_not_deleted(root: Path) -> None:
    """agent-coord's replace_archive (differential scenario gc_existing_archives_and_orphans):
    the expired copy at the destination is overwritten with the new source, which
    leaves the hot family; no separate archive_expired delete of that path."""
    put(root, "archive/claims/acme/widgets/1.json", {"schema_version": 1, "record_family": "archived_record",
        "source_path": "claims/acme/widgets/1.json", "reason": "terminal_claim", "synthetic": False,
        "archived_at": ts(days=-40), "delete_after": ts(days=-10), "data": {"other": True}})
    plan = await gc.gc(ctx_for(LocalStore(root)), execute=True, prefixes=["claims"])
    mine = [a for a in plan["actions"] if "claims/acme/widgets/1.json" in
            (a.get("source_path"), a.get("archive_path"))]
    assert [(a["action"], a["reason"]) for a in mine] == [("replace_archive", "expired_archive_replacement")]
    assert not (root / "claims/acme/widgets/1.json").exists()
    archived = json.loads((root / "archive/claims/acme/widgets/1.json").read_text())
    assert archived["reason"] == "expired_archive_replacement" and archived["data"]["target"] == "1"


async def test_envelopes_validate_against_the_published_archive_contract(root: Path, fixtures_dir: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((fixtures_dir / "peer-contracts/contracts/archive-record-schema-v1.json").read_text())
    await gc.gc(ctx_for(LocalStore(root)), execute=True)
    envelopes = list((root / "archive").rglob("*.json"))
    assert envelopes
    for path in envelopes:
        jsonschema.validate(json.loads(path.read_text()), schema)


def test_conflict_kind_is_exposed() -> None:
    assert Conflict("x", "already_exists").kind == "already_exists"
