"""coord/doctor.py directly, over a real LocalStore: record validation per
family, path naming, and how check results roll up into the stack status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentcoordd.coord import doctor as checks
from agentcoordd.coord.context import Ctx
from agentcoordd.model.errors import UsageError
from agentcoordd.model.identity import Identity
from agentcoordd.store.local import LocalStore

CLAIM = {"schema_version": 1, "repo": "acme/widgets", "target": "1", "agent_id": "a",
         "status": "active", "claimed_at": "2026-06-13T00:00:00Z",
         "updated_at": "2026-06-13T00:00:00Z", "expires_at": "2026-06-13T01:00:00Z"}
LANE_CLOSED = {"schema_version": 2, "event_id": "lane_closed-0123456789abcdef",
               "type": "lane_closed", "repo": "acme/widgets", "target": "1",
               "terminal": "done", "workspace": "w",
               "closed_by": {"agent_id": "a", "machine": "m1"}, "at": "2026-06-13T00:00:00Z"}


def local_facts(root: Path) -> checks.BackendFacts:
    return checks.BackendFacts("local", str(root), "--state-root", root_state="ok")


def write(root: Path, path: str, data: object) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data) if not isinstance(data, str) else data)


@pytest.mark.parametrize("path,data,ok", [
    ("claims/acme/widgets/1.json", CLAIM, True),
    ("claims/acme/widgets/1.json", {**CLAIM, "agent_id": ""}, False),
    ("heartbeats/a.json", {"schema_version": 1, "agent_id": "a", "status": "working",
                           "updated_at": "x", "expires_at": "y"}, True),
    ("heartbeats/a.json", ["not", "an", "object"], False),
    ("batches/b1.json", {"batch_id": "b1", "lanes": [{"anything": 1}]}, True),
    ("events/b1/lane_closed-0123456789abcdef.json", LANE_CLOSED, True),
    ("events/b1/lane_closed-0123456789abcdef.json", {**LANE_CLOSED, "terminal": "maybe"}, False),
    ("events/b1/e1.json", {"schema_version": 1, "event_id": "e1", "batch_id": "b1",
                           "type": "note", "at": "2026-06-13T00:00:00Z"}, True),
    ("archive/claims/acme/widgets/1.json", {"record_family": "archived_record",
                                            "schema_version": 1, "reason": "released",
                                            "synthetic": False,
                                            "archived_at": "2026-06-13T00:00:00Z",
                                            "delete_after": "2026-07-13T00:00:00Z",
                                            "source_path": "claims/acme/widgets/1.json",
                                            "data": CLAIM}, True),
    ("archive/claims/acme/widgets/1.json", CLAIM, False),  # a hot record in the archive
])
def test_every_family_is_validated_with_its_struct(path: str, data: object, ok: bool) -> None:
    why = checks.validate_record(path, data)
    assert (why is None) is ok, why
    if not ok:
        assert path in why


@pytest.mark.parametrize("message,expected", [
    ("symlink below state root refused: claims/acme", "claims/acme"),
    ("state layout invalid: heartbeats is not a directory", "heartbeats"),
    ("invalid JSON in record batches/b.json", "batches/b.json"),
    ("cannot read claims/a/b/1.json under /srv/root: Permission denied", "claims/a/b/1.json"),
    ("forbidden: this machine's token has no scope for claims at http://127.0.0.1:1", "claims"),
    ("token rejected (unknown_token) by events at http://127.0.0.1:1: the machine token …",
     "events"),
    ("backend unreachable: GET http://127.0.0.1:9: cannot connect", "fallback"),
])
def test_failing_path_is_the_path_the_store_error_names(message: str, expected: str) -> None:
    assert checks.failing_path(message, "fallback") == expected


@pytest.mark.parametrize("prefix", ["claims", "events/b1", "heartbeats/a.json", "archive",
                                    "archive/claims/acme"])
def test_doctor_prefix_accepts_directories_and_record_paths(prefix: str) -> None:
    assert checks.check_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["", "../x", "claims/../x", "/etc", "secrets", "claims/.x"])
def test_doctor_prefix_refuses_anything_else(prefix: str) -> None:
    with pytest.raises(UsageError):
        checks.check_prefix(prefix)


async def test_deep_counts_every_record_and_lists_each_invalid_one(tmp_path: Path, clock) -> None:
    write(tmp_path, "claims/acme/widgets/1.json", CLAIM)
    for n in range(3):
        write(tmp_path, f"heartbeats/h{n}.json", "{")
    report = await checks.doctor(Ctx(LocalStore(tmp_path), clock), local_facts(tmp_path),
                                 deep=True)
    families = {f.prefix: f for f in report.families}
    assert (families["claims"].status, families["claims"].records) == ("ok", 1)
    heartbeats = families["heartbeats"]
    assert (heartbeats.status, heartbeats.records, heartbeats.invalid_count) == ("invalid", 3, 3)
    assert [i["path"] for i in heartbeats.invalid] == [
        "heartbeats/h0.json", "heartbeats/h1.json", "heartbeats/h2.json"]
    assert report.status == "error" and checks.legacy_exit(report) == 2


async def test_lightweight_never_reads_records(tmp_path: Path, clock) -> None:
    write(tmp_path, "claims/acme/widgets/1.json", "{garbage")
    report = await checks.doctor(Ctx(LocalStore(tmp_path), clock), local_facts(tmp_path))
    assert report.status == "ok"
    assert [p.method for p in report.probes] == ["walk"] * 5


async def test_stack_roll_up_failed_beats_degraded_beats_healthy(tmp_path: Path, clock) -> None:
    report = await checks.doctor(Ctx(LocalStore(tmp_path), clock, Identity("m1")),
                                 local_facts(tmp_path), deep=True)
    healthy = checks.stack_report(report, daemon_version=report.client_version)
    assert (healthy["status"], checks.stack_exit(healthy)) == ("healthy", 0)
    degraded = checks.stack_report(report, daemon_version="9.9.9")
    assert (degraded["status"], checks.stack_exit(degraded)) == ("degraded", 1)
    report.whoami = {"machine": "other", "read_prefixes": [""], "write_prefixes": [""]}
    failed = checks.stack_report(report, daemon_version="9.9.9")
    assert (failed["status"], checks.stack_exit(failed)) == ("failed", 2)
    assert report.status == "machine_mismatch"


async def test_a_hung_backend_becomes_a_reported_timeout(tmp_path: Path, clock) -> None:
    class Hanging(LocalStore):
        async def list_paths(self, prefix: str) -> list[str]:
            import anyio

            await anyio.sleep(10)
            return []

    report = await checks.doctor(Ctx(Hanging(tmp_path), clock), local_facts(tmp_path),
                                 deep=True, budget=0.2)
    assert report.fatal and report.timed_out
    assert "did not answer within 0.2s" in report.backend_error
    stack = checks.stack_report(report)
    assert stack["status"] == "failed"
