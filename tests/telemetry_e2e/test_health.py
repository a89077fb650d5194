"""agentcoordctl health through the real daemon: exit 0 clean, 1 warnings, 2 unreadable."""

from __future__ import annotations

import json

from integration.helpers import Daemon

MACHINE = {"AGENT_COORD_MACHINE_ID": "ws-1"}
PROMPT = b"Use $pr-batch to complete this batch.\nRepository: acme/widgets\nBatch id: b1\nTargets: #1\n"
MANIFEST = {"batch_id": "b1", "repo": "acme/widgets",
            "lanes": [{"name": "backend", "owner": "agent-a", "targets": ["1"]}]}


def clean_batch(daemon: Daemon) -> None:
    """A batch with every signal satisfied: manifest + prompt, claim, heartbeat, history."""
    manifest = daemon.base / "batch.json"
    manifest.write_text(json.dumps(MANIFEST))
    assert daemon.ctl("register-batch", "--file", str(manifest), "--launch-prompt", "-",
                      input=PROMPT).returncode == 0
    for command in ("claim", "heartbeat"):
        result = daemon.ctl(command, "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
                            "--batch-id", "b1", env=MACHINE)
        assert result.returncode == 0, result.stderr


def test_an_empty_state_root_is_clean_exit_0(daemon: Daemon) -> None:
    result = daemon.ctl("health")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith("health clean (all batches)")


def test_a_complete_batch_is_clean(daemon: Daemon) -> None:
    clean_batch(daemon)
    result = daemon.ctl("health", "--json")
    payload = json.loads(result.stdout)
    assert (result.returncode, payload["verdict"], payload["warnings"]) == (0, "clean", [])


def test_a_heartbeat_without_machine_identity_is_a_warning_exit_1(daemon: Daemon) -> None:
    clean_batch(daemon)
    daemon.ctl("heartbeat", "--agent-id", "agent-z")  # no AGENT_COORD_MACHINE_ID
    result = daemon.ctl("health")
    assert result.returncode == 1
    text = result.stdout.decode()
    assert text.startswith("health warnings (all batches): 1 warning")
    assert "- missing_machine_identity: heartbeat heartbeats/agent-z.json has no machine_id" in text


def test_planted_problems_each_fire_their_signal(daemon: Daemon) -> None:
    manifest = daemon.base / "batch.json"
    manifest.write_text(json.dumps(MANIFEST))  # no launch prompt, no lane heartbeat, no history
    daemon.ctl("register-batch", "--file", str(manifest))
    daemon.ctl("claim", "--agent-id", "agent-q", "--repo", "acme/widgets", "--target", "9",
               "--batch-id", "ghost", env=MACHINE)  # missing manifest, no heartbeat
    (daemon.root / "history").mkdir()
    (daemon.root / "history" / "h.jsonl").write_text("{not json\n")
    result = daemon.ctl("health", "--json", "--first-heartbeat-grace", "0")
    assert result.returncode == 1
    fired = {w["signal"] for w in json.loads(result.stdout)["warnings"]}
    assert fired >= {"manifest_without_launch_prompt", "lane_without_heartbeat",
                     "missing_batch_manifest", "claim_without_heartbeat", "malformed_history_line"}


def test_an_unreadable_record_is_a_warning_exit_1_naming_it(daemon: Daemon) -> None:
    clean_batch(daemon)
    (daemon.root / "claims" / "acme" / "widgets" / "7.json").write_text("{torn")
    result = daemon.ctl("health")
    assert result.returncode == 1
    assert "unreadable: claims/acme/widgets/7.json: invalid JSON" in result.stdout.decode()
    assert "unreadable_record" in result.stdout.decode()


def test_health_scoped_to_a_batch_ignores_other_batches(daemon: Daemon) -> None:
    clean_batch(daemon)
    daemon.ctl("heartbeat", "--agent-id", "agent-z", "--batch-id", "other")  # two warnings, not b1's
    assert daemon.ctl("health").returncode == 1
    scoped = daemon.ctl("health", "--batch-id", "b1", "--json")
    assert scoped.returncode == 0, scoped.stdout
    assert json.loads(scoped.stdout)["scope"] == {"kind": "batch", "batch_id": "b1"}


def test_qa_status_per_pr_comes_from_the_latest_qa_event(daemon: Daemon) -> None:
    clean_batch(daemon)
    for kind, status in (("qa.validation_requested", "requested"), ("qa.validation_passed", "passed")):
        result = daemon.ctl("record-event", "--batch-id", "b1", "--type", kind, "--repo", "acme/widgets",
                            "--target", "5", "--status", status, "--pr-url",
                            "https://github.com/acme/widgets/pull/5")
        assert result.returncode == 0 and b"warning" not in result.stderr, result.stderr
    result = daemon.ctl("health")
    assert "- acme/widgets#5 passed batch b1" in result.stdout.decode()
