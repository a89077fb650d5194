"""Every ctl command end to end: ctl subprocess -> real daemon -> local store."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from .helpers import Daemon

BATCH = {"batch_id": "b1", "repo": "acme/widgets", "lanes": [
    {"name": "backend", "owner": "agent-a", "targets": ["1"]}]}


def out(result) -> str:
    return result.stdout.decode()


def err(result) -> str:
    return result.stderr.decode()


def test_claim_prints_the_lease_and_writes_the_claim_record(daemon: Daemon) -> None:
    result = daemon.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
                        "--branch", "feat/1", "--phase", "claimed", "--generation", "3")
    assert result.returncode == 0, err(result)
    assert out(result).startswith("claimed acme/widgets#1 by agent-a until ")
    record = json.loads((daemon.root / "claims/acme/widgets/1.json").read_text())
    assert record["branch"] == "feat/1" and record["generation"] == 3


def test_second_agent_is_refused_with_exit_3_and_the_message_on_stderr(daemon: Daemon) -> None:
    daemon.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1")
    daemon.ctl("heartbeat", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1")
    result = daemon.ctl("claim", "--agent-id", "agent-b", "--repo", "acme/widgets", "--target", "1")
    assert result.returncode == 3
    assert err(result).startswith("CLAIM_REFUSED: active claim for acme/widgets#1 held by agent-a")
    assert out(result) == ""


def test_heartbeat_with_unknown_status_warns_on_stderr_and_succeeds(daemon: Daemon) -> None:
    result = daemon.ctl("heartbeat", "--agent-id", "agent-a", "--status", "mystery")
    assert result.returncode == 0
    assert out(result).startswith("heartbeat agent-a ")
    assert err(result).startswith('warning: status "mystery" is not in the canonical')


def test_release_plain_then_terminal_twice_reports_lane_already_closed(daemon: Daemon) -> None:
    manifest = daemon.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    assert out(daemon.ctl("register-batch", "--file", str(manifest))) == "registered batch b1\n"
    daemon.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
               "--batch-id", "b1")
    first = daemon.ctl("release", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
                       "--terminal", "done", env={"AGENT_COORD_MACHINE_ID": "m1"})
    again = daemon.ctl("release", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
                       "--terminal", "done", env={"AGENT_COORD_MACHINE_ID": "m1"})
    assert (first.returncode, out(first)) == (0, "released acme/widgets#1 by agent-a\n")
    assert (again.returncode, out(again)) == (0, "lane already closed for acme/widgets#1\n")


def test_record_event_prints_the_event_id_and_typed_validation_is_usage_error(daemon: Daemon) -> None:
    ok = daemon.ctl("record-event", "--batch-id", "b1", "--type", "error", "--severity", "P1",
                    "--category", "ci", "--message", "boom")
    assert ok.returncode == 0, err(ok)
    assert out(ok).startswith("recorded event b1 ")
    bad = daemon.ctl("record-event", "--batch-id", "b1", "--type", "help_requested",
                     "--severity", "P1")
    assert bad.returncode == 1 and err(bad).strip()


def test_register_batch_reads_the_launch_prompt_from_stdin(daemon: Daemon) -> None:
    manifest = daemon.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    result = daemon.ctl("register-batch", "--file", str(manifest), "--launch-prompt", "-",
                        input=b"do the thing\n")
    assert result.returncode == 0, err(result)
    stored = json.loads((daemon.root / "batches/b1.json").read_text())
    assert stored["launch_prompt"] == "do the thing\n"


def test_register_batch_missing_file_is_exit_2_and_oversized_is_exit_1(daemon: Daemon) -> None:
    missing = daemon.ctl("register-batch", "--file", str(daemon.base / "nope.json"))
    assert missing.returncode == 2 and "nope.json" in err(missing)
    big = daemon.base / "big.json"
    big.write_bytes(b" " * (256 * 1024 + 1))
    oversized = daemon.ctl("register-batch", "--file", str(big))
    assert oversized.returncode == 1 and "larger than" in err(oversized)


def test_status_json_and_text_and_batch_audit_verdicts(daemon: Daemon) -> None:
    manifest = daemon.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    daemon.ctl("register-batch", "--file", str(manifest))
    daemon.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
               "--batch-id", "b1")
    scoped = daemon.ctl("status", "--repo", "acme/widgets", "--target", "1", "--json")
    assert scoped.returncode == 0
    assert json.loads(out(scoped))["scope"] == {"kind": "target", "repo": "acme/widgets", "target": "1"}
    text = daemon.ctl("status")
    assert text.returncode == 0 and out(text).startswith("claims\n- acme/widgets#1 active agent-a")
    audit = daemon.ctl("batch-audit", "--batch-id", "b1", "--json")
    if "not available yet" in err(audit):  # the audit use case lands separately
        return
    assert audit.returncode == 1 and json.loads(out(audit))["verdict"] == "incomplete"


def test_gc_streams_progress_on_stderr_and_prints_the_plan(daemon: Daemon) -> None:
    quick = daemon.ctl("gc", "--dry-run", "--json")
    assert quick.returncode == 0, err(quick)
    assert json.loads(out(quick))["mode"] == "dry-run"
    assert "scanned" not in err(quick)  # a run that ends within a second stays quiet
    result = daemon.ctl("gc", "--dry-run", "--json", env={"AGENT_COORD_PROGRESS_AFTER": "0"})
    assert "scanned claims" in err(result)
    both = daemon.ctl("gc", "--dry-run", "--execute")
    assert both.returncode == 1


def test_version_json_has_the_spec_keys_plus_client_and_daemon(daemon: Daemon) -> None:
    result = daemon.ctl("version", "--json")
    payload = json.loads(out(result))
    assert {"version", "schema_version", "lane_closed_schema_version", "archive_schema_version",
            "default_backend", "default_ref"} <= payload.keys()
    assert payload["client_version"] == payload["daemon_version"] == payload["version"]
    assert payload["daemon_pid"] == daemon.proc.pid
    text = daemon.ctl("version")
    assert "daemon_version: " + payload["version"] in out(text)


def test_config_show_json_publishes_exit_codes(daemon: Daemon) -> None:
    result = daemon.ctl("config", "show", "--json")
    if "not available yet" in err(result):
        return
    assert result.returncode == 0
    assert json.loads(out(result))["exit_codes"]["claim_refused"] == 3


def test_daemon_status_and_stop(daemon: Daemon) -> None:
    status = daemon.ctl("daemon", "status", "--json")
    assert status.returncode == 0
    assert json.loads(out(status))["pid"] == daemon.proc.pid
    stop = daemon.ctl("daemon", "stop")
    assert stop.returncode == 0, err(stop)
    assert daemon.proc.wait(10) == 0
    assert not daemon.socket.exists()
    after = daemon.ctl("daemon", "status")
    assert after.returncode == 2 and "not running" in out(after)


def test_usage_errors_exit_1_not_2_with_one_line(daemon: Daemon) -> None:
    """agent-coord's words first; then where help is."""
    for argv, says in ((("claim", "--agent-id", "a"), "missing required --repo"),
                       (("claim", "--bogus"), "invalid option: --bogus"),
                       (("claim", "--ttl", "ten"), "invalid argument: --ttl ten"),
                       (("claim", "--ttl", "\u00fc" * 5000), "invalid argument: --ttl \u00fc"),
                       (("no-such-command",), "unknown command: no-such-command"),
                       (("status", "--events"), "missing argument: --events"),
                       (("claimm", "--agent-id", "a"),
                        "unknown command: claimm; did you mean claim? (see 'agentcoordctl --help')"),
                       (("batch", "stpo"), "unknown command: batch stpo; did you mean batch stop?"),
                       (("claim", "--agnet-id", "a"), "invalid option: --agnet-id; did you mean "
                        "--agent-id? (see 'agentcoordctl claim -h')")):
        result = daemon.ctl(*argv)
        assert result.returncode == 1, argv
        lines = err(result).strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(says), (argv, lines)
        assert "Traceback" not in err(result)


def test_every_command_has_help(daemon: Daemon) -> None:
    for command in ("claim", "release", "heartbeat", "register-batch", "record-event", "status",
                    "batch-audit", "version", "config", "daemon", "gc", "demo"):
        result = daemon.ctl(command, "--help")
        assert result.returncode == 0, (command, err(result))
        assert "Usage: agentcoordctl " + command in out(result)
    assert daemon.ctl("--help").returncode == 0


def test_demo_runs_isolated_and_leaves_nothing_behind(daemon: Daemon) -> None:
    scratch = tempfile.mkdtemp(prefix="acdemo.", dir="/tmp")  # private: other demos may run
    try:
        result = daemon.ctl("demo", env={"AGENT_COORD_API_URL": "http://127.0.0.1:9", "TMPDIR": scratch})
        assert result.returncode == 0, err(result)
        text = out(result)
        assert "refused (exit 3)" in text and "liveness stale" in text and "liveness dead" in text
        assert "taken over (exit 0)" in text
        # as the README's agent section: a machine id, a registered batch, a factual terminal closeout
        assert "export AGENT_COORD_MACHINE_ID=demo-machine" in text
        assert "closed by demo-b on machine demo-machine (exit 0)" in text
        assert "batch-audit demo-b1: complete (exit 0)" in text
        assert "UNKNOWN" not in text + err(result)
        assert os.listdir(scratch) == []  # its temporary root, daemon and socket are gone
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert list(daemon.root.iterdir()) == []  # the configured root was never touched
