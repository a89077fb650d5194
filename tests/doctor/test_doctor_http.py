"""doctor against our Worker (`wrangler dev --local`) through the real daemon:
scoped tokens with and without --doctor-prefix, a revoked token, the
authenticated machine and its scopes, and machine identity match/mismatch."""

from __future__ import annotations

import json
import uuid
from typing import Any

from agentcoordd import tokens
from integration.helpers import Daemon

UNSET = ("AGENT_COORD_STATE_ROOT",)


def out(result) -> str:
    return result.stdout.decode()


def stack_check(payload: dict, check_id: str) -> dict:
    (check,) = [c for c in payload["checks"] if c["id"] == check_id]
    return check


def doctor(d: Daemon, worker: Any, machine: str, *args: str, **env: str):
    return d.ctl("doctor", "--api-url", worker.url, *args, unset=UNSET, timeout=60,
                 env={"AGENT_COORD_API_TOKEN": worker.tokens[machine], **env})


def test_healthy_deep_reports_families_machine_and_scopes(daemon: Daemon, doctor_worker: Any) -> None:
    target = uuid.uuid4().hex[:8]
    claimed = daemon.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target",
                         target, "--api-url", doctor_worker.url, unset=UNSET, timeout=60,
                         env={"AGENT_COORD_API_TOKEN": doctor_worker.tokens["dr-all"]})
    assert claimed.returncode == 0, claimed.stderr.decode()
    result = doctor(daemon, doctor_worker, "dr-all", "--deep", "--json",
                    AGENT_COORD_MACHINE_ID="dr-all")
    assert result.returncode == 0, out(result)
    report = json.loads(out(result))
    assert (report["backend"], report["backend_url"], report["state_root"], report["status"]) == (
        "http", doctor_worker.url, None, "ok")
    assert report["environment_identity"]["token_machine"] == "dr-all"
    assert report["environment_identity"]["machine_match"] == "match"
    assert report["authenticated_machine"] == "dr-all"
    assert report["scopes"] == {"read": [""], "write": [""]}
    families = {f["prefix"]: f for f in report["families"]}
    assert list(families) == ["claims", "heartbeats", "batches", "events", "archive"]
    assert all(f["status"] == "ok" for f in families.values())
    assert families["claims"]["records"] >= 1

    text = out(doctor(daemon, doctor_worker, "dr-all", "--deep", AGENT_COORD_MACHINE_ID="dr-all"))
    lines = text.splitlines()
    assert f"backend_url: {doctor_worker.url}" in lines
    assert "token_machine: dr-all" in lines and "machine_match: match" in lines
    assert "authenticated_machine: dr-all" in lines and "read_scopes: (all state)" in lines

    stack = doctor(daemon, doctor_worker, "dr-all", "--stack-json", "--deep",
                   AGENT_COORD_MACHINE_ID="dr-all")
    assert stack.returncode == 0, out(stack)
    payload = json.loads(out(stack))
    assert payload["status"] == "healthy"
    assert stack_check(payload, "identity.machine")["status"] == "healthy"


def test_lightweight_http_does_not_report_identity(daemon: Daemon, doctor_worker: Any) -> None:
    result = doctor(daemon, doctor_worker, "dr-all", "--json")
    assert result.returncode == 0, out(result)
    assert json.loads(out(result)) == {
        "version": "0.1.0", "backend": "http", "backend_repo": None,
        "backend_url": doctor_worker.url, "state_root": None, "deep": False, "status": "ok"}


def test_token_scoped_outside_claims_fails_the_default_probe(daemon: Daemon,
                                                            doctor_worker: Any) -> None:
    result = doctor(daemon, doctor_worker, "dr-events", "--json")
    assert result.returncode == 2
    report = json.loads(out(result))
    assert report["status"] == "error"
    assert report["failing_path"] == "claims"
    assert report["error"].startswith("forbidden: this machine's token has no scope for claims")

    stack = doctor(daemon, doctor_worker, "dr-events", "--stack-json")
    assert stack.returncode == 2
    backend = stack_check(json.loads(out(stack)), "backend.readability")
    assert backend["status"] == "failed"
    assert "--doctor-prefix" in backend["guidance"]


def test_doctor_prefix_verifies_a_scoped_token(daemon: Daemon, doctor_worker: Any) -> None:
    listed = doctor(daemon, doctor_worker, "dr-events", "--json", "--doctor-prefix", "events")
    assert listed.returncode == 0, out(listed)
    assert json.loads(out(listed))["probes"] == [
        {"prefix": "events", "method": "list", "status": "ok"}]

    read = doctor(daemon, doctor_worker, "dr-record", "--json", "--doctor-prefix",
                  "heartbeats/dr-agent.json")
    assert read.returncode == 0, out(read)
    assert json.loads(out(read))["probes"] == [
        {"prefix": "heartbeats/dr-agent.json", "method": "read", "status": "ok"}]

    deep = doctor(daemon, doctor_worker, "dr-events", "--deep", "--json", "--doctor-prefix",
                  "events", AGENT_COORD_MACHINE_ID="dr-events")
    assert deep.returncode == 0, out(deep)
    report = json.loads(out(deep))
    assert [f["prefix"] for f in report["families"]] == ["events"]
    assert report["scopes"] == {"read": ["events"], "write": ["events"]}


def test_revoked_token_names_the_resource_and_prints_the_rotation_command(
        daemon: Daemon, doctor_worker: Any) -> None:
    doctor_worker.execute(tokens.build_revoke("dr-revoked"))
    result = doctor(daemon, doctor_worker, "dr-revoked", "--deep", "--json",
                    AGENT_COORD_MACHINE_ID="dr-revoked")
    assert result.returncode == 2
    report = json.loads(out(result))
    assert report["status"] == "error"
    assert report["failing_path"] == "claims"
    assert "token rejected" in report["error"]
    assert report["rotation_command"].startswith(
        "agentcoordctl token provision dr-revoked --rotate")
    text = doctor(daemon, doctor_worker, "dr-revoked")
    assert text.returncode == 2
    assert any(line.startswith("rotate_token: agentcoordctl token provision")
               for line in out(text).splitlines())
    stack = json.loads(out(doctor(daemon, doctor_worker, "dr-revoked", "--stack-json",
                                  "--deep")))
    backend = stack_check(stack, "backend.readability")
    assert backend["status"] == "failed" and "--rotate" in backend["guidance"]


def test_machine_mismatch_still_reports_then_exits_2(daemon: Daemon, doctor_worker: Any) -> None:
    result = doctor(daemon, doctor_worker, "dr-all", "--deep", "--json",
                    AGENT_COORD_MACHINE_ID="laptop-b")
    assert result.returncode == 2
    report = json.loads(out(result))
    assert report["status"] == "machine_mismatch"
    assert report["environment_identity"] == {
        "client_version": "0.1.0", "machine_id": "laptop-b", "session_id": None,
        "session_source": "unset", "token_machine": "dr-all", "machine_match": "mismatch"}

    stack = doctor(daemon, doctor_worker, "dr-all", "--stack-json", "--deep",
                   AGENT_COORD_MACHINE_ID="laptop-b")
    assert stack.returncode == 2
    payload = json.loads(out(stack))
    identity = stack_check(payload, "identity.machine")
    assert identity["status"] == "failed"
    assert identity["details"]["machine_match"] == "mismatch"
    assert stack_check(payload, "backend.readability")["status"] == "healthy"


def test_unset_machine_id_is_unverified_not_a_mismatch(daemon: Daemon, doctor_worker: Any) -> None:
    result = doctor(daemon, doctor_worker, "dr-all", "--deep", "--json")
    assert result.returncode == 0, out(result)
    identity = json.loads(out(result))["environment_identity"]
    assert (identity["token_machine"], identity["machine_match"]) == ("dr-all", "unverified")


def test_unreachable_api_is_a_failed_backend(daemon: Daemon) -> None:
    result = daemon.ctl("doctor", "--stack-json", "--deep", "--api-url", "http://127.0.0.1:9",
                        unset=UNSET, timeout=60)
    assert result.returncode == 2
    payload = json.loads(out(result))
    backend = stack_check(payload, "backend.readability")
    assert backend["status"] == "failed"
    assert backend["details"]["error"].startswith("backend unreachable")
    assert stack_check(payload, "resources.deep")["details"]["reason"] == "backend_unavailable"


def test_filtered_listing_is_partial_evidence_and_degrades_the_stack(daemon: Daemon,
                                                                     doctor_worker: Any) -> None:
    """A token below `claims` sees a filtered listing: what is missing is unknown."""
    result = doctor(daemon, doctor_worker, "dr-widgets", "--stack-json", "--deep",
                    "--doctor-prefix", "claims", AGENT_COORD_MACHINE_ID="dr-widgets")
    assert result.returncode == 1, out(result)
    payload = json.loads(out(result))
    assert payload["status"] == "degraded"
    resources = stack_check(payload, "resources.deep")
    assert resources["status"] == "degraded"
    assert resources["details"]["partial_prefixes"] == ["claims"]
    assert stack_check(payload, "identity.machine")["status"] == "healthy"

    legacy = doctor(daemon, doctor_worker, "dr-widgets", "--deep", "--json", "--doctor-prefix",
                    "claims", AGENT_COORD_MACHINE_ID="dr-widgets")
    assert legacy.returncode == 0, out(legacy)
    assert json.loads(out(legacy))["families"][0]["status"] == "partial"
