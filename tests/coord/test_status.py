"""status: full, target- and batch-scoped views, degraded notes, exit codes.

Spec: the status paragraphs under "CLI", Batch Schema (dependencies,
blocked_on), Heartbeat Liveness; the status steps of tests/fixtures/conformance.
"""

from __future__ import annotations

from agentcoordd.store.base import Capabilities

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from golden_replay import replay

from agentcoordd.coord.context import Ctx
from agentcoordd.coord.status import status
from agentcoordd.model.errors import UsageError
from agentcoordd.model.timefmt import format_ts
from agentcoordd.store.base import Forbidden, Page, Versioned
from agentcoordd.store.cache import CachingStore
from agentcoordd.store.local import LocalStore


def put(root: Path, rel: str, data: Any) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2) + "\n")


def ts(clock, **delta: float) -> str:
    return format_ts(clock.now() + dt.timedelta(**delta))


def heartbeat(clock, agent: str, status_: str = "in_progress", *, age: dt.timedelta = dt.timedelta(0), **extra: Any) -> dict[str, Any]:
    updated = clock.now() - age
    return {
        "schema_version": 1,
        "agent_id": agent,
        "status": status_,
        "updated_at": format_ts(updated),
        "expires_at": format_ts(updated + dt.timedelta(minutes=15)),
        **extra,
    }


def claim(clock, repo: str, target: str, agent: str, **extra: Any) -> dict[str, Any]:
    now = ts(clock)
    return {
        "schema_version": 1, "repo": repo, "target": target, "agent_id": agent, "status": "active",
        "claimed_at": now, "updated_at": now, "expires_at": ts(clock, hours=4), **extra,
    }


def event(batch: str, n: int, at: str, **extra: Any) -> dict[str, Any]:
    return {"schema_version": 1, "event_id": f"ev{n:04d}", "batch_id": batch, "type": "note", "at": at, **extra}


def lanes(*specs: tuple[str, str, list[str], Any]) -> list[dict[str, Any]]:
    out = []
    for name, owner, targets, deps in specs:
        lane: dict[str, Any] = {"name": name, "owner": owner, "targets": targets}
        if deps is not None:
            lane["depends_on"] = deps
        out.append(lane)
    return out


def batch(batch_id: str, lane_list: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"schema_version": 1, "batch_id": batch_id, "lanes": lane_list, "registered_at": "2026-06-13T00:00:00Z",
            "updated_at": "2026-06-13T00:00:00Z", **extra}


def body(payload: dict[str, Any]) -> dict[str, Any]:
    out = dict(payload)
    out.pop("exit_code")
    out.pop("exit_error", None)
    return out


def lane_of(payload: dict[str, Any], name: str) -> dict[str, Any]:
    return next(lane for b in payload["batches"] for lane in b["lanes"] if lane["name"] == name)


# ---- conformance replays -------------------------------------------------------

GOLDEN = [
    ("register_batch_deps_blocked_on", [7]),
    ("release_plain", [4]),
    ("claim_refused_live_holder", [4]),
    ("claim_refused_stale_holder", [4]),
    ("claim_takeover_dead_heartbeat", [5]),
    ("heartbeat_status_vocabulary", [8]),
    ("terminal_release_lane_closed", [8]),
    ("record_event_typed_valid", [6]),
    ("record_event_status_vocabulary", [7]),
    ("gc_dry_run_execute", [11]),
]


@pytest.mark.parametrize(("name", "steps"), GOLDEN, ids=[g[0] for g in GOLDEN])
async def test_golden_status_outputs(fixtures_dir: Path, root: Path, ctx: Ctx, name: str, steps: list[int]) -> None:
    await replay(fixtures_dir, name, root, ctx, steps)


@pytest.mark.parametrize(("name", "steps"), GOLDEN, ids=[g[0] for g in GOLDEN])
async def test_golden_status_outputs_through_the_cache(
    fixtures_dir: Path, root: Path, clock, name: str, steps: list[int]
) -> None:
    ctx = Ctx(CachingStore(LocalStore(root)), clock)
    await replay(fixtures_dir, name, root, ctx, steps)


# ---- scopes and flags -----------------------------------------------------------


async def test_empty_root_full_status(ctx: Ctx) -> None:
    payload = await status(ctx)

    assert payload["exit_code"] == 0
    assert body(payload) == {
        "version": "0.1.0", "scope": {"kind": "all"}, "degraded": [], "section_notes": {},
        "claims": [], "heartbeats": [], "batches": [], "events": [],
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_id": "b1", "repo": "acme/widgets", "target": "1"}, "cannot be combined"),
        ({"repo": "acme/widgets"}, "--target"),
        ({"target": "1"}, "--repo"),
        ({"batch_id": "b1", "include_archived": True}, "unscoped"),
        ({"repo": "acme/widgets", "target": "1", "include_archived": True}, "unscoped"),
        ({"batch_id": "../x"}, "invalid batch-id: ../x"),
        ({"repo": "acme/widgets", "target": "../x"}, "invalid target: ../x"),
        ({"events": -1}, "--events"),
        ({"events": 3, "all_events": True}, "cannot be combined"),
    ],
)
async def test_usage_errors(ctx: Ctx, root: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        await status(ctx, **kwargs)
    assert list(root.iterdir()) == []


async def test_target_scope_without_claim_is_empty_not_degraded(ctx: Ctx) -> None:
    payload = await status(ctx, repo="acme/widgets", target="9")

    assert payload["exit_code"] == 0 and payload["claims"] == [] and payload["heartbeats"] == []
    assert payload["degraded"] == ["not checked in target scope"]


async def test_target_scope_notes_a_missing_holder_heartbeat(ctx: Ctx, root: Path, clock) -> None:
    put(root, "claims/acme/widgets/1.json", claim(clock, "acme/widgets", "1", "agent-a", branch="feat/1"))

    payload = await status(ctx, repo="acme/widgets", target="1")

    assert payload["exit_code"] == 0
    assert payload["claims"][0]["branch"] == "feat/1"
    assert payload["section_notes"]["heartbeats"] == "holder heartbeat not found"


async def test_target_scope_unreadable_holder_heartbeat_is_a_note_not_a_failure(ctx: Ctx, root: Path,
                                                                                clock) -> None:
    """agent-coord (conformance claim_invalid_holder_heartbeat): the claim is known, exit 0."""
    put(root, "claims/acme/widgets/1.json", claim(clock, "acme/widgets", "1", "agent-a"))
    put(root, "heartbeats/agent-a.json", "{broken")

    payload = await status(ctx, repo="acme/widgets", target="1")

    assert payload["exit_code"] == 0
    assert payload["section_notes"]["heartbeats"] == "holder heartbeat unreadable"


async def test_target_scope_mismatched_heartbeat_is_not_shown(ctx: Ctx, root: Path, clock) -> None:
    put(root, "claims/acme/widgets/1.json", claim(clock, "acme/widgets", "1", "agent-a"))
    put(root, "heartbeats/agent-a.json", heartbeat(clock, "someone-else"))

    payload = await status(ctx, repo="acme/widgets", target="1")

    assert payload["heartbeats"] == [] and payload["section_notes"]["heartbeats"] == "holder heartbeat mismatched"


async def test_unreadable_claim_in_target_scope_is_unknown(ctx: Ctx, root: Path) -> None:
    put(root, "claims/acme/widgets/1.json", "not json")

    payload = await status(ctx, repo="acme/widgets", target="1")

    assert payload["exit_code"] == 2 and payload["claims"] == []
    assert "claims/acme/widgets/1.json" in payload["section_notes"]["claims"]


# ---- liveness, lane status, dependencies ------------------------------------------


@pytest.mark.parametrize(
    ("age_minutes", "expected"),
    [(0, "live"), (14, "live"), (15, "stale"), (59, "stale"), (60, "dead"), (600, "dead")],
)
async def test_heartbeat_liveness_in_status(ctx: Ctx, root: Path, clock, age_minutes: int, expected: str) -> None:
    put(root, "heartbeats/agent-a.json", heartbeat(clock, "agent-a", age=dt.timedelta(minutes=age_minutes)))

    payload = await status(ctx)

    assert payload["heartbeats"][0]["liveness"] == expected


async def test_heartbeat_with_bad_timestamps_is_unknown_liveness(ctx: Ctx, root: Path, clock) -> None:
    put(root, "heartbeats/agent-a.json", {"schema_version": 1, "agent_id": "agent-a", "status": "in_progress"})

    payload = await status(ctx)

    assert payload["heartbeats"][0]["liveness"] == "unknown"
    assert payload["heartbeats"][0]["updated_at"] == "UNKNOWN"


async def test_heartbeat_projection_keeps_metadata_and_attribution(ctx: Ctx, root: Path, clock) -> None:
    put(root, "heartbeats/agent-a.json", heartbeat(
        clock, "agent-a", repo="acme/widgets", target="1", phase="build", machine_id="m5",
        session_id="s-1", session_source="codex_thread_id", thread_handle="t", generation=3, operator="op",
    ))

    hb = (await status(ctx))["heartbeats"][0]

    assert hb["target"] == "acme/widgets#1" and hb["phase"] == "build" and hb["generation"] == 3
    assert (hb["machine_id"], hb["session_id"], hb["session_source"]) == ("m5", "s-1", "codex_thread_id")
    assert "expires_at" not in hb and "schema_version" not in hb and "repo" not in hb


async def test_claim_projection_keeps_handoff_and_attribution(ctx: Ctx, root: Path, clock) -> None:
    put(root, "claims/acme/widgets/1.json", claim(
        clock, "acme/widgets", "1", "agent-a", status="released", release_mode="handoff",
        handoff_to="agent-b", handoff_note="resume", machine_id="m1", released_at=ts(clock),
    ))

    c = (await status(ctx))["claims"][0]

    assert c["release_mode"] == "handoff" and c["handoff_to"] == "agent-b" and c["machine_id"] == "m1"
    assert c["branch"] == "UNKNOWN" and "released_at" not in c and "claimed_at" not in c


DEPENDENCY_CASES = [
    ("done", []), ("merged", []), ("ready", []), ("ready_gates_clean", []), ("ready_no_merge_authority", []),
    ("complete", []), ("completed", []),
    ("released", ["b1:backend"]), ("abandoned", ["b1:backend"]), ("superseded", ["b1:backend"]),
    ("in_progress", ["b1:backend"]), ("blocked", ["b1:backend"]), ("failed", ["b1:backend"]),
]


@pytest.mark.parametrize(("dep_status", "blocked"), DEPENDENCY_CASES)
async def test_dependency_met_only_by_satisfying_terminal_statuses(
    ctx: Ctx, root: Path, clock, dep_status: str, blocked: list[str]
) -> None:
    put(root, "batches/b1.json", batch("b1", lanes(("backend", "agent-a", ["1"], None), ("docs", "agent-b", ["2"], "b1:backend"))))
    put(root, "heartbeats/agent-a.json", heartbeat(clock, "agent-a", dep_status))

    for payload in (await status(ctx), await status(ctx, batch_id="b1")):
        assert lane_of(payload, "docs")["blocked_on"] == blocked
        assert lane_of(payload, "docs")["deps"] == ["b1:backend"]


async def test_released_claim_does_not_unblock_dependents(ctx: Ctx, root: Path, clock) -> None:
    put(root, "batches/b1.json", batch("b1", lanes(("backend", "agent-a", ["1"], None), ("docs", "agent-b", ["2"], ["b1:backend"]))))
    put(root, "claims/acme/widgets/1.json", claim(clock, "acme/widgets", "1", "agent-a", status="released", batch_id="b1"))

    payload = await status(ctx)

    assert lane_of(payload, "backend")["status"] == "unknown"
    assert lane_of(payload, "docs")["blocked_on"] == ["b1:backend"]


async def test_declared_lane_terminal_wins_over_heartbeat(ctx: Ctx, root: Path, clock) -> None:
    lane_list = lanes(("backend", "agent-a", ["1"], None), ("docs", "agent-b", ["2"], ["b1:backend"]))
    lane_list[0].update(terminal="done", status="done", closed_at=ts(clock), closed_by={"agent_id": "agent-a", "machine": "m1"})
    put(root, "batches/b1.json", batch("b1", lane_list))
    put(root, "heartbeats/agent-a.json", heartbeat(clock, "agent-a", "blocked"))

    payload = await status(ctx, batch_id="b1")

    backend = lane_of(payload, "backend")
    assert backend["status"] == "done" and backend["liveness"] == "live" and backend["terminal"] == "done"
    assert lane_of(payload, "docs")["blocked_on"] == []


async def test_abandoned_terminal_lane_does_not_unblock(ctx: Ctx, root: Path, clock) -> None:
    lane_list = lanes(("backend", "agent-a", ["1"], None), ("docs", "agent-b", ["2"], ["b1:backend"]))
    lane_list[0].update(terminal="abandoned", status="abandoned")
    put(root, "batches/b1.json", batch("b1", lane_list))

    payload = await status(ctx, batch_id="b1")

    assert lane_of(payload, "docs")["blocked_on"] == ["b1:backend"]


async def test_cross_batch_dependency_with_colons_in_batch_id(ctx: Ctx, root: Path, clock) -> None:
    put(root, "batches/rel:2026:06.json", batch("rel:2026:06", lanes(("api", "agent-x", ["7"], None))))
    put(root, "batches/b1.json", batch("b1", lanes(("docs", "agent-b", ["2"], ["rel:2026:06:api"]))))
    put(root, "heartbeats/agent-x.json", heartbeat(clock, "agent-x", "merged"))

    for payload in (await status(ctx), await status(ctx, batch_id="b1")):
        assert lane_of(payload, "docs")["blocked_on"] == []

    put(root, "heartbeats/agent-x.json", heartbeat(clock, "agent-x", "in_progress"))
    payload = await status(ctx, batch_id="b1")
    assert lane_of(payload, "docs")["blocked_on"] == ["rel:2026:06:api"]
    assert [h["agent_id"] for h in payload["heartbeats"]] == ["agent-x"]
    assert payload["section_notes"]["heartbeats"] == "lane-owner heartbeats not found: agent-b"


async def test_batch_scope_notes_unresolved_and_malformed_dependency_refs(ctx: Ctx, root: Path, clock) -> None:
    lane_list = lanes(("docs", "agent-b", ["2"], ["gone:api", "nocolon", "b1:docs"]))
    put(root, "batches/b1.json", batch("b1", lane_list))
    put(root, "batches/other.json", batch("other", lanes(("x", "agent-x", ["1"], None))))
    lane_list[0]["depends_on"].append("other:nope")
    put(root, "batches/b1.json", batch("b1", lane_list))
    put(root, "heartbeats/agent-b.json", heartbeat(clock, "agent-b"))

    payload = await status(ctx, batch_id="b1")

    assert payload["exit_code"] == 0
    assert payload["section_notes"]["dependencies"] == "malformed dependency refs: nocolon, other:nope"
    assert payload["section_notes"]["unresolved_dependencies"] == "unresolved dependency refs: gone:api"
    assert lane_of(payload, "docs")["blocked_on"] == ["gone:api", "nocolon", "b1:docs", "other:nope"]


async def test_batch_not_found_still_lists_its_events(ctx: Ctx, root: Path, clock) -> None:
    put(root, "events/b9/ev0001.json", event("b9", 1, ts(clock)))

    payload = await status(ctx, batch_id="b9")

    assert payload["exit_code"] == 0 and payload["batches"] == []
    assert payload["degraded"] == ["not checked in batch scope", "batch not found"]
    assert [e["event_id"] for e in payload["events"]] == ["ev0001"]


async def test_malformed_lanes_are_noted_not_fatal(ctx: Ctx, root: Path, clock) -> None:
    lane_list: list[Any] = lanes(("ok", "agent-a", ["1"], None), ("a:b", "agent-b", ["2"], None))
    lane_list.append("not-a-lane")
    put(root, "batches/b1.json", batch("b1", lane_list))

    for payload in (await status(ctx), await status(ctx, batch_id="b1")):
        assert payload["exit_code"] == 0
        assert [lane["name"] for lane in payload["batches"][0]["lanes"]] == ["ok", "a:b"]
        assert "malformed lane names: a:b" in payload["section_notes"]["lanes"]
        assert "batches/b1.json#3" in payload["section_notes"]["lanes"]


async def test_batch_projection_keeps_manifest_metadata(ctx: Ctx, root: Path, clock) -> None:
    put(root, "batches/b1.json", batch(
        "b1", lanes(("ok", "agent-a", ["1"], None)), repo="acme/widgets", objective="o", launch_prompt="p",
        targets=[{"type": "issue", "target": "1"}], created_by_machine="m1", synthetic=True,
    ))

    projected = (await status(ctx))["batches"][0]

    assert projected["path"] == "batches/b1.json" and "schema_version" not in projected
    assert projected["launch_prompt"] == "p" and projected["targets"] == [{"type": "issue", "target": "1"}]
    assert projected["created_by_machine"] == "m1" and projected["synthetic"] is True


# ---- events ------------------------------------------------------------------------


async def test_full_status_shows_the_most_recent_events_per_batch(ctx: Ctx, root: Path, clock) -> None:
    for n in range(30):
        put(root, f"events/b1/ev{n:04d}.json", event("b1", n, ts(clock, minutes=n)))
    for n in range(3):
        put(root, f"events/b2/ev{n:04d}.json", event("b2", n, ts(clock, minutes=-n)))

    default = await status(ctx)
    five = await status(ctx, events=5)
    every = await status(ctx, all_events=True)

    b1 = [e["event_id"] for e in default["events"] if e["batch_id"] == "b1"]
    assert b1 == [f"ev{n:04d}" for n in range(10, 30)]
    assert len([e for e in default["events"] if e["batch_id"] == "b2"]) == 3
    assert default["exit_code"] == 0 and "10 older events omitted" in default["section_notes"]["events"]
    assert len(five["events"]) == 8 and len(every["events"]) == 33 and "events" not in every["section_notes"]
    ats = [e["at"] for e in every["events"]]
    assert ats == sorted(ats)


async def test_events_are_ordered_by_at_not_by_id(ctx: Ctx, root: Path, clock) -> None:
    put(root, "events/b1/aaa.json", event("b1", 1, ts(clock, minutes=5)) | {"event_id": "aaa"})
    put(root, "events/b1/lane_closed-x.json", event("b1", 2, ts(clock, minutes=1)) | {"event_id": "lane_closed-x"})
    put(root, "events/b1/zzz.json", event("b1", 3, "2026-06-13T00:33:00+00:00") | {"event_id": "zzz"})

    payload = await status(ctx, batch_id="b1")

    assert [e["event_id"] for e in payload["events"]] == ["lane_closed-x", "zzz", "aaa"]


async def test_batch_scope_shows_all_events_unless_limited(ctx: Ctx, root: Path, clock) -> None:
    for n in range(25):
        put(root, f"events/b1/ev{n:04d}.json", event("b1", n, ts(clock, seconds=n)))

    assert len((await status(ctx, batch_id="b1"))["events"]) == 25
    assert [e["event_id"] for e in (await status(ctx, batch_id="b1", events=2))["events"]] == ["ev0023", "ev0024"]


# ---- unreadable state: everything readable is shown, exit 2 ------------------------------


async def test_unreadable_records_are_named_and_do_not_hide_the_rest(ctx: Ctx, root: Path, clock) -> None:
    put(root, "claims/acme/widgets/1.json", claim(clock, "acme/widgets", "1", "agent-a"))
    put(root, "claims/acme/widgets/2.json", "{not json")
    put(root, "heartbeats/agent-a.json", heartbeat(clock, "agent-a"))
    put(root, "heartbeats/agent-b.json", "[1, 2]")
    put(root, "batches/b1.json", batch("b1", lanes(("l", "agent-b", ["1"], None))))
    put(root, "batches/b2.json", "")
    put(root, "events/b1/ev0001.json", event("b1", 1, ts(clock)))
    put(root, "events/b1/ev0002.json", "nope")

    for ctx_ in (ctx, Ctx(CachingStore(LocalStore(root)), clock)):
        payload = await status(ctx_)
        assert payload["exit_code"] == 0  # each bad record is its own problem
        assert [c["path"] for c in payload["claims"]] == ["claims/acme/widgets/1.json"]
        assert [h["agent_id"] for h in payload["heartbeats"]] == ["agent-a"]
        assert [b["batch_id"] for b in payload["batches"]] == ["b1"]
        assert [e["event_id"] for e in payload["events"]] == ["ev0001"]
        notes = payload["section_notes"]
        assert notes["claims"] == "unreadable records: claims/acme/widgets/2.json"
        assert notes["heartbeats"] == "unreadable records: heartbeats/agent-b.json"
        assert notes["batches"] == "unreadable records: batches/b2.json"
        assert notes["events"] == "unreadable records: events/b1/ev0002.json"
        assert lane_of(payload, "l")["liveness"] == "unreadable"
        assert len(payload["degraded"]) == 4 and "exit_error" not in payload
        assert ctx_.warnings[-1] == (
            "unreadable records left out (see the degraded notes): claims/acme/widgets/2.json, "
            "heartbeats/agent-b.json, batches/b2.json, events/b1/ev0002.json")


async def test_unreadable_batch_in_batch_scope_is_unknown(ctx: Ctx, root: Path) -> None:
    put(root, "batches/b1.json", "{")

    payload = await status(ctx, batch_id="b1")

    assert payload["exit_code"] == 2 and payload["batches"] == []
    assert payload["section_notes"]["batches"] == "batch unreadable: batches/b1.json"


async def test_symlinked_family_is_refused_and_unknown(ctx: Ctx, root: Path, tmp_path: Path, clock) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "agent-x.json").write_text(json.dumps(heartbeat(clock, "agent-x")))
    (root / "heartbeats").symlink_to(outside)
    put(root, "claims/acme/widgets/1.json", claim(clock, "acme/widgets", "1", "agent-a"))

    payload = await status(ctx)

    assert payload["exit_code"] == 2 and payload["heartbeats"] == []
    assert "heartbeats not readable" in payload["section_notes"]["heartbeats"]
    assert len(payload["claims"]) == 1


async def test_archive_only_with_include_archived(ctx: Ctx, root: Path) -> None:
    envelope = {"schema_version": 1, "record_family": "archived_record", "source_path": "claims/a/b/1.json",
                "data": {"x": 1}, "archived_at": "2026-06-13T00:00:00Z", "delete_after": "2026-07-13T00:00:00Z",
                "reason": "terminal_claim", "synthetic": False}
    put(root, "archive/claims/a/b/1.json", envelope)

    assert "archive" not in await status(ctx)
    archived = (await status(ctx, include_archived=True))["archive"]
    assert archived == [{"path": "archive/claims/a/b/1.json", **{k: v for k, v in envelope.items() if k not in ("data", "schema_version")}}]


# ---- scoped status reads only what the spec lists -------------------------------------


class CountingStore:
    """Wraps a store and records every read by path / listed prefix."""
    capabilities = Capabilities()  # a plain Store: every read goes through it


    def __init__(self, inner: LocalStore) -> None:
        self.inner = inner
        self.name = "counting"
        self.gets: list[str] = []
        self.lists: list[str] = []

    async def get(self, path: str) -> Versioned | None:
        self.gets.append(path)
        return await self.inner.get(path)

    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Page:
        self.lists.append(prefix)
        return await self.inner.list(prefix, limit, cursor)

    async def create(self, path: str, data: Any) -> str:  # pragma: no cover - never called
        raise AssertionError("status must not write")

    replace = delete = create

    async def aclose(self) -> None:
        return None


@pytest.fixture
def crowded(root: Path, clock) -> Path:
    """Unrelated state everywhere, so an over-eager read would show up."""
    for n in range(5):
        put(root, f"claims/acme/widgets/{n}.json", claim(clock, "acme/widgets", str(n), f"agent-{n}"))
        put(root, f"heartbeats/agent-{n}.json", heartbeat(clock, f"agent-{n}"))
        put(root, f"heartbeats/other-{n}.json", heartbeat(clock, f"other-{n}"))
        put(root, f"events/unrelated/ev{n:04d}.json", event("unrelated", n, ts(clock)))
    put(root, "batches/unrelated.json", batch("unrelated", lanes(("u", "other-1", ["9"], None))))
    put(root, "batches/dep.json", batch("dep", lanes(("api", "agent-3", ["3"], None), ("web", "other-4", ["4"], None))))
    put(root, "batches/b1.json", batch("b1", lanes(
        ("backend", "agent-1", ["1"], None),
        ("docs", "agent-2", ["2"], ["b1:backend", "dep:api"]),
        ("qa", "ghost", ["5"], "b1:docs"),
    )))
    put(root, "events/b1/ev0001.json", event("b1", 1, ts(clock)))
    put(root, "archive/claims/acme/widgets/0.json", {"schema_version": 1})
    return root


async def test_target_scope_reads_only_the_claim_and_its_holder_heartbeat(crowded: Path, clock) -> None:
    counting = CountingStore(LocalStore(crowded))

    payload = await status(Ctx(counting, clock), repo="acme/widgets", target="2")

    assert counting.gets == ["claims/acme/widgets/2.json", "heartbeats/agent-2.json"]
    assert counting.lists == []
    assert [h["agent_id"] for h in payload["heartbeats"]] == ["agent-2"]


async def test_target_scope_without_a_claim_reads_only_the_claim_path(crowded: Path, clock) -> None:
    counting = CountingStore(LocalStore(crowded))

    await status(Ctx(counting, clock), repo="acme/widgets", target="77")

    assert counting.gets == ["claims/acme/widgets/77.json"] and counting.lists == []


async def test_batch_scope_reads_only_batch_events_owner_and_dependency_state(crowded: Path, clock) -> None:
    counting = CountingStore(LocalStore(crowded))

    payload = await status(Ctx(counting, clock), batch_id="b1")

    assert counting.lists == ["events/b1"]
    assert sorted(counting.gets) == sorted([
        "batches/b1.json",
        "heartbeats/agent-1.json",
        "heartbeats/agent-2.json",
        "heartbeats/ghost.json",
        "batches/dep.json",
        "heartbeats/agent-3.json",
    ])
    assert len(counting.gets) == len(set(counting.gets))
    assert lane_of(payload, "docs")["blocked_on"] == ["b1:backend", "dep:api"]
    assert payload["section_notes"]["heartbeats"] == "lane-owner heartbeats not found: ghost"
    assert [h["agent_id"] for h in payload["heartbeats"]] == ["agent-1", "agent-2", "agent-3"]


async def test_full_status_lists_hot_families_and_archive_only_when_asked(crowded: Path, clock) -> None:
    counting = CountingStore(LocalStore(crowded))

    # host_limits/default: the optional host_limits projection (docs/capacity.md)
    await status(Ctx(counting, clock))
    assert sorted(counting.lists) == ["batches", "claims", "events", "heartbeats",
                                      "host_limits/default"]
    assert counting.gets == []

    counting.lists.clear()
    await status(Ctx(counting, clock), include_archived=True)
    assert sorted(counting.lists) == ["archive", "batches", "claims", "events", "heartbeats",
                                      "host_limits/default"]


class PartialStore(CountingStore):
    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Page:
        page = await super().list(prefix, limit, cursor)
        return Page(page.entries, page.next_cursor, partial=prefix.startswith("events"))


async def test_filtered_listing_is_a_note_not_unknown(crowded: Path, clock) -> None:
    payload = await status(Ctx(PartialStore(LocalStore(crowded)), clock), batch_id="b1")

    assert payload["exit_code"] == 0
    assert payload["section_notes"]["events"] == "events filtered by scoped token"


class ForbiddenStore(CountingStore):
    async def list(self, prefix: str, limit: int | None = None, cursor: str | None = None) -> Page:
        if prefix == "heartbeats":
            raise Forbidden("403 forbidden for heartbeats")
        return await super().list(prefix, limit, cursor)


async def test_forbidden_section_is_noted_and_unknown_while_others_show(crowded: Path, clock) -> None:
    payload = await status(Ctx(ForbiddenStore(LocalStore(crowded)), clock))

    assert payload["exit_code"] == 2 and payload["heartbeats"] == [] and len(payload["claims"]) == 5
    assert payload["section_notes"]["heartbeats"] == "heartbeats not readable: 403 forbidden for heartbeats"


# ---- the daemon's parsed-record cache ---------------------------------------------


async def test_cache_rereads_only_changed_records(root: Path, clock, record_loads: list[str]) -> None:
    for n in range(4):
        put(root, f"claims/acme/widgets/{n}.json", claim(clock, "acme/widgets", str(n), f"agent-{n}"))
    loads = record_loads
    ctx = Ctx(CachingStore(LocalStore(root)), clock)

    await status(ctx)
    assert len(loads) == 4
    loads.clear()
    await status(ctx)
    assert loads == []

    # in-place rewrite (the Ruby tool's style), an atomic replace, a delete and an add
    (root / "claims/acme/widgets/0.json").write_text(json.dumps(claim(clock, "acme/widgets", "0", "agent-zz")))
    await ctx.store.replace(
        "claims/acme/widgets/1.json",
        claim(clock, "acme/widgets", "1", "agent-yy"),
        (await ctx.store.get("claims/acme/widgets/1.json")).version,
    )
    (root / "claims/acme/widgets/2.json").unlink()
    put(root, "claims/acme/widgets/9.json", claim(clock, "acme/widgets", "9", "agent-9"))
    payload = await status(ctx)

    assert sorted(loads) == ["claims/acme/widgets/0.json", "claims/acme/widgets/1.json", "claims/acme/widgets/9.json"]
    assert [c["agent_id"] for c in payload["claims"]] == ["agent-zz", "agent-yy", "agent-3", "agent-9"]
    assert ctx.store.cached_entries()["status.claims"] == 4


async def test_cache_sees_a_fixed_unreadable_record(root: Path, clock) -> None:
    put(root, "heartbeats/agent-a.json", "{broken")
    ctx = Ctx(CachingStore(LocalStore(root)), clock)
    assert (await status(ctx))["section_notes"]["heartbeats"] == "unreadable records: heartbeats/agent-a.json"

    put(root, "heartbeats/agent-a.json", heartbeat(clock, "agent-a"))
    payload = await status(ctx)

    assert payload["exit_code"] == 0 and payload["heartbeats"][0]["agent_id"] == "agent-a"


async def test_cache_liveness_moves_with_the_clock(root: Path, clock) -> None:
    put(root, "heartbeats/agent-a.json", heartbeat(clock, "agent-a"))
    ctx = Ctx(CachingStore(LocalStore(root)), clock)
    assert (await status(ctx))["heartbeats"][0]["liveness"] == "live"

    clock.advance(minutes=20)
    assert (await status(ctx))["heartbeats"][0]["liveness"] == "stale"
    clock.advance(hours=1)
    assert (await status(ctx))["heartbeats"][0]["liveness"] == "dead"


async def test_cache_cap_bounds_memory_without_changing_results(root: Path, clock) -> None:
    for n in range(30):
        put(root, f"events/b1/ev{n:04d}.json", event("b1", n, ts(clock, seconds=n)))
    store = CachingStore(LocalStore(root), max_entries=10)
    ctx = Ctx(store, clock)

    first = await status(ctx, batch_id="b1")
    second = await status(ctx, batch_id="b1")

    assert first == second and len(first["events"]) == 30
    assert max(store.cached_entries().values()) <= 10


async def test_cache_refuses_symlinked_records(root: Path, tmp_path: Path, clock) -> None:
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps(heartbeat(clock, "agent-a")))
    (root / "heartbeats").mkdir()
    (root / "heartbeats" / "agent-a.json").symlink_to(outside)
    ctx = Ctx(CachingStore(LocalStore(root)), clock)

    payload = await status(ctx)

    assert payload["exit_code"] == 2 and payload["heartbeats"] == []


def test_cached_liveness_agrees_with_the_model() -> None:
    from agentcoordd.coord.projections import liveness_of
    from agentcoordd.model.liveness import liveness
    from agentcoordd.model.timefmt import parse_ts

    base = dt.datetime(2026, 6, 13, 0, 0, tzinfo=dt.timezone.utc)
    stamps = ["2026-06-13T00:00:00Z", "2026-06-13T00:15:00Z", "2026-06-12T23:00:00Z", "2026-06-13T00:00:00+01:00", "bad", None]
    for updated in stamps:
        for expires in stamps:
            for minutes in (-30, 0, 10, 15, 30, 60, 61, 600):
                now = base + dt.timedelta(minutes=minutes)
                assert liveness_of(parse_ts(updated), parse_ts(expires), now) == liveness(updated, expires, now)


@pytest.mark.parametrize("cached", [False, True])
async def test_event_limit_is_per_batch_even_with_lookalike_batch_ids(root: Path, clock, cached: bool) -> None:
    for name in ("b1", "b1-x", "b10", "b1.y"):
        for n in range(5):
            put(root, f"events/{name}/ev{n:04d}.json", event(name, n, ts(clock, minutes=n)))
    # a tie at the cut-off: the larger path is the more recent
    put(root, "events/b1/ev9999.json", event("b1", 9999, ts(clock, minutes=3)))
    store = CachingStore(LocalStore(root)) if cached else LocalStore(root)

    payload = await status(Ctx(store, clock), events=2)

    shown = {(e["batch_id"], e["event_id"]) for e in payload["events"]}
    assert {e for e in shown if e[0] == "b1"} == {("b1", "ev0004"), ("b1", "ev9999")}
    for name in ("b1-x", "b10", "b1.y"):
        assert {e for e in shown if e[0] == name} == {(name, "ev0003"), (name, "ev0004")}
    assert "13 older events omitted" in payload["section_notes"]["events"]


@pytest.mark.parametrize("mixed", [False, True])
def test_the_one_directory_walk_lists_in_path_order(root: Path, mixed: bool) -> None:
    """LocalStore.walk_sync serves listings and the parsed-record cache alike."""
    rels = ["claims/acme/repo/1.json", "claims/acme/repo-1/2.json", "claims/acme/repo.x/3.json",
            "claims/acme/repo/10.json", "claims/acme/repo/9.json"]
    for rel in (*rels, "claims/b/c/.tmp.json"):
        put(root, rel, "{}")
    if mixed:
        put(root, "claims/acme/stray.json", "{}")
        rels.append("claims/acme/stray.json")
    store = LocalStore(root)

    assert [p for p, _ in store.walk_sync("claims")] == sorted(rels) == store.list_paths_sync("claims")


async def test_a_forbidden_owner_heartbeat_leaves_the_rest_readable_and_unknown(tmp_path) -> None:
    """A scoped token that cannot read the holder's heartbeat: the claim is shown,
    the heartbeat section says why, and the result is UNKNOWN (exit 2)."""
    import datetime as dt

    from agentcoordd.coord import claims as claim_uc
    from agentcoordd.coord import status as status_uc
    from agentcoordd.coord.context import Ctx
    from agentcoordd.store.base import Forbidden
    from agentcoordd.store.local import LocalStore

    class Clock:
        def now(self) -> dt.datetime:
            return dt.datetime(2026, 6, 13, tzinfo=dt.timezone.utc)

    class ScopedStore(LocalStore):
        async def get(self, path: str):  # type: ignore[override]
            if path.startswith("heartbeats/"):
                raise Forbidden(f"forbidden: {path}")
            return await super().get(path)

    store = ScopedStore(tmp_path)
    await claim_uc.claim(Ctx(LocalStore(tmp_path), Clock()), agent_id="agent-a", repo="acme/widgets", target="1")
    payload = await status_uc.status(Ctx(store, Clock()), repo="acme/widgets", target="1")
    assert payload["exit_code"] == 2
    assert [c["agent_id"] for c in payload["claims"]] == ["agent-a"]
    assert "heartbeats" in payload["section_notes"]
