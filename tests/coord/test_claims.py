"""claim and (plain / handoff) release, on a real LocalStore with a fake clock.

Spec: CLI ("claim acquires or renews a lease…", release), Auto-emitted lifecycle
events, Machine and session identity, Claim Schema; conformance/golden claim_* and
release_* scenarios.
"""

from __future__ import annotations

from agentcoordd.store.base import Capabilities


import pytest

from agentcoordd.coord import claims
from agentcoordd.coord.common import CAS_ATTEMPTS
from agentcoordd.coord.context import Ctx, LeasePolicy
from agentcoordd.model.errors import ClaimRefused, OperationalError, UsageError
from agentcoordd.model.identity import Identity
from agentcoordd.model.records import Metadata
from agentcoordd.store.base import Conflict, Unavailable
from agentcoordd.store.local import LocalStore
from coord_support import HOSTILE, all_files, batch_events, read, token, ts

REPO, TARGET = "acme/widgets", "1"
CLAIM = "claims/acme/widgets/1.json"





async def put_heartbeat(store, clock, agent: str, *, updated: dict, expires: dict) -> None:
    await store.create(
        f"heartbeats/{agent}.json",
        {
            "schema_version": 1,
            "agent_id": agent,
            "status": "in_progress",
            "updated_at": ts(clock, **updated),
            "expires_at": ts(clock, **expires),
        },
    )


async def claim(ctx, agent="agent-a", **kwargs):
    kwargs.setdefault("repo", REPO)
    kwargs.setdefault("target", TARGET)
    return await claims.claim(ctx, agent_id=agent, **kwargs)


async def claim_earlier(ctx, clock, agent="agent-a", hours=3, **kwargs):
    """The holder's claim, acquired `hours` ago: before the heartbeats a test then writes
    (a heartbeat older than the claim says nothing about its holder: coord/lease.py)."""
    clock.advance(hours=-hours)
    try:
        return await claim(ctx, agent, **kwargs)
    finally:
        clock.advance(hours=hours)


async def release(ctx, agent="agent-a", **kwargs):
    kwargs.setdefault("repo", REPO)
    kwargs.setdefault("target", TARGET)
    return await claims.release(ctx, agent_id=agent, **kwargs)


# ---- acquire and renew -----------------------------------------------------------------


async def test_claim_acquires_a_free_target_with_a_four_hour_lease(ctx, root, clock):
    result = await claim(ctx, branch="feat/1")
    assert result["action"] == "acquired"
    assert read(root, CLAIM) == {
        "schema_version": 1,
        "repo": REPO,
        "target": TARGET,
        "agent_id": "agent-a",
        "branch": "feat/1",
        "fencing_token": token(clock),
        "status": "active",
        "claimed_at": ts(clock),
        "updated_at": ts(clock),
        "expires_at": ts(clock, hours=4),
    }


async def test_claim_ttl_sets_the_lease_length(ctx, root, clock):
    await claim(ctx, ttl=600)
    assert read(root, CLAIM)["expires_at"] == ts(clock, minutes=10)


async def test_same_holder_renewal_keeps_claimed_at_and_moves_the_lease(ctx, root, clock):
    await claim(ctx)
    claimed_at = read(root, CLAIM)["claimed_at"]
    clock.advance(minutes=60)
    result = await claim(ctx, ttl=600)
    record = read(root, CLAIM)
    assert result["action"] == "renewed"
    assert record["claimed_at"] == claimed_at
    assert (record["updated_at"], record["expires_at"]) == (ts(clock), ts(clock, minutes=10))


async def test_same_holder_renewal_updates_metadata_and_keeps_the_rest(ctx, root):
    await claim(ctx, branch="feat/1", meta=Metadata(phase="claimed", host="codex"))
    await claim(ctx, meta=Metadata(phase="implementing", pr_url="https://example.test/pr/1"))
    record = read(root, CLAIM)
    assert (record["branch"], record["host"]) == ("feat/1", "codex")
    assert (record["phase"], record["pr_url"]) == ("implementing", "https://example.test/pr/1")


async def test_renewal_keeps_the_claim_fields_and_drops_foreign_ones(ctx, store, root):
    """agent-coord (conformance claim_renew_lane_identity): a renewal carries the claim's
    lane and metadata fields forward, nothing else. (`route` is a metadata field of ours,
    docs/batch-records.md#routes: carried like the others.)"""
    await claim(ctx, meta=Metadata(thread_handle="th-1"))
    current = await store.get(CLAIM)
    await store.replace(CLAIM, dict(current.data, route="gpt/high", x_extra={"k": [1]}), current.version)
    await claim(ctx)
    record = read(root, CLAIM)
    assert (record["thread_handle"], record["route"]) == ("th-1", "gpt/high")
    assert "x_extra" not in record


async def test_a_renewal_on_another_branch_or_batch_is_a_new_acquisition(ctx, root, clock):
    await claim(ctx, batch_id="b1", branch="feat/1", meta=Metadata(operator="op"))
    claimed_at = read(root, CLAIM)["claimed_at"]
    clock.advance(minutes=5)
    await claim(ctx, branch="feat/1b")
    record = read(root, CLAIM)
    assert record["claimed_at"] != claimed_at
    assert "batch_id" not in record and "operator" not in record  # not re-passed: dropped
    assert [e["type"] for e in batch_events(root)] == ["claim.acquired"]  # no batch now: no event


async def test_generation_and_instance_id_stay_caller_supplied_metadata(ctx, root):
    await claim(ctx, meta=Metadata(generation=3, instance_id="m5-codex-1"))
    record = read(root, CLAIM)
    assert record["generation"] == 3 and record["instance_id"] == "m5-codex-1"
    await claim(ctx, meta=Metadata(generation="4"))
    assert read(root, CLAIM)["generation"] == "4"


async def test_a_released_claim_can_be_acquired_by_anyone(ctx, root, clock):
    await claim(ctx, branch="feat/1")
    await release(ctx)
    clock.advance(minutes=5)
    result = await claim(ctx, "agent-b")
    record = read(root, CLAIM)
    assert result["action"] == "acquired"
    assert (record["agent_id"], record["status"], record["claimed_at"]) == ("agent-b", "active", ts(clock))
    assert "released_by" not in record and "branch" not in record


# ---- refusal and takeover by heartbeat liveness ------------------------------------------


async def test_claim_is_refused_while_the_holders_heartbeat_is_live(ctx, store, root, clock):
    await claim(ctx)
    await put_heartbeat(store, clock, "agent-a", updated={}, expires={"minutes": 15})
    before = (root / CLAIM).read_bytes()
    with pytest.raises(ClaimRefused) as excinfo:
        await claim(ctx, "agent-b")
    assert excinfo.value.exit_code == 3
    assert str(excinfo.value) == "CLAIM_REFUSED: active claim for acme/widgets#1 held by agent-a; heartbeat live"
    assert (excinfo.value.holder, excinfo.value.liveness) == ("agent-a", "live")
    assert (root / CLAIM).read_bytes() == before


async def test_claim_is_refused_while_the_holders_heartbeat_is_stale(ctx, store, clock):
    await claim(ctx)
    await put_heartbeat(store, clock, "agent-a", updated={"minutes": -20}, expires={"minutes": -5})
    with pytest.raises(ClaimRefused) as excinfo:
        await claim(ctx, "agent-b")
    assert excinfo.value.exit_code == 3
    assert str(excinfo.value) == "CLAIM_REFUSED: active claim for acme/widgets#1 held by agent-a; heartbeat stale"


async def test_takeover_allowed_once_the_holders_heartbeat_is_dead(ctx, store, root, clock):
    """Golden claim_takeover_dead_heartbeat: dead heartbeat wins over an unexpired claim."""
    await claim_earlier(ctx, clock, branch="feat/1")
    await put_heartbeat(store, clock, "agent-a", updated={"minutes": -120}, expires={"minutes": -105})
    result = await claim(ctx, "agent-b")
    assert result["action"] == "taken_over"
    assert read(root, CLAIM) == {
        "schema_version": 1,
        "repo": REPO,
        "target": TARGET,
        "agent_id": "agent-b",
        "status": "active",
        "claimed_at": ts(clock),
        "updated_at": ts(clock),
        "expires_at": ts(clock, hours=4),
        "previous_holder": "agent-a",
        "takeover_reason": "heartbeat_dead",
        "fencing_token": token(clock),
    }


async def test_a_dead_heartbeat_older_than_the_claim_does_not_free_it(ctx, store, root, clock):
    """docs/compat.md#fresh-claims: the agent's heartbeat is from before this claim (an
    earlier lane, yesterday); until the holder beats again the claim's expiry decides."""
    await put_heartbeat(store, clock, "agent-a", updated={"minutes": -120}, expires={"minutes": -105})
    await claim(ctx, ttl=600)
    with pytest.raises(ClaimRefused) as excinfo:
        await claim(ctx, "agent-b")
    assert str(excinfo.value) == (
        "CLAIM_REFUSED: active claim for acme/widgets#1 held by agent-a; heartbeat predates the "
        f"claim; fallback claim expires at {ts(clock, minutes=10)}")
    assert excinfo.value.liveness == "predates_claim"
    clock.advance(minutes=10)  # the claim's own expiry is the fallback
    result = await claim(ctx, "agent-b")
    assert (result["action"], result["claim"]["takeover_reason"]) == ("taken_over", "claim_expired")


async def test_a_live_heartbeat_older_than_the_claim_still_refuses(ctx, store, clock):
    await put_heartbeat(store, clock, "agent-a", updated={"minutes": -1}, expires={"minutes": 14})
    await claim(ctx, ttl=60)
    clock.advance(minutes=5)  # the claim expired; the heartbeat is still live
    with pytest.raises(ClaimRefused, match="heartbeat live"):
        await claim(ctx, "agent-b")


async def test_a_beat_after_the_claim_is_evidence_again(ctx, store, clock):
    await put_heartbeat(store, clock, "agent-a", updated={"hours": -5}, expires={"hours": -4})
    await claim(ctx)
    clock.advance(hours=2)
    await store.delete("heartbeats/agent-a.json", (await store.get("heartbeats/agent-a.json")).version)
    await put_heartbeat(store, clock, "agent-a", updated={"minutes": -90}, expires={"minutes": -75})
    assert (await claim(ctx, "agent-b"))["claim"]["takeover_reason"] == "heartbeat_dead"


async def test_dead_boundary_is_updated_at_plus_four_ttl(ctx, store, clock):
    await claim_earlier(ctx, clock)
    # ttl 15 min, updated 60 min ago: exactly updated_at + 4 * ttl -> dead
    await put_heartbeat(store, clock, "agent-a", updated={"minutes": -60}, expires={"minutes": -45})
    assert (await claim(ctx, "agent-b"))["action"] == "taken_over"


async def test_missing_heartbeat_refuses_until_the_claim_expires(ctx, clock):
    await claim(ctx, ttl=600)
    clock.advance(minutes=9)
    with pytest.raises(ClaimRefused) as excinfo:
        await claim(ctx, "agent-b")
    assert excinfo.value.exit_code == 3
    assert "held by agent-a" in str(excinfo.value) and "missing" in str(excinfo.value)
    clock.advance(minutes=1)  # now == expires_at: the fallback has passed
    assert (await claim(ctx, "agent-b"))["action"] == "taken_over"


@pytest.mark.parametrize(
    "heartbeat",
    [
        pytest.param({"schema_version": 1, "agent_id": "agent-a", "status": "in_progress"}, id="no-timestamps"),
        pytest.param(
            {"schema_version": 1, "agent_id": "agent-a", "status": "in_progress",
             "updated_at": "soon", "expires_at": "later"},
            id="unparseable-timestamps",
        ),
        pytest.param(["not", "an", "object"], id="not-an-object"),
    ],
)
async def test_invalid_heartbeat_refuses_until_the_claim_expires(ctx, store, clock, heartbeat):
    await claim(ctx, ttl=600)
    await store.create("heartbeats/agent-a.json", heartbeat)
    with pytest.raises(ClaimRefused) as excinfo:
        await claim(ctx, "agent-b")
    assert "invalid" in str(excinfo.value)
    clock.advance(minutes=10)
    assert (await claim(ctx, "agent-b"))["action"] == "taken_over"


async def test_heartbeat_that_is_not_json_counts_as_invalid_not_as_a_backend_failure(ctx, root, clock):
    await claim(ctx, ttl=600)
    (root / "heartbeats").mkdir()
    (root / "heartbeats/agent-a.json").write_text("{truncated")
    with pytest.raises(ClaimRefused):
        await claim(ctx, "agent-b")
    clock.advance(minutes=10)
    assert (await claim(ctx, "agent-b"))["action"] == "taken_over"


async def test_live_heartbeat_refuses_even_after_the_claim_expired(ctx, store, clock):
    await claim(ctx, ttl=600)
    clock.advance(hours=1)
    await put_heartbeat(store, clock, "agent-a", updated={}, expires={"minutes": 15})
    with pytest.raises(ClaimRefused, match="heartbeat live"):
        await claim(ctx, "agent-b")


# ---- races: CAS conflicts re-read and decide again ---------------------------------------


class CompetingWriteStore:
    """A LocalStore where a rival's write lands between our read of `path` and our write."""
    capabilities = Capabilities()  # a plain Store: every read goes through it


    def __init__(self, inner: LocalStore, path: str, rival) -> None:
        self.inner, self.path, self.rival = inner, path, rival
        self.name = inner.name
        self.fired = False

    async def get(self, path):
        result = await self.inner.get(path)
        if path == self.path and not self.fired:
            self.fired = True
            await self.rival(self.inner)
        return result

    def __getattr__(self, name):
        return getattr(self.inner, name)


async def test_losing_a_create_race_rereads_and_is_refused(store, root, clock):
    async def rival(inner):
        await claims.claim(Ctx(inner, clock), agent_id="agent-b", repo=REPO, target=TARGET)

    ctx = Ctx(CompetingWriteStore(store, CLAIM, rival), clock)
    with pytest.raises(ClaimRefused) as excinfo:
        await claim(ctx, "agent-a")
    assert excinfo.value.exit_code == 3 and excinfo.value.holder == "agent-b"
    assert read(root, CLAIM)["agent_id"] == "agent-b"


async def test_losing_a_takeover_race_to_a_live_rival_is_refused(store, root, clock):
    await claim_earlier(Ctx(store, clock), clock, "agent-old", hours=6)
    await put_heartbeat(store, clock, "agent-old", updated={"hours": -5}, expires={"hours": -4})

    async def rival(inner):
        await put_heartbeat(inner, clock, "agent-b", updated={}, expires={"minutes": 15})
        await claims.claim(Ctx(inner, clock), agent_id="agent-b", repo=REPO, target=TARGET)

    ctx = Ctx(CompetingWriteStore(store, CLAIM, rival), clock)
    with pytest.raises(ClaimRefused) as excinfo:
        await claim(ctx, "agent-a")
    assert str(excinfo.value) == "CLAIM_REFUSED: active claim for acme/widgets#1 held by agent-b; heartbeat live"
    assert read(root, CLAIM)["agent_id"] == "agent-b"


async def test_a_concurrent_renewal_by_the_holder_does_not_lose_either_write(store, root, clock):
    await claims.claim(Ctx(store, clock), agent_id="agent-a", repo=REPO, target=TARGET)

    async def rival(inner):
        await claims.claim(Ctx(inner, clock), agent_id="agent-a", repo=REPO, target=TARGET,
                           meta=Metadata(pr_url="https://example.test/pr/1"))

    ctx = Ctx(CompetingWriteStore(store, CLAIM, rival), clock)
    await claim(ctx, "agent-a", meta=Metadata(phase="validating"))
    record = read(root, CLAIM)
    assert (record["pr_url"], record["phase"]) == ("https://example.test/pr/1", "validating")


class AlwaysConflictStore:
    """Every write loses: persistent contention."""
    capabilities = Capabilities()  # a plain Store: every read goes through it


    def __init__(self, inner: LocalStore) -> None:
        self.inner, self.name, self.writes = inner, inner.name, 0

    async def create(self, path, data):
        self.writes += 1
        raise Conflict(f"record already exists: {path}", "already_exists")

    async def replace(self, path, data, version):
        self.writes += 1
        raise Conflict(f"record changed underneath us: {path}", "version_conflict")

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("existing", [False, True], ids=["create", "renew"])
async def test_persistent_contention_is_an_operational_error_after_bounded_retries(store, clock, existing):
    if existing:
        await claims.claim(Ctx(store, clock), agent_id="agent-a", repo=REPO, target=TARGET)
    contended = AlwaysConflictStore(store)
    with pytest.raises(OperationalError) as excinfo:
        await claim(Ctx(contended, clock), "agent-a")
    assert excinfo.value.exit_code == 2
    assert CLAIM in str(excinfo.value) and "contention" in str(excinfo.value)
    assert contended.writes == CAS_ATTEMPTS


# ---- validation: usage errors leave nothing behind ---------------------------------------


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("field", ["agent_id", "repo", "target", "batch_id"])
async def test_hostile_identifier_on_claim_is_a_usage_error_leaving_no_file(ctx, root, field, value):
    args = {"agent_id": "agent-a", "repo": REPO, "target": TARGET, "batch_id": "b1", field: value}
    with pytest.raises(UsageError) as excinfo:
        await claims.claim(ctx, **args)
    assert excinfo.value.exit_code == 1
    assert "\n" not in str(excinfo.value)
    assert all_files(root) == []


@pytest.mark.parametrize("field,value", [
    pytest.param(field, p.values[0], id=f"{p.id}-{field}")
    for p in HOSTILE for field in ("agent_id", "repo", "target", "handoff_to")
    if (field, p.values[0]) != ("handoff_to", "")])  # an empty handoff destination is accepted
async def test_hostile_identifier_on_release_is_a_usage_error_leaving_no_file(ctx, root, field, value):
    args = {"agent_id": "agent-a", "repo": REPO, "target": TARGET, "handoff_to": "agent-b", field: value}
    with pytest.raises(UsageError) as excinfo:
        await claims.release(ctx, **args)
    assert excinfo.value.exit_code == 1
    assert "\n" not in str(excinfo.value)
    assert all_files(root) == []


@pytest.mark.parametrize("ttl", [0, -1, True, 1.5, "600"])
async def test_ttl_must_be_a_positive_integer(ctx, root, ttl):
    with pytest.raises(UsageError, match="^--ttl must be positive") as excinfo:
        await claim(ctx, ttl=ttl)
    assert excinfo.value.exit_code == 1
    assert all_files(root) == []


@pytest.mark.parametrize("ttl", [10**12, 2**53])
async def test_a_lease_past_year_9999_expires_at_the_last_stamp(store, root, clock, ttl):
    """Under a policy that allows it, a five-digit year is clamped (docs/compat.md#expiry-clamp)."""
    await claim(Ctx(store, clock, lease=LeasePolicy(max_ttl=2**53)), ttl=ttl)
    assert read(root, CLAIM)["expires_at"] == "9999-12-31T23:59:59Z"


@pytest.mark.parametrize("ttl", [86_401, 10**12, 2**53])
async def test_a_ttl_above_the_machines_maximum_is_refused_and_writes_nothing(ctx, root, ttl):
    """Finding 5 of issue 40: `claim --ttl 99999999999999999999` blocked a target until 9999."""
    with pytest.raises(UsageError, match="maximum lease of 86400s"):
        await claim(ctx, ttl=ttl)
    assert all_files(root) == []


async def test_the_maximum_is_the_policys(store, root, clock):
    ctx = Ctx(store, clock, lease=LeasePolicy(max_ttl=60))
    with pytest.raises(UsageError, match="maximum lease of 60s"):
        await claim(ctx, ttl=61)
    assert (await claim(ctx, ttl=60))["claim"]["expires_at"] == ts(clock, seconds=60)


@pytest.mark.parametrize(
    "meta",
    [
        pytest.param(Metadata(host="x" * 10_000), id="10KB-host"),
        pytest.param(Metadata(operator="a\x00b"), id="NUL-operator"),
        pytest.param(Metadata(thread_handle="a\udcff"), id="surrogate-thread"),
    ],
)
async def test_bad_metadata_is_a_usage_error_leaving_no_file(ctx, root, meta):
    with pytest.raises(UsageError):
        await claim(ctx, meta=meta)
    assert all_files(root) == []


async def test_odd_metadata_is_stored_verbatim(ctx, root):
    """agent-coord (conformance metadata_option_bad_values): empty strings, a kind without
    --synthetic and non-URLs are kept as given on non-terminal writes."""
    await claim(ctx, meta=Metadata(phase="", host="", synthetic_kind="", operator=" ",
                                   pr_url="not a url", dashboard_url="ftp://example.test/x"))
    record = read(root, CLAIM)
    assert {k: record[k] for k in ("phase", "host", "synthetic_kind", "operator", "pr_url",
                                   "dashboard_url")} == {
        "phase": "", "host": "", "synthetic_kind": "", "operator": " ", "pr_url": "not a url",
        "dashboard_url": "ftp://example.test/x"}
    assert "synthetic" not in record


async def test_synthetic_markers_are_recorded(ctx, root):
    await claim(ctx, meta=Metadata(synthetic=True, synthetic_kind="simulation"))
    record = read(root, CLAIM)
    assert (record["synthetic"], record["synthetic_kind"]) == (True, "simulation")


# ---- lifecycle events --------------------------------------------------------------------


async def test_acquisition_with_a_batch_emits_claim_acquired(ctx, root, clock):
    """Golden claim_batch_events step 2."""
    await claim(ctx, batch_id="b1", branch="feat/1", meta=Metadata(phase="claimed"))
    (event,) = batch_events(root)
    event_id = event.pop("event_id")
    assert event_id.startswith(clock.now().strftime("%Y%m%dT%H%M%S."))
    assert event == {
        "schema_version": 1,
        "batch_id": "b1",
        "type": "claim.acquired",
        "agent_id": "agent-a",
        "repo": REPO,
        "target": TARGET,
        "branch": "feat/1",
        "phase": "claimed",
        "fencing_token": token(clock),
        "at": ts(clock),
    }


async def test_acquisition_without_a_batch_emits_nothing(ctx, root):
    await claim(ctx)
    assert not (root / "events").exists()


async def test_plain_same_holder_renewal_emits_nothing(ctx, root, clock):
    await claim(ctx, batch_id="b1", branch="feat/1")
    clock.advance(minutes=30)
    await claim(ctx, batch_id="b1", branch="feat/1", meta=Metadata(phase="implementing"))
    assert len(batch_events(root)) == 1


async def test_renewal_with_a_new_generation_or_instance_emits_claim_acquired(ctx, root, clock):
    """Golden claim_batch_events step 4."""
    await claim(ctx, batch_id="b1", branch="feat/1", meta=Metadata(phase="claimed"))
    clock.advance(seconds=1)
    await claim(ctx, batch_id="b1", branch="feat/1", meta=Metadata(generation=2, instance_id="i-2"))
    events = batch_events(root)
    assert len(events) == 2
    assert (events[1]["generation"], events[1]["instance_id"], events[1]["phase"]) == (2, "i-2", "claimed")
    await claim(ctx, batch_id="b1", meta=Metadata(instance_id="i-3"))
    assert len(batch_events(root)) == 3


async def test_renewal_into_another_batch_emits_claim_acquired_there(ctx, root):
    await claim(ctx, batch_id="b1")
    await claim(ctx, batch_id="b2")
    assert len(batch_events(root, "b1")) == 1
    assert [e["type"] for e in batch_events(root, "b2")] == ["claim.acquired"]


async def test_takeover_emits_claim_acquired_for_the_new_holder(ctx, store, root, clock):
    await claim_earlier(ctx, clock, batch_id="b1", hours=6)
    await put_heartbeat(store, clock, "agent-a", updated={"hours": -5}, expires={"hours": -4})
    clock.advance(seconds=1)
    await claim(ctx, "agent-b", batch_id="b1")
    events = batch_events(root)
    assert [e["agent_id"] for e in events] == ["agent-a", "agent-b"]
    assert "previous_holder" not in events[0]
    assert {k: events[1][k] for k in ("previous_holder", "takeover_reason", "message")} == {
        "previous_holder": "agent-a", "takeover_reason": "heartbeat_dead",
        "message": "taken over from agent-a: the holder's heartbeat is dead"}


class FailingEventsStore:
    """Writes under events/ fail (backend trouble); everything else works."""
    capabilities = Capabilities()  # a plain Store: every read goes through it


    def __init__(self, inner: LocalStore) -> None:
        self.inner, self.name = inner, inner.name

    async def create(self, path, data):
        if path.startswith("events/"):
            raise Unavailable(f"cannot write {path}: backend unavailable")
        return await self.inner.create(path, data)

    def __getattr__(self, name):
        return getattr(self.inner, name)


async def test_a_failed_event_write_is_a_warning_not_a_failed_claim(store, root, clock):
    ctx = Ctx(FailingEventsStore(store), clock)
    result = await claim(ctx, batch_id="b1")
    assert result["action"] == "acquired"
    assert read(root, CLAIM)["status"] == "active"
    (warning,) = ctx.warnings
    assert "claim.acquired" in warning and "b1" in warning


async def test_a_failed_event_write_is_a_warning_not_a_failed_release(store, root, clock):
    await claim(Ctx(store, clock), batch_id="b1")
    ctx = Ctx(FailingEventsStore(store), clock)
    assert (await release(ctx))["action"] == "released"
    assert read(root, CLAIM)["status"] == "released"
    assert len(ctx.warnings) == 1 and "claim.released" in ctx.warnings[0]


# ---- attribution ---------------------------------------------------------------------------

M5 = Identity("m5", "thread-1", "codex_thread_id")


async def test_claim_stamps_the_attribution_tuple(store, root, clock):
    await claim(Ctx(store, clock, M5), batch_id="b1")
    record = read(root, CLAIM)
    assert (record["machine_id"], record["session_id"], record["session_source"]) == (
        "m5", "thread-1", "codex_thread_id",
    )
    assert batch_events(root)[0]["machine_id"] == "m5"


async def test_renewal_without_identity_preserves_the_attribution(store, root, clock):
    await claim(Ctx(store, clock, M5))
    await claim(Ctx(store, clock))
    assert read(root, CLAIM)["session_id"] == "thread-1"


async def test_renewal_from_another_machine_without_session_clears_the_stale_session(store, root, clock):
    await claim(Ctx(store, clock, M5))
    await claim(Ctx(store, clock, Identity(machine_id="m1")))
    record = read(root, CLAIM)
    assert record["machine_id"] == "m1"
    assert "session_id" not in record and "session_source" not in record


async def test_renewal_with_a_new_session_without_machine_clears_the_stale_machine(store, root, clock):
    await claim(Ctx(store, clock, M5))
    await claim(Ctx(store, clock, Identity(session_id="run-2", session_source="agent_coord_session_id")))
    record = read(root, CLAIM)
    assert "machine_id" not in record
    assert (record["session_id"], record["session_source"]) == ("run-2", "agent_coord_session_id")


async def test_takeover_does_not_inherit_the_previous_holders_attribution(store, root, clock):
    await claim_earlier(Ctx(store, clock, M5), clock, hours=6)
    await put_heartbeat(store, clock, "agent-a", updated={"hours": -5}, expires={"hours": -4})
    await claim(Ctx(store, clock), "agent-b")
    assert "machine_id" not in read(root, CLAIM) and "session_id" not in read(root, CLAIM)


async def test_release_stamps_the_attribution_tuple(store, root, clock):
    await claim(Ctx(store, clock))
    await release(Ctx(store, clock, Identity(machine_id="m2")))
    assert read(root, CLAIM)["machine_id"] == "m2"


# ---- release -----------------------------------------------------------------------------


async def test_release_by_the_holder_keeps_the_record_marked_released(ctx, root, clock):
    """Golden release_plain."""
    await claim(ctx, batch_id="b1", branch="feat/1")
    claimed_at = read(root, CLAIM)["claimed_at"]
    granted = token(clock)
    clock.advance(minutes=30)
    result = await release(ctx, meta=Metadata(pr_url="https://example.test/pr/1"))
    assert result["action"] == "released"
    assert read(root, CLAIM) == {
        "schema_version": 1,
        "repo": REPO,
        "target": TARGET,
        "agent_id": "agent-a",
        "batch_id": "b1",
        "branch": "feat/1",
        "fencing_token": granted,  # a release keeps the grant's token
        "pr_url": "https://example.test/pr/1",
        "status": "released",
        "claimed_at": claimed_at,
        "updated_at": ts(clock),
        "expires_at": ts(clock),
        "released_by": "agent-a",
        "released_at": ts(clock),
    }


async def test_release_emits_claim_released_with_the_claim_status_snapshot(ctx, root, clock):
    await claim(ctx, batch_id="b1", branch="feat/1")
    clock.advance(seconds=1)
    await release(ctx, meta=Metadata(pr_url="https://example.test/pr/1"))
    released = batch_events(root)[-1]
    del released["event_id"]
    assert released == {
        "schema_version": 1,
        "batch_id": "b1",
        "type": "claim.released",
        "agent_id": "agent-a",
        "repo": REPO,
        "target": TARGET,
        "branch": "feat/1",
        "status": "released",
        "pr_url": "https://example.test/pr/1",
        "at": ts(clock),
    }


async def test_release_by_a_non_holder_is_a_usage_error_and_changes_nothing(ctx, root):
    """agent-coord's rule and words (conformance release_wrong_agent): exit 1, not a refusal."""
    await claim(ctx, batch_id="b1")
    before = (root / CLAIM).read_bytes()
    with pytest.raises(UsageError) as excinfo:
        await release(ctx, "agent-b")
    assert excinfo.value.exit_code == 1
    assert str(excinfo.value) == "claim belongs to agent-a; agent-b cannot release it"
    assert (root / CLAIM).read_bytes() == before
    assert len(batch_events(root)) == 1


async def test_release_without_a_claim_is_a_usage_error(ctx, root):
    with pytest.raises(UsageError, match="acme/widgets#1"):
        await release(ctx)
    assert all_files(root) == []


async def test_releasing_twice_releases_again_and_says_so(ctx, root, clock):
    """agent-coord (conformance release_metadata_restamp): a second release re-emits."""
    await claim(ctx, batch_id="b1")
    clock.advance(seconds=1)
    await release(ctx)
    clock.advance(minutes=1)
    assert (await release(ctx))["action"] == "released"
    assert read(root, CLAIM)["released_at"] == ts(clock)
    assert [e["type"] for e in batch_events(root)] == ["claim.acquired", "claim.released", "claim.released"]


async def test_handoff_release_stamps_the_handoff_fields(ctx, root):
    """Golden release_handoff."""
    await claim(ctx, batch_id="b1", branch="feat/1")
    await release(ctx, handoff_to="agent-b", handoff_note="resume on feat/1")
    record = read(root, CLAIM)
    assert (record["release_mode"], record["handoff_to"], record["handoff_note"]) == (
        "handoff", "agent-b", "resume on feat/1",
    )
    assert record["status"] == "released"


async def test_empty_handoff_destination_is_a_handoff_to_nobody_in_particular(ctx, root):
    """As agent-coord (differential tester, scenario release_handoff_to_empty)."""
    await claim(ctx, batch_id="b1")
    assert (await release(ctx, handoff_to=""))["action"] == "released"
    record = read(root, CLAIM)
    assert (record["status"], record["release_mode"], record["handoff_to"]) == ("released", "handoff", "")


async def test_handoff_fields_ride_on_claim_released(ctx, root, clock):
    await claim(ctx, batch_id="b1", branch="feat/1")
    clock.advance(seconds=1)
    await release(ctx, handoff_to="agent-b", handoff_note="resume on feat/1")
    released = batch_events(root)[-1]
    assert released["type"] == "claim.released"
    assert {k: released[k] for k in ("release_mode", "handoff_to", "handoff_note", "message", "status")} == {
        "release_mode": "handoff",
        "handoff_to": "agent-b",
        "handoff_note": "resume on feat/1",
        "message": "resume on feat/1",
        "status": "released",
    }


async def test_next_worker_claims_after_a_handoff(ctx, root, clock):
    await claim(ctx, batch_id="b1", branch="feat/1")
    await release(ctx, handoff_to="agent-b", handoff_note="resume")
    result = await claim(ctx, "agent-b", batch_id="b1", branch="feat/1")
    assert result["action"] == "acquired"
    assert "release_mode" not in read(root, CLAIM)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"pr_state": "merged"}, id="pr-state"),
        pytest.param({"evidence_url": "https://example.test/e"}, id="evidence-url"),
        pytest.param({"workspace": "w"}, id="workspace"),
    ],
)
async def test_terminal_only_options_need_terminal(ctx, root, kwargs):
    await claim(ctx, batch_id="b1")
    before = (root / CLAIM).read_bytes()
    with pytest.raises(UsageError, match="--terminal") as excinfo:
        await release(ctx, **kwargs)
    assert excinfo.value.exit_code == 1
    assert (root / CLAIM).read_bytes() == before


@pytest.mark.parametrize("stored", [{}, "str", None, [1], 42, {"agent_id": "agent-b", "status": "released"}])
async def test_a_stored_value_that_holds_nothing_is_claimed_over(ctx, store, root, stored):
    """Only an active claim holds a target (recorded: non_object_state_records; agent-coord
    crashes on null, [1] and 42, docs/compat.md)."""
    await store.create(CLAIM, stored)
    result = await claim(ctx)
    assert result["action"] == "acquired"
    assert read(root, CLAIM)["agent_id"] == "agent-a"


async def test_an_active_claim_that_is_not_valid_is_an_error_naming_its_path(ctx, store, root):
    await store.create(CLAIM, {"agent_id": "agent-b", "status": "active"})
    with pytest.raises(OperationalError, match=CLAIM) as excinfo:
        await claim(ctx)
    assert excinfo.value.exit_code == 2
    assert read(root, CLAIM) == {"agent_id": "agent-b", "status": "active"}
