"""Traps a user falls into (issue 20): each one ends at once, or says so on stderr."""

from __future__ import annotations

import json
import re
import subprocess
import time

from .helpers import PYTHON, Daemon, interrupt, read_until, reaped

BATCH = {"batch_id": "b1", "repo": "acme/widgets", "lanes": [
    {"name": "api", "owner": "agent-a", "targets": ["1"]},
    {"name": "ui", "owner": "agent-b", "targets": ["2"], "depends_on": ["b1:api"]}]}


def out(result: subprocess.CompletedProcess) -> str:
    return result.stdout.decode()


def err(result: subprocess.CompletedProcess) -> str:
    return result.stderr.decode()


def _register(d: Daemon) -> None:
    manifest = d.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    assert d.ctl("register-batch", "--file", str(manifest)).returncode == 0


# ---- 1. autostart against a regular file at the socket path ---------------------------

def test_a_regular_file_at_the_socket_path_fails_at_once_with_the_daemons_refusal(
        daemon_factory) -> None:
    d: Daemon = daemon_factory()
    d.socket.parent.mkdir(parents=True)
    d.socket.write_text("not a socket")
    started = time.monotonic()
    result = d.ctl("heartbeat", "--agent-id", "agent-a", env={"AGENT_COORD_NO_AUTOSTART": ""})
    elapsed = time.monotonic() - started
    assert result.returncode == 2
    assert "exists and is not a socket" in err(result)
    assert elapsed < 5.0, f"took {elapsed:.1f}s"


# ---- 2. a state root that did not exist ------------------------------------------------

def test_claim_into_a_new_state_root_creates_it_and_says_so_once(daemon: Daemon) -> None:
    root = daemon.base / "typo" / "path"
    args = ("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
            "--state-root", str(root))
    first = daemon.ctl(*args)
    again = daemon.ctl(*args)
    assert first.returncode == 0 and again.returncode == 0
    assert err(first).count(f"notice: created new state root {root}\n") == 1
    assert "created new state root" not in err(again)
    assert (root / "claims/acme/widgets/1.json").is_file()
    assert "created new state root" not in out(first)


def test_reading_a_missing_state_root_creates_nothing(daemon: Daemon) -> None:
    root = daemon.base / "absent"
    result = daemon.ctl("status", "--state-root", str(root))
    assert "created new state root" not in err(result)
    assert not root.exists()


# ---- 3. claiming a blocked lane --------------------------------------------------------

def test_claiming_a_lane_whose_dependencies_are_unmet_warns_naming_them(daemon: Daemon) -> None:
    _register(daemon)
    result = daemon.ctl("claim", "--agent-id", "agent-b", "--repo", "acme/widgets", "--target", "2",
                        "--batch-id", "b1")
    assert result.returncode == 0
    assert "warning: lane b1:ui is blocked on b1:api (not done)" in err(result)
    assert out(result).startswith("claimed acme/widgets#2 by agent-b")


def test_claiming_an_unblocked_lane_does_not_warn(daemon: Daemon) -> None:
    _register(daemon)
    result = daemon.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
                        "--batch-id", "b1")
    assert result.returncode == 0 and "blocked" not in err(result)
    daemon.ctl("heartbeat", "--agent-id", "agent-a", "--status", "done")
    done = daemon.ctl("claim", "--agent-id", "agent-b", "--repo", "acme/widgets", "--target", "2",
                      "--batch-id", "b1")
    assert done.returncode == 0 and "blocked" not in err(done)


# ---- 4. keep-alive on a target someone else holds --------------------------------------

def test_keep_alive_heartbeat_on_a_target_another_agent_holds_warns_and_renews_nothing(
        daemon: Daemon) -> None:
    daemon.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1")
    result = daemon.ctl("heartbeat", "--agent-id", "agent-b", "--repo", "acme/widgets",
                        "--target", "1", "--keep-alive")
    assert result.returncode == 0
    assert re.search(r"warning: keep-alive not registered: acme/widgets#1 is held by agent-a",
                     err(result)), err(result)
    lanes = json.loads(out(daemon.ctl("lanes", "--json")))
    rows = lanes.get("lanes", lanes) if isinstance(lanes, dict) else lanes
    assert not [lane for lane in rows if lane.get("agent_id") == "agent-b"]


# ---- 5. waiting on a batch that does not exist -----------------------------------------

def test_wait_until_complete_on_an_unknown_batch_ends_at_once(daemon: Daemon) -> None:
    started = time.monotonic()
    result = daemon.ctl("wait", "--until-complete", "--batch-id", "typo", timeout=20)
    assert time.monotonic() - started < 10
    assert result.returncode == 2
    assert "batch typo" in err(result) and "not registered" in err(result)


# ---- 6. an event for an unregistered batch ---------------------------------------------

def test_record_event_for_an_unregistered_batch_warns_and_records(daemon: Daemon) -> None:
    result = daemon.ctl("record-event", "--batch-id", "nope", "--type", "note")
    assert result.returncode == 0
    assert "warning: batch nope is not registered; event recorded anyway" in err(result)
    assert list((daemon.root / "events/nope").glob("*.json"))


def test_lifecycle_events_and_registered_batches_do_not_warn(daemon: Daemon) -> None:
    _register(daemon)
    event = daemon.ctl("record-event", "--batch-id", "b1", "--type", "note")
    claim = daemon.ctl("claim", "--agent-id", "agent-c", "--repo", "acme/widgets", "--target", "7",
                       "--batch-id", "nope")
    assert "not registered" not in err(event) and "not registered" not in err(claim)


# ---- 7. the command line ---------------------------------------------------------------

def test_bare_ctl_and_bare_group_print_help_and_exit_0(daemon: Daemon) -> None:
    bare, group = daemon.ctl(), daemon.ctl("batch")
    assert bare.returncode == 0 and out(bare).startswith("Usage: agentcoordctl")
    assert group.returncode == 0 and out(group).startswith("Usage: agentcoordctl batch")


def test_version_option_prints_what_version_prints(daemon: Daemon) -> None:
    option, command = daemon.ctl("--version"), daemon.ctl("version")
    assert option.returncode == 0
    assert out(option) == out(command) and out(option).startswith("agentcoordctl ")


def test_global_timeout_is_accepted_after_the_command(daemon: Daemon) -> None:
    result = daemon.ctl("status", "--timeout", "5")
    assert result.returncode == 0, err(result)
    assert daemon.ctl("--timeout", "5", "status").returncode == 0


def test_help_shows_defaults_vocabulary_and_full_first_lines(daemon: Daemon) -> None:
    claim = out(daemon.ctl("claim", "--help"))
    assert "14400" in claim and "900" in claim
    heartbeat = out(daemon.ctl("heartbeat", "--help"))
    assert "900" in heartbeat
    for status in ("in_progress", "blocked", "waiting_on_checks_or_review", "done", "superseded"):
        assert status in heartbeat
    gc = out(daemon.ctl("gc", "--help"))
    for text in ("--hot-days DAYS", "(default 7)", "(default 30)", "(default 1)"):
        assert text in gc
    top = out(daemon.ctl("--help"))
    assert "..." not in top.split("\n", 1)[1]
    assert "Acquire or renew the lease on ISSUE_OR_PR (exit 3 while another holder is live or" \
        in " ".join(top.split())
    for command in ("claim", "heartbeat", "release", "record-event", "status", "gc"):
        assert "<str>" not in out(daemon.ctl(command, "--help")), command
        assert "<int>" not in out(daemon.ctl(command, "--help")), command


def test_gc_help_documents_every_option(daemon: Daemon) -> None:
    from agentcoordctl import gc

    text = " ".join(out(daemon.ctl("gc", "--help")).split())
    for opt in gc.COMMANDS[0].options():
        assert opt.help, opt.name
        assert f"{opt.name}" in text


def test_help_defaults_match_the_daemons(daemon: Daemon) -> None:
    from agentcoordd.coord import claims, gc, heartbeats

    claim = " ".join(out(daemon.ctl("claim", "--help")).split())
    gc_help = " ".join(out(daemon.ctl("gc", "--help")).split())
    heartbeat = " ".join(out(daemon.ctl("heartbeat", "--help")).split())
    assert f"default {claims.DEFAULT_CLAIM_TTL}" in claim
    assert f"default {heartbeats.DEFAULT_HEARTBEAT_TTL}" in heartbeat
    assert f"(default {gc.DEFAULT_HOT_DAYS})" in gc_help
    assert f"(default {gc.DEFAULT_ARCHIVE_DAYS})" in gc_help
    assert f"(default {gc.DEFAULT_SYNTHETIC_HOT_DAYS})" in gc_help


# ---- 8. notices of a piped status --watch ----------------------------------------------

def test_piped_status_watch_puts_notices_on_stderr_only(daemon: Daemon) -> None:
    env = daemon.env(AGENT_COORD_LOCAL="1")
    env.pop("AGENT_COORD_STATE_ROOT")
    proc = subprocess.Popen([PYTHON, "-m", "agentcoordctl.cli", "status", "--watch",
                             "--interval", "0.2"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=str(daemon.base))
    with reaped(proc):
        # three refreshes (each one sees the notice again), however long a loaded machine takes
        frames = read_until(proc.stdout.fileno(), lambda d: d.count(b"--- agentcoord status") >= 3)
        rest, stderr = interrupt(proc)
    stdout = frames + rest
    assert "--- agentcoord status" in stdout.decode()
    assert "notice: local mode" not in stdout.decode()
    assert stderr.decode().count("notice: local mode") == 1


# ---- 9. scope notes of a target-scoped status ------------------------------------------

def test_target_scoped_text_status_names_its_scope_not_a_degradation(daemon: Daemon) -> None:
    daemon.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1")
    daemon.ctl("heartbeat", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1")
    text = out(daemon.ctl("status", "--repo", "acme/widgets", "--target", "1"))
    assert "scope: target acme/widgets#1 (batches, events not checked)" in text.splitlines()
    assert "degraded" not in text
    assert text.startswith("claims\n- acme/widgets#1 active agent-a")
    assert "batches\n- not checked in target scope\n" in text  # agent-coord's section shape
    payload = json.loads(out(daemon.ctl("status", "--repo", "acme/widgets", "--target", "1",
                                        "--json")))
    assert payload["degraded"] == ["not checked in target scope"]
    assert payload["section_notes"]["batches"] == "not checked in target scope"


def test_batch_scoped_text_status_keeps_real_degradations_under_degraded(daemon: Daemon) -> None:
    _register(daemon)
    text = out(daemon.ctl("status", "--batch-id", "b1"))
    lines = text.splitlines()
    assert "scope: batch b1 (claims not checked)" in lines
    degraded = lines[lines.index("degraded") + 1:]
    assert degraded and "- not checked in batch scope" not in degraded


# ---- 10. a terminal release without AGENT_COORD_MACHINE_ID (issue 42) --------------------

def test_a_closeout_without_a_machine_id_says_how_to_finish_and_the_retry_repairs_it(
        daemon: Daemon) -> None:
    _register(daemon)
    lane = ("--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1", "--batch-id", "b1")
    assert daemon.ctl("claim", *lane).returncode == 0
    closed = daemon.ctl("release", *lane, "--terminal", "done")
    # agent-coord closes the lane too (exit 0, closed_by.machine UNKNOWN): so do we, and say how
    # to finish it.
    assert closed.returncode == 0, err(closed)
    assert ("warning: lane api closed with closed_by.machine UNKNOWN: batch-audit will report it "
            "incomplete; finish it by running this command again with AGENT_COORD_MACHINE_ID set "
            "(or --host)\n") in err(closed)
    audit = daemon.ctl("batch-audit", "--batch-id", "b1")
    assert audit.returncode == 1 and "lane api owner agent-a incomplete" in out(audit)

    repaired = daemon.ctl("release", *lane, "--terminal", "done", env={"AGENT_COORD_MACHINE_ID": "m5"})
    assert repaired.returncode == 0, err(repaired)
    assert "lane api: closed_by.machine UNKNOWN repaired to m5" in err(repaired)
    event = json.loads(next((daemon.root / "events" / "b1").glob("lane_closed-*.json")).read_text())
    assert event["closed_by"] == {"agent_id": "agent-a", "machine": "m5"}
    manifest = json.loads((daemon.root / "batches" / "b1.json").read_text())
    assert manifest["lanes"][0]["closed_by"] == {"agent_id": "agent-a", "machine": "m5"}
    audit = daemon.ctl("batch-audit", "--batch-id", "b1")
    assert "lane api owner agent-a complete" in out(audit), out(audit)

    again = daemon.ctl("release", *lane, "--terminal", "done", env={"AGENT_COORD_MACHINE_ID": "m6"})
    assert again.returncode == 0 and "repaired" not in err(again)  # a known machine stays
    event = json.loads(next((daemon.root / "events" / "b1").glob("lane_closed-*.json")).read_text())
    assert event["closed_by"]["machine"] == "m5"


# ---- 11. value errors say what is accepted (issue 42) -------------------------------------

def test_a_bad_target_or_repo_says_what_is_accepted_in_agent_coords_words(daemon: Daemon) -> None:
    bad_target = daemon.ctl("claim", "--agent-id", "a", "--repo", "acme/widgets", "--target", "#12")
    bad_repo = daemon.ctl("claim", "--agent-id", "a", "--repo", "https://github.com/acme/widgets",
                          "--target", "12")
    assert bad_target.returncode == 1 and bad_repo.returncode == 1  # agent-coord's exit code
    assert err(bad_target) == "invalid target: #12 (want an issue or PR number or id, e.g. 12)\n"
    assert err(bad_repo) == ("invalid target repo: https://github.com/acme/widgets "
                             "(want owner/name, e.g. acme/widgets)\n")


# ---- 12. a notice once per command (issue 42) --------------------------------------------

def test_run_says_the_local_mode_notice_once_though_it_makes_three_requests(daemon: Daemon) -> None:
    manifest = daemon.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    assert daemon.ctl("register-batch", "--file", str(manifest),
                      unset=("AGENT_COORD_STATE_ROOT",)).returncode == 0
    done = daemon.ctl("run", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
                      "--batch-id", "b1", "--done-on-success", "--", "true",
                      unset=("AGENT_COORD_STATE_ROOT",), env={"AGENT_COORD_MACHINE_ID": "m5"})
    assert done.returncode == 0, err(done)
    notices = [line for line in err(done).splitlines() if line.startswith("notice: local mode")]
    assert notices == [f"notice: local mode — single-machine only; state root: "
                       f"{daemon.base / 'xdgstate' / 'agent-coordination'}"]
