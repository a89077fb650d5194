"""batch-audit: attribution, repository gate, lineage, verdicts and exit codes.

Spec: "batch-audit telemetry-completeness gate" (README) and "Shipped
Lifecycle And Typed-Event Contract" (telemetry contract); the batch_audit_*
and terminal_release_lane_closed conformance scenarios.
"""

from __future__ import annotations

from agentcoordd.store.base import Capabilities

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from golden_replay import replay

from agentcoordd.coord.audit import batch_audit
from agentcoordd.coord.context import Ctx
from agentcoordd.model import ids
from agentcoordd.model.timefmt import format_ts
from agentcoordd.store.base import Forbidden, Page, Unavailable, Versioned
from agentcoordd.store.local import LocalStore

REPO = "acme/widgets"
T0 = dt.datetime(2026, 6, 13, 1, 0, tzinfo=dt.timezone.utc)
LANE_KEYS = {"name", "owner", "targets", "event_count", "missing", "complete", "malformed"}


def put(root: Path, rel: str, data: Any) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2) + "\n")


def register(root: Path, lanes: list[Any], *, batch_id: str = "b1", **extra: Any) -> None:
    manifest = {"schema_version": 1, "batch_id": batch_id, "repo": REPO, "lanes": lanes, **extra}
    if extra.get("repo", REPO) is None:
        manifest.pop("repo")
    put(root, f"batches/{batch_id}.json", manifest)


def lane(name: str, owner: str, *targets: str) -> dict[str, Any]:
    return {"name": name, "owner": owner, "targets": list(targets)}


class Trail:
    """Writes events with increasing `at`, the way the CLI names them."""

    def __init__(self, root: Path, batch_id: str = "b1") -> None:
        self.root, self.batch_id, self.n = root, batch_id, 0

    def at(self) -> str:
        self.n += 1
        return format_ts(T0 + dt.timedelta(minutes=self.n))

    def add(self, type_: str, agent: str | None = None, target: str | None = "1", **extra: Any) -> dict[str, Any]:
        default_at = self.at()
        at = extra.pop("at", None) or default_at
        eid = extra.pop("event_id", None) or f"20260613T{self.n:06d}.000000Z-{self.n:08x}"
        record: dict[str, Any] = {"schema_version": 1, "event_id": eid, "batch_id": self.batch_id, "type": type_,
                                  "repo": REPO, "at": at}
        if agent is not None:
            record["agent_id"] = agent
        if target is not None:
            record["target"] = target
        record.update(extra)
        record = {k: v for k, v in record.items() if v is not None}
        put(self.root, f"events/{self.batch_id}/{eid}.json", record)
        return record

    def acquired(self, agent: str, target: str | None = "1", **extra: Any) -> dict[str, Any]:
        return self.add("claim.acquired", agent, target, **extra)

    def released(self, agent: str, target: str | None = "1", **extra: Any) -> dict[str, Any]:
        return self.add("claim.released", agent, target, status="released", **extra)

    def closed(self, lane_name: str, agent: str, target: str = "1", terminal: str = "done", **extra: Any) -> dict[str, Any]:
        eid = extra.pop("event_id", ids.lane_closed_event_id(lane_name))
        record = {
            "schema_version": 2, "event_id": eid, "batch_id": self.batch_id, "type": "lane_closed",
            "lane": lane_name, "agent_id": agent, "repo": REPO, "target": target, "terminal": terminal,
            "workspace": "default", "closed_by": {"agent_id": agent, "machine": "m1"}, "at": self.at(),
        }
        record.update(extra)
        record = {k: v for k, v in record.items() if v is not None}
        put(self.root, f"events/{self.batch_id}/{extra.pop('file', eid)}.json", record)
        return record


@pytest.fixture
def trail(root: Path) -> Trail:
    return Trail(root)


async def audit(ctx: Ctx) -> dict[str, Any]:
    result = await batch_audit(ctx, batch_id="b1")
    for item in result["lanes"]:
        assert set(item) == LANE_KEYS
    return result


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in result["lanes"]}


# ---- conformance ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "steps"),
    [("batch_audit_complete", [4]), ("batch_audit_incomplete", [3]), ("terminal_release_lane_closed", [7])],
)
async def test_golden_audit_outputs(fixtures_dir: Path, root: Path, ctx: Ctx, name: str, steps: list[int]) -> None:
    await replay(fixtures_dir, name, root, ctx, steps)


# ---- verdicts ------------------------------------------------------------------


async def test_complete_with_acquire_and_release(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.released("agent-a")

    result = await audit(ctx)

    assert (result["verdict"], result["exit_code"]) == ("complete", 0)
    assert result["lanes"] == [{"name": "backend", "owner": "agent-a", "targets": ["1"], "event_count": 2,
                                "missing": [], "complete": True, "malformed": False}]


async def test_lane_without_events_misses_both_signals(ctx: Ctx, root: Path) -> None:
    register(root, [lane("backend", "agent-a", "1")])

    result = await audit(ctx)

    assert (result["verdict"], result["exit_code"]) == ("incomplete", 1)
    assert result["lanes"][0]["missing"] == ["claim.acquired", "terminal"]
    assert result["lanes"][0]["event_count"] == 0


async def test_one_incomplete_lane_fails_the_batch(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1"), lane("docs", "agent-b", "2")])
    trail.acquired("agent-a")
    trail.released("agent-a")
    trail.acquired("agent-b", "2")

    result = await audit(ctx)

    assert result["verdict"] == "incomplete"
    assert by_name(result)["docs"]["missing"] == ["terminal"] and by_name(result)["backend"]["complete"]


# ---- UNKNOWN: exit 2, never incomplete, never complete -------------------------------

UNREGISTERED = {"batch_id": "b1", "lanes": [], "reason": "batch b1 is not registered", "verdict": "unknown"}


async def test_unregistered_batch_is_unknown(ctx: Ctx) -> None:
    result = await batch_audit(ctx, batch_id="b1")

    assert result.pop("exit_code") == 2 and result == UNREGISTERED


@pytest.mark.parametrize("bad", ["../x", "a/b", "", ".hidden", "x" * 300, "a\x00b"])
async def test_malformed_id_is_unknown_not_incomplete(ctx: Ctx, bad: str) -> None:
    result = await batch_audit(ctx, batch_id=bad)

    assert (result["verdict"], result["exit_code"], result["lanes"]) == ("unknown", 2, [])
    assert result["reason"].startswith("coordination state unreadable: invalid batch-id: ")


@pytest.mark.parametrize(
    ("manifest", "reason"),
    [
        ("[1, 2]", "state is not an object"),
        ("{broken", "unreadable"),
        ({"batch_id": "b1", "repo": REPO, "lanes": []}, "registers no lanes"),
        ({"batch_id": "b1", "repo": REPO}, "registers no lanes"),
        ({"batch_id": "b1", "repo": REPO, "lanes": {"a": 1}}, "not an array"),
        ({"batch_id": "other", "repo": REPO, "lanes": [lane("a", "x", "1")]}, "another batch_id"),
        ({"batch_id": "b1", "repo": 5, "lanes": [lane("a", "x", "1")]}, "malformed repo"),
    ],
)
async def test_malformed_batch_state_is_unknown(ctx: Ctx, root: Path, manifest: Any, reason: str) -> None:
    put(root, "batches/b1.json", manifest if isinstance(manifest, str) else json.dumps(manifest))

    result = await batch_audit(ctx, batch_id="b1")

    assert (result["verdict"], result["exit_code"]) == ("unknown", 2)
    assert reason in result["reason"]


async def test_an_unreadable_event_is_named_and_left_out_of_the_trail(
        ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1"), lane("docs", "agent-b", "2")])
    trail.acquired("agent-a")
    trail.released("agent-a")
    put(root, "events/b1/zzz.json", "{not json")
    put(root, "events/b1/zzy.json", "[" * 100 + "]" * 100)

    result = await audit(ctx)

    # it can only add evidence: the complete lane stays complete, the other incomplete
    assert (result["verdict"], result["exit_code"]) == ("incomplete", 1)
    assert [(r["name"], r["complete"]) for r in result["lanes"]] == [("backend", True), ("docs", False)]
    assert [u["path"] for u in result["unreadable"]] == ["events/b1/zzy.json", "events/b1/zzz.json"]
    assert "nested 100 levels deep" in result["unreadable"][0]["reason"]
    assert "events/b1/zzz.json" in ctx.warnings[-1]


async def test_non_object_event_makes_the_trail_unknown(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.released("agent-a")
    put(root, "events/b1/zzz.json", "[]")

    assert (await audit(ctx))["verdict"] == "unknown"


class WrappedStore:
    capabilities = Capabilities()  # a plain Store: every read goes through it

    def __init__(self, inner: LocalStore, *, partial: bool = False, fail: Exception | None = None) -> None:
        self.inner, self.partial, self.fail, self.name = inner, partial, fail, "wrapped"

    async def get(self, path: str) -> Versioned | None:
        return await self.inner.get(path)

    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Page:
        if self.fail is not None:
            raise self.fail
        page = await self.inner.list(prefix, limit, cursor)
        return Page(page.entries, page.next_cursor, self.partial)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"partial": True}, "filtered by a scoped token"),
        ({"fail": Forbidden("403 forbidden")}, "coordination state unreadable: 403 forbidden"),
        ({"fail": Unavailable("connection refused")}, "coordination state unreadable: connection refused"),
    ],
)
async def test_partial_or_failed_event_listing_is_unknown_even_if_complete(
    root: Path, clock, trail: Trail, kwargs: dict[str, Any], reason: str
) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.released("agent-a")

    result = await batch_audit(Ctx(WrappedStore(LocalStore(root), **kwargs), clock), batch_id="b1")

    assert (result["verdict"], result["exit_code"]) == ("unknown", 2)
    assert reason in result["reason"]


async def test_audit_reads_only_the_batch_and_its_events(root: Path, clock, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    register(root, [lane("x", "agent-a", "1")], batch_id="b10")
    Trail(root, "b10").acquired("agent-a")
    trail.acquired("agent-a")
    reads: list[str] = []

    class Counting(WrappedStore):
        async def get(self, path: str) -> Versioned | None:
            reads.append(path)
            return await super().get(path)

        async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Page:
            reads.append(prefix + "/")
            return await super().list(prefix, limit, cursor)

    result = await batch_audit(Ctx(Counting(LocalStore(root)), clock), batch_id="b1")

    assert reads == ["batches/b1.json", "events/b1/"]
    assert result["lanes"][0]["event_count"] == 1


# ---- malformed lanes ----------------------------------------------------------------


async def test_non_object_lane_is_reported_malformed_and_incomplete(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1"), "oops", {"name": "a:b", "owner": "x", "targets": ["9"]}])
    trail.acquired("agent-a")
    trail.released("agent-a")

    result = await audit(ctx)

    assert result["verdict"] == "incomplete"
    assert [item["malformed"] for item in result["lanes"]] == [False, True, True]
    # agent-coord's UNKNOWN placeholders, not null (differential scenario audit_lane_without_owner)
    assert result["lanes"][1] == {"name": "UNKNOWN", "owner": "UNKNOWN", "targets": [], "event_count": 0,
                                  "missing": ["claim.acquired", "terminal"], "complete": False, "malformed": True}


async def test_lane_without_owner_admits_nobody(ctx: Ctx, root: Path, trail: Trail) -> None:
    """agent-coord's rule: only a lane's owner (or a claimant of a lane that has one)
    is admitted, so an owner-less lane's acquisition leaves its lineage invalid and
    its closeout unauthorised: incomplete, never complete."""
    register(root, [{"name": "backend", "targets": ["1"]}])
    trail.acquired("agent-a")
    trail.released("agent-a")

    result = await audit(ctx)

    assert result["verdict"] == "incomplete"
    assert result["lanes"][0]["owner"] == "UNKNOWN"
    assert result["lanes"][0]["missing"] == ["terminal", "lifecycle"]


async def test_duplicated_lane_names_never_complete(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1"), lane("backend", "agent-b", "2")])
    trail.acquired("agent-a", lane="backend")
    trail.released("agent-a", lane="backend")

    result = await audit(ctx)

    assert result["verdict"] == "incomplete" and all(item["malformed"] for item in result["lanes"])


# ---- attribution ------------------------------------------------------------------


async def test_shared_target_falls_back_to_a_unique_owner(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("api", "agent-a", "1"), lane("docs", "agent-b", "1")])
    trail.acquired("agent-a")
    trail.released("agent-a")

    lanes = by_name(await audit(ctx))

    assert lanes["api"]["complete"] and lanes["api"]["event_count"] == 2
    assert lanes["docs"]["missing"] == ["claim.acquired", "terminal"] and lanes["docs"]["event_count"] == 0


async def test_shared_owner_falls_back_to_a_unique_target(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("api", "agent-a", "1"), lane("docs", "agent-a", "2")])
    trail.acquired("agent-a", "2")
    trail.released("agent-a", "2")

    lanes = by_name(await audit(ctx))

    assert lanes["docs"]["complete"] and not lanes["api"]["complete"]


async def test_shared_target_and_owner_is_ambiguous_and_stays_incomplete(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("api", "agent-a", "1"), lane("docs", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.released("agent-a")

    result = await audit(ctx)

    assert result["verdict"] == "incomplete"
    assert [item["event_count"] for item in result["lanes"]] == [0, 0]


async def test_lane_tagged_events_resolve_ambiguity(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("api", "agent-a", "1"), lane("docs", "agent-a", "1")])
    for name in ("api", "docs"):
        trail.acquired("agent-a", lane=name)
        trail.released("agent-a", lane=name)

    assert (await audit(ctx))["verdict"] == "complete"


async def test_unique_owner_on_an_unrelated_target_does_not_complete_the_lane(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a", "99")
    trail.released("agent-a", "99")

    result = await audit(ctx)

    assert result["verdict"] == "incomplete" and result["lanes"][0]["event_count"] == 0


async def test_owner_event_without_target_is_attributed(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a", None)
    trail.released("agent-a", None)

    assert (await audit(ctx))["verdict"] == "complete"


async def test_empty_target_is_never_an_attribution_key(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("api", "agent-a", "1", ""), {"name": "docs", "owner": "agent-b", "targets": [""]}])
    trail.acquired("agent-c", "")

    lanes = by_name(await audit(ctx))

    assert lanes["api"]["event_count"] == 0 and lanes["docs"]["event_count"] == 0
    assert lanes["api"]["targets"] == ["1"]


async def test_explicit_lane_for_another_lane_is_not_reattributed(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a", lane="frontend")
    trail.released("agent-a", lane="frontend")

    result = await audit(ctx)

    assert result["verdict"] == "incomplete" and result["lanes"][0]["event_count"] == 0


# ---- repository gate ------------------------------------------------------------------


async def test_event_from_another_repo_under_the_same_batch_id_is_ignored(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.released("agent-a", repo="other/repo")

    result = await audit(ctx)

    assert result["verdict"] == "incomplete"
    assert result["lanes"][0]["missing"] == ["terminal"] and result["lanes"][0]["event_count"] == 1


async def test_batch_without_repo_applies_no_gate(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")], repo=None)
    trail.acquired("agent-a", repo="one/repo")
    trail.released("agent-a", repo="other/repo")

    assert (await audit(ctx))["verdict"] == "complete"


async def test_event_without_repo_does_not_pass_a_declared_repo(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.released("agent-a", repo=None)

    assert by_name(await audit(ctx))["backend"]["missing"] == ["terminal"]


# ---- lineage --------------------------------------------------------------------------


async def test_takeover_then_release_by_the_new_holder_is_complete(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.acquired("agent-b")  # dead-heartbeat takeover
    trail.released("agent-b")

    result = await audit(ctx)

    assert result["verdict"] == "complete" and result["lanes"][0]["event_count"] == 3


async def test_release_by_an_agent_that_never_acquired_is_a_lifecycle_gap(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.add("claim.released", "agent-a", "1", status="released", lane="backend")
    trail.add("claim.released", "intruder", "1", status="released", lane="backend")

    assert by_name(await audit(ctx))["backend"]["missing"] == ["lifecycle"]


async def test_only_unauthorized_release_leaves_terminal_missing(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.add("claim.released", "intruder", "1", status="released", lane="backend")

    assert by_name(await audit(ctx))["backend"]["missing"] == ["terminal", "lifecycle"]


async def test_release_then_new_acquisition_is_open_again(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.released("agent-a", release_mode="handoff", handoff_to="agent-b")
    trail.acquired("agent-b")

    assert by_name(await audit(ctx))["backend"]["missing"] == ["terminal"]


async def test_release_before_any_acquisition_does_not_count(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.released("agent-a")
    trail.acquired("agent-a")

    assert by_name(await audit(ctx))["backend"]["missing"] == ["terminal", "lifecycle"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("at", "yesterday"),
        ("at", "2026-06-13"),
        ("at", "2026-06-13T01:00:00"),
        ("agent_id", "UNKNOWN"),
        ("agent_id", "  "),
        ("event_id", ""),
        ("batch_id", "b2"),
        ("schema_version", 2),
        ("schema_version", True),
        ("target", 1),
        ("lane", ""),
        ("status", "active-ish"),
    ],
)
async def test_invalid_acquire_is_not_evidence(ctx: Ctx, root: Path, trail: Trail, field: str, value: Any) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    bad = trail.acquired("agent-a", lane="backend")
    bad[field] = value
    put(root, f"events/b1/{bad['event_id'] or 'blank'}.json", bad)
    if bad["event_id"] == "":
        (root / "events/b1/20260613T000001.000000Z-00000001.json").unlink()
    trail.released("agent-a", lane="backend")

    missing = by_name(await audit(ctx))["backend"]["missing"]

    assert "claim.acquired" in missing and "lifecycle" in missing


async def test_real_rfc3339_offsets_and_fractions_are_accepted(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a", at="2026-06-13T03:00:00.123+02:00")
    trail.released("agent-a", at="2026-06-13T01:30:00Z")

    assert (await audit(ctx))["verdict"] == "complete"


async def test_duplicate_event_order_is_a_lifecycle_gap(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    first = trail.acquired("agent-a")
    trail.released("agent-a")
    put(root, "events/b1/copy.json", first)

    assert by_name(await audit(ctx))["backend"]["missing"] == ["lifecycle"]


async def test_phase_changes_must_be_real_transitions_by_authorized_agents(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.add("phase.changed", "agent-a", "1", previous_phase="build", phase="test")
    trail.add("phase.changed", "agent-a", "1", old_phase="test", new_phase="review")
    trail.released("agent-a")
    assert (await audit(ctx))["verdict"] == "complete"

    trail.add("phase.changed", "agent-a", "1", previous_phase="review", phase="review")
    assert by_name(await audit(ctx))["backend"]["missing"] == ["lifecycle"]


async def test_phase_change_from_an_unauthorized_agent_is_a_gap(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.add("phase.changed", "agent-z", "1", previous_phase="a", phase="b", lane="backend")
    trail.released("agent-a")

    assert by_name(await audit(ctx))["backend"]["missing"] == ["lifecycle"]


async def test_non_lifecycle_events_count_but_never_complete(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.add("note", "agent-a", "1", at="garbage")
    trail.add("help_requested", "agent-a", "1", reason="question")
    trail.add("done", "agent-a", "1", status="done")

    item = by_name(await audit(ctx))["backend"]
    assert item["event_count"] == 3 and item["missing"] == ["claim.acquired", "terminal"]


# ---- lane_closed ----------------------------------------------------------------------


async def test_lane_closed_only_by_claim_released_is_complete(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.released("agent-a")

    assert (await audit(ctx))["verdict"] == "complete"


async def test_valid_lane_closed_is_a_terminal_signal(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.closed("backend", "agent-a", pr_url="https://example.test/pr/1", evidence_url="https://example.test/e")

    assert (await audit(ctx))["verdict"] == "complete"


async def test_lane_closed_without_lane_field_is_attributed_by_target(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.closed("backend", "agent-a", lane=None)

    assert (await audit(ctx))["verdict"] == "complete"


@pytest.mark.parametrize(
    "change",
    [
        {"terminal": "finished"},
        {"schema_version": 1},
        {"workspace": ""},
        {"closed_by": {"agent_id": "agent-a"}},
        {"closed_by": {"agent_id": "agent-a", "machine": "m1", "extra": 1}},
        {"at": "soon"},
        {"pr_url": "ftp://x"},
        {"evidence_url": "not a url"},
        {"event_id": "lane_closed-0000000000000000"},
        {"target": "3", "lane": "backend"},
        {"agent_id": "agent-b"},
    ],
)
async def test_invalid_lane_closed_never_falls_back_to_a_release(
    ctx: Ctx, root: Path, trail: Trail, change: dict[str, Any]
) -> None:
    register(root, [lane("backend", "agent-a", "1", "2")])
    trail.acquired("agent-a")
    trail.released("agent-a")
    trail.closed("backend", "agent-a", **change)

    item = by_name(await audit(ctx))["backend"]

    assert item["missing"] == ["terminal"] and not item["complete"]


async def test_lane_closed_must_name_owner_slash_repo_when_no_repo_gate(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")], repo=None)
    trail.acquired("agent-a")
    trail.released("agent-a")
    trail.closed("backend", "agent-a", repo="noslash")

    assert by_name(await audit(ctx))["backend"]["missing"] == ["terminal"]


async def test_conflicting_lane_closed_records_are_incomplete(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.closed("backend", "agent-a", terminal="done")
    trail.closed("backend", "agent-a", terminal="abandoned", file="second-copy")

    item = by_name(await audit(ctx))["backend"]

    assert "terminal" in item["missing"] and "lifecycle" in item["missing"]  # not uniquely ordered


async def test_lane_closed_by_a_closer_that_never_acquired_is_incomplete(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-b")
    trail.closed("backend", "agent-a")

    assert by_name(await audit(ctx))["backend"]["missing"] == ["terminal"]


async def test_lane_closed_after_takeover_by_new_holder_is_complete(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a")
    trail.acquired("agent-b")
    trail.closed("backend", "agent-b", terminal="superseded")

    assert (await audit(ctx))["verdict"] == "complete"


async def test_invalid_events_are_reported_as_warnings(ctx: Ctx, root: Path, trail: Trail) -> None:
    register(root, [lane("backend", "agent-a", "1")])
    trail.acquired("agent-a", at="bad")

    await audit(ctx)

    assert any("at is not an RFC 3339 time" in w for w in ctx.warnings)
