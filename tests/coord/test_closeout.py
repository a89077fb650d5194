"""Terminal closeout: release --terminal and record-event --type lane_closed.

Spec: CLI (release --terminal, "Hosts that separate event production…"), Event
Schema, contracts/state-schema-v2.json; conformance/golden
terminal_release_lane_closed and record_event_lane_closed.
"""

from __future__ import annotations

from agentcoordd.store.base import Capabilities

import json
from pathlib import Path

import pytest

from agentcoordd.coord import claims, events
from agentcoordd.coord.context import Ctx
from agentcoordd.model.errors import UsageError
from agentcoordd.model.identity import Identity
from agentcoordd.model.records import Metadata
from agentcoordd.model.timefmt import format_ts
from agentcoordd.store.local import LocalStore

REPO = "acme/widgets"
BACKEND_CLOSED = "events/b1/lane_closed-10e08a419e850eba.json"
DOCS_CLOSED = "events/b1/lane_closed-46b42b4229cd7a39.json"
M1 = Identity(machine_id="m1")
BATCH = {
    "schema_version": 1,
    "batch_id": "b1",
    "repo": REPO,
    "objective": "golden",
    "lanes": [
        {"name": "backend", "owner": "agent-a", "targets": ["1"]},
        {"name": "docs", "owner": "agent-b", "targets": ["2"], "depends_on": ["b1:backend"]},
    ],
    "registered_at": "2026-06-13T00:00:00Z",
    "updated_at": "2026-06-13T00:00:00Z",
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def store(root: Path) -> LocalStore:
    return LocalStore(root)


@pytest.fixture
async def batch(store) -> None:
    await store.create("batches/b1.json", BATCH)


@pytest.fixture
async def claimed(store, clock, batch) -> None:
    ctx = Ctx(store, clock)
    await claims.claim(ctx, agent_id="agent-a", repo=REPO, target="1", batch_id="b1", branch="feat/1")
    await claims.claim(ctx, agent_id="agent-b", repo=REPO, target="2", batch_id="b1", branch="feat/2")


def read(root: Path, rel: str) -> dict:
    return json.loads((root / rel).read_text())


def event_types(root: Path) -> list[str]:
    return sorted(json.loads(p.read_text())["type"] for p in (root / "events/b1").glob("*.json"))


async def close(store, clock, identity=M1, agent="agent-a", target="1", **kwargs):
    kwargs.setdefault("terminal", "done")
    return await claims.release(Ctx(store, clock, identity), agent_id=agent, repo=REPO, target=target, **kwargs)


@pytest.fixture
def lane_closed_validator(fixtures_dir):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((fixtures_dir / "peer-contracts/contracts/state-schema-v2.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


# ---- release --terminal ------------------------------------------------------------------


async def test_terminal_release_writes_lane_closed_v2_at_the_lane_reservation(store, root, clock, claimed):
    """Golden terminal_release_lane_closed step 4."""
    result = await close(store, clock, pr_state="merged", evidence_url="https://example.test/pr/1")
    assert result["lane_closed"]["path"] == BACKEND_CLOSED
    assert read(root, BACKEND_CLOSED) == {
        "schema_version": 2,
        "event_id": "lane_closed-10e08a419e850eba",
        "batch_id": "b1",
        "type": "lane_closed",
        "lane": "backend",
        "agent_id": "agent-a",
        "repo": REPO,
        "target": "1",
        "branch": "feat/1",
        "terminal": "done",
        "pr_state": "merged",
        "evidence_url": "https://example.test/pr/1",
        "workspace": "default",
        "closed_by": {"agent_id": "agent-a", "machine": "m1"},
        "machine_id": "m1",
        "at": format_ts(clock.now()),
    }


async def test_lane_closed_we_write_passes_the_v2_contract(store, root, clock, claimed, lane_closed_validator):
    await close(store, clock, pr_state="merged", evidence_url="https://example.test/pr/1",
                meta=Metadata(pr_url="https://example.test/pr/1"))
    lane_closed_validator.validate(read(root, BACKEND_CLOSED))


async def test_terminal_release_releases_and_stamps_the_claim(store, root, clock, claimed):
    await close(store, clock, pr_state="merged", evidence_url="https://example.test/pr/1")
    record = read(root, "claims/acme/widgets/1.json")
    now = format_ts(clock.now())
    assert record == {
        "schema_version": 1,
        "repo": REPO,
        "target": "1",
        "agent_id": "agent-a",
        "batch_id": "b1",
        "branch": "feat/1",
        "status": "released",
        "claimed_at": now,
        "updated_at": now,
        "expires_at": now,
        "released_by": "agent-a",
        "released_at": now,
        "terminal": "done",
        "pr_state": "merged",
        "evidence_url": "https://example.test/pr/1",
        "workspace": "default",
        "closed_by": {"agent_id": "agent-a", "machine": "m1"},
        "machine_id": "m1",
        "fencing_token": record["fencing_token"],
    }
    assert isinstance(record["fencing_token"], int)


async def test_terminal_release_does_not_also_emit_claim_released(store, root, clock, claimed):
    await close(store, clock)
    assert event_types(root) == ["claim.acquired", "claim.acquired", "lane_closed"]


async def test_terminal_release_stamps_the_registered_lane(store, root, clock, claimed):
    await close(store, clock, pr_state="merged")
    manifest = read(root, "batches/b1.json")
    assert manifest["lanes"][0] == {
        "name": "backend",
        "owner": "agent-a",
        "targets": ["1"],
        "status": "done",
        "terminal": "done",
        "closed_at": format_ts(clock.now()),
        "closed_by": {"agent_id": "agent-a", "machine": "m1"},
        "workspace": "default",
        "pr_state": "merged",
    }
    assert manifest["lanes"][1] == BATCH["lanes"][1]
    assert "status" not in manifest and "completed_at" not in manifest


async def test_last_terminal_lane_completes_the_batch(store, root, clock, claimed):
    await close(store, clock)
    clock.advance(minutes=5)
    await close(store, clock, Identity(machine_id="m2"), agent="agent-b", target="2", terminal="abandoned")
    manifest = read(root, "batches/b1.json")
    assert (manifest["status"], manifest["completed_at"]) == ("completed", format_ts(clock.now()))
    assert [lane["terminal"] for lane in manifest["lanes"]] == ["done", "abandoned"]
    assert manifest["lanes"][1]["closed_by"] == {"agent_id": "agent-b", "machine": "m2"}
    assert read(root, DOCS_CLOSED)["terminal"] == "abandoned"


async def test_identical_terminal_retry_succeeds_and_changes_nothing(store, root, clock, claimed):
    """Golden terminal_release_lane_closed step 5."""
    await close(store, clock, pr_state="merged", evidence_url="https://example.test/pr/1")
    snapshot = {p: (root / p).read_bytes() for p in (BACKEND_CLOSED, "claims/acme/widgets/1.json", "batches/b1.json")}
    clock.advance(minutes=1)
    result = await close(store, clock, pr_state="merged", evidence_url="https://example.test/pr/1")
    assert result["action"] == "already_closed"
    assert {p: (root / p).read_bytes() for p in snapshot} == snapshot
    assert event_types(root) == ["claim.acquired", "claim.acquired", "lane_closed"]


async def test_conflicting_terminal_closeout_is_refused(store, root, clock, claimed):
    await close(store, clock)
    before = (root / BACKEND_CLOSED).read_bytes()
    with pytest.raises(UsageError) as excinfo:
        await close(store, clock, terminal="abandoned")
    assert excinfo.value.exit_code == 1
    assert str(excinfo.value) == "conflicting terminal closeout for lane backend; first closeout is authoritative"
    assert (root / BACKEND_CLOSED).read_bytes() == before


async def test_a_retry_that_omits_the_evidence_is_a_conflict(store, root, clock, claimed):
    """Omitted closeout options are not inherited from the released claim (recorded:
    terminal_replay_and_conflict step 6)."""
    await close(store, clock, pr_state="merged", evidence_url="https://example.test/pr/1")
    claim_before = (root / "claims/acme/widgets/1.json").read_bytes()
    with pytest.raises(UsageError, match="conflicting terminal closeout for lane backend"):
        await close(store, clock, pr_state="merged")
    assert (root / "claims/acme/widgets/1.json").read_bytes() == claim_before


async def test_terminal_after_a_plain_release_closes_the_lane(store, root, clock, claimed):
    """As agent-coord: the terminal release is a release again (released_at restamped)."""
    await claims.release(Ctx(store, clock), agent_id="agent-a", repo=REPO, target="1")
    clock.advance(minutes=3)
    await close(store, clock)
    record = read(root, "claims/acme/widgets/1.json")
    assert (record["terminal"], record["released_at"]) == ("done", format_ts(clock.now()))
    assert (root / BACKEND_CLOSED).is_file()


async def test_terminal_and_handoff_are_mutually_exclusive(store, root, clock, claimed):
    with pytest.raises(UsageError, match="cannot be combined with --handoff-to") as excinfo:
        await close(store, clock, handoff_to="agent-b", handoff_note="take it")
    assert excinfo.value.exit_code == 1
    assert not (root / BACKEND_CLOSED).exists()
    assert read(root, "claims/acme/widgets/1.json")["status"] == "active"


async def test_terminal_needs_a_claim_with_a_batch_id(store, root, clock):
    await claims.claim(Ctx(store, clock), agent_id="agent-a", repo=REPO, target="9")
    with pytest.raises(UsageError, match="batch_id") as excinfo:
        await close(store, clock, target="9")
    assert excinfo.value.exit_code == 1
    assert read(root, "claims/acme/widgets/9.json")["status"] == "active"
    assert not (root / "events").exists()


@pytest.mark.parametrize("terminal", ["merged", "Done", "", "completed"])
async def test_terminal_value_must_be_done_abandoned_or_superseded(store, root, clock, claimed, terminal):
    with pytest.raises(UsageError, match="--terminal"):
        await close(store, clock, terminal=terminal)
    assert not (root / BACKEND_CLOSED).exists()


@pytest.mark.parametrize("url", ["ftp://example.test/x", "example.test/pr/1", "https://", "javascript:alert(1)"])
async def test_evidence_url_must_be_http(store, root, clock, claimed, url):
    with pytest.raises(UsageError, match="--evidence-url"):
        await close(store, clock, evidence_url=url)
    assert not (root / BACKEND_CLOSED).exists()


async def test_closed_by_machine_falls_back_to_host(store, root, clock, claimed):
    await close(store, clock, Identity(), meta=Metadata(host="laptop-7"))
    assert read(root, BACKEND_CLOSED)["closed_by"] == {"agent_id": "agent-a", "machine": "laptop-7"}


async def test_machine_id_wins_over_host_for_closed_by(store, root, clock, claimed):
    await close(store, clock, M1, meta=Metadata(host="codex"))
    assert read(root, BACKEND_CLOSED)["closed_by"]["machine"] == "m1"


async def test_closeout_without_machine_or_host_closes_as_unknown_and_warns(store, root, clock, claimed):
    """agent-coord closes with machine UNKNOWN (conformance); we also say why audit will object."""
    ctx = Ctx(store, clock, Identity())
    await claims.release(ctx, agent_id="agent-a", repo=REPO, target="1", terminal="done")
    assert read(root, BACKEND_CLOSED)["closed_by"]["machine"] == "UNKNOWN"
    assert read(root, "claims/acme/widgets/1.json")["status"] == "released"
    assert any("AGENT_COORD_MACHINE_ID" in w for w in ctx.warnings)


async def test_custom_workspace_is_recorded(store, root, clock, claimed):
    await close(store, clock, workspace="team-a")
    assert read(root, BACKEND_CLOSED)["workspace"] == "team-a"
    assert read(root, "batches/b1.json")["lanes"][0]["workspace"] == "team-a"


async def test_terminal_release_by_a_non_holder_is_a_usage_error(store, root, clock, claimed):
    with pytest.raises(UsageError, match="claim belongs to agent-a; agent-b cannot release it"):
        await close(store, clock, agent="agent-b", target="1")
    assert not (root / BACKEND_CLOSED).exists()


async def test_sample_root_claim_releases_terminally_with_every_field_kept(fixtures_dir, store, root, clock):
    sample = fixtures_dir / "state-root-sample"
    for rel in ("claims/acme/repo-00/2.json", "batches/batch-0001.json",
                "events/batch-0001/lane_closed-76a23cdf1916414d.json"):
        await store.create(rel, json.loads((sample / rel).read_text()))
    original = read(root, "claims/acme/repo-00/2.json")
    await claims.release(Ctx(store, clock, Identity(machine_id="m2")), agent_id="agent-000002",
                         repo="acme/repo-00", target="2", terminal="done")
    record = read(root, "claims/acme/repo-00/2.json")
    for key in ("schema_version", "repo", "target", "agent_id", "batch_id", "branch", "claimed_at"):
        assert record[key] == original[key]
    manifest = read(root, "batches/batch-0001.json")
    assert manifest["status"] == "completed"
    assert manifest["lanes"][0]["closed_at"] == "2026-11-30T23:17:35Z"  # first closeout untouched
    assert manifest["objective"] == "sample"


# ---- record-event --type lane_closed ------------------------------------------------------


async def record_closed(store, clock, identity=Identity(), **kwargs):
    args = {"batch_id": "b1", "type": "lane_closed", "agent_id": "agent-a", "repo": REPO, "target": "1",
            "terminal": "done", "meta": Metadata(host="m1")}
    args.update(kwargs)
    return await events.record_event(Ctx(store, clock, identity), **args)


async def test_record_event_lane_closed_writes_the_reservation_and_stamps_the_lane(store, root, clock, batch):
    """Golden record_event_lane_closed step 3: lane resolved from the target; claim untouched."""
    await claims.claim(Ctx(store, clock), agent_id="agent-a", repo=REPO, target="1", batch_id="b1")
    result = await record_closed(store, clock)
    assert (result["action"], result["path"]) == ("recorded", BACKEND_CLOSED)
    assert read(root, BACKEND_CLOSED) == {
        "schema_version": 2,
        "event_id": "lane_closed-10e08a419e850eba",
        "batch_id": "b1",
        "type": "lane_closed",
        "lane": "backend",
        "agent_id": "agent-a",
        "repo": REPO,
        "target": "1",
        "terminal": "done",
        "workspace": "default",
        "closed_by": {"agent_id": "agent-a", "machine": "m1"},
        "host": "m1",
        "at": format_ts(clock.now()),
    }
    assert read(root, "claims/acme/widgets/1.json")["status"] == "active"
    assert read(root, "batches/b1.json")["lanes"][0]["terminal"] == "done"


async def test_record_event_lane_closed_retry_is_idempotent(store, root, clock, batch):
    await record_closed(store, clock)
    before = (root / BACKEND_CLOSED).read_bytes()
    clock.advance(minutes=2)
    result = await record_closed(store, clock)
    assert result["action"] == "already_closed"
    assert (root / BACKEND_CLOSED).read_bytes() == before


async def test_record_event_conflicting_lane_closed_is_refused(store, root, clock, batch):
    await record_closed(store, clock)
    with pytest.raises(UsageError, match="conflicting terminal closeout for lane backend") as excinfo:
        await record_closed(store, clock, terminal="abandoned")
    assert excinfo.value.exit_code == 1


async def test_record_event_lane_closed_requires_terminal(store, root, clock, batch):
    with pytest.raises(UsageError) as excinfo:
        await record_closed(store, clock, terminal=None)
    assert str(excinfo.value) == "missing required --terminal"


@pytest.mark.parametrize("missing", ["agent_id", "repo", "target"])
async def test_record_event_lane_closed_requires_agent_repo_and_target(store, root, clock, batch, missing):
    with pytest.raises(UsageError):
        await record_closed(store, clock, **{missing: None})
    assert not (root / "events").exists()


async def test_explicit_lane_is_used_when_the_target_is_ambiguous(store, root, clock):
    shared_target = dict(BATCH, lanes=[
        {"name": "backend", "owner": "agent-a", "targets": ["1"]},
        {"name": "docs", "owner": "agent-b", "targets": ["1"]},
    ])
    await store.create("batches/b1.json", shared_target)
    with pytest.raises(UsageError, match="does not match exactly one lane in batch b1"):
        await record_closed(store, clock)
    assert not (root / "events").exists()
    with pytest.raises(UsageError, match="^terminal closeout agent does not match lane docs$"):
        await record_closed(store, clock, lane="docs")
    await record_closed(store, clock, lane="docs", agent_id="agent-b")
    assert (root / DOCS_CLOSED).is_file()


async def test_lane_closed_for_an_unregistered_batch_is_refused(store, root, clock):
    """agent-coord: the lane must be registered to be closed (named or not)."""
    for lane in (None, "backend"):
        with pytest.raises(UsageError, match="^batch b1 not found for terminal closeout$"):
            await record_closed(store, clock, lane=lane)
    assert list(root.rglob("*.json")) == []


@pytest.mark.parametrize("lane", ["b1:backend", "../x", "", "a\x00"])
async def test_hostile_lane_on_lane_closed_is_refused_leaving_no_file(store, root, clock, lane):
    with pytest.raises(UsageError) as excinfo:
        await record_closed(store, clock, lane=lane)
    assert excinfo.value.exit_code == 1
    assert list(root.rglob("*")) == []


# ---- stamp group commit (the daemon's StampQueue) -----------------------------------


class CountingStore:
    """A real LocalStore that counts manifest writes."""
    capabilities = Capabilities()  # a plain Store: every read goes through it


    def __init__(self, inner: LocalStore) -> None:
        self.inner = inner
        self.manifest_writes = 0

    async def get(self, path):
        return await self.inner.get(path)

    async def replace(self, path, data, version):
        if path.startswith("batches/"):
            self.manifest_writes += 1
        return await self.inner.replace(path, data, version)


def _closed_event(lane: str) -> dict:
    return {"terminal": "done", "at": "2026-06-13T01:00:00Z", "workspace": "default",
            "closed_by": {"agent_id": f"agent-{lane}", "machine": "m1"}}


async def test_concurrent_stamps_of_one_batch_share_manifest_writes(store, root, clock):
    import anyio

    from agentcoordd.coord.closeout import StampQueue, stamp_lane

    lanes = [f"l{n:02d}" for n in range(40)]
    await store.create("batches/big.json", {
        **BATCH, "batch_id": "big",
        "lanes": [{"name": name, "owner": f"agent-{name}", "targets": [name]} for name in lanes]})
    counting = CountingStore(store)
    ctx = Ctx(counting, clock, stamps=StampQueue())  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        for name in lanes:
            tg.start_soon(stamp_lane, ctx, "big", name, _closed_event(name))
    manifest = json.loads((root / "batches/big.json").read_text())
    assert [lane["terminal"] for lane in manifest["lanes"]] == ["done"] * 40
    assert manifest["status"] == "completed"
    assert counting.manifest_writes < 10  # 40 lanes, a handful of group writes
    assert ctx.stamps._queues == {}  # nothing left behind


async def test_a_cancelled_leader_leaves_the_queued_stamps_to_the_next(store, root, clock):
    import anyio

    from agentcoordd.coord.closeout import StampQueue, stamp_lane

    await store.create("batches/b2.json", {
        **BATCH, "batch_id": "b2",
        "lanes": [{"name": name, "owner": f"agent-{name}", "targets": [name]} for name in "abc"]})
    stamps = StampQueue()

    class SlowFirstWrite(CountingStore):
        async def replace(self, path, data, version):
            if self.manifest_writes == 0:
                self.manifest_writes += 1
                await anyio.sleep(10)  # the leader's write hangs until it is cancelled
            return await super().replace(path, data, version)

    ctx = Ctx(SlowFirstWrite(store), clock, stamps=stamps)  # type: ignore[arg-type]
    started = anyio.current_time()
    async with anyio.create_task_group() as followers:
        async with anyio.create_task_group() as leader:
            leader.start_soon(stamp_lane, ctx, "b2", "a", _closed_event("a"))
            await anyio.sleep(0.05)  # the leader holds the lock, inside its hanging write
            followers.start_soon(stamp_lane, ctx, "b2", "b", _closed_event("b"))
            followers.start_soon(stamp_lane, ctx, "b2", "c", _closed_event("c"))
            await anyio.sleep(0.05)
            leader.cancel_scope.cancel()  # e.g. the request's deadline
    assert anyio.current_time() - started < 5
    manifest = json.loads((root / "batches/b2.json").read_text())
    assert [lane.get("terminal") for lane in manifest["lanes"]] == ["done", "done", "done"]
    assert stamps._queues == {}
