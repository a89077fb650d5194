"""Issue 17's findings, one regression test each: nothing a client, another user
or a restart does breaks the referee. Workloads live in hardening.py (the
bench runs them at full size)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentcoordd import protocol as p
from integration.helpers import PYTHON, Daemon, RawClient

from . import framefuzz, hardening
from .scenarios import call, local_caller


def _raw_frame(d: Daemon, body: bytes, *, hello: bool) -> p.Response | None:
    return framefuzz.send(str(d.socket), framefuzz.Frame(hello, len(body).to_bytes(4, "big"), body))


def _alive_and_serving(d: Daemon) -> None:
    assert d.proc is not None and d.proc.poll() is None, "the daemon died"
    assert framefuzz.served(str(d.socket))


# ---- 1. one deep frame must not kill the daemon ----------------------------------------


def test_a_hello_with_a_1000_deep_unknown_field_costs_only_that_connection(daemon: Daemon) -> None:
    hello = msgspec.msgpack.encode({"op": "hello", "protocol": 1, "client": "x"})
    body = b"\x84" + hello[1:] + framefuzz.mp_str("zz") + b"\x91" * 1000 + b"\xc0"
    reply = _raw_frame(daemon, body, hello=False)
    assert reply is not None and reply.exit_code == p.EXIT_USAGE
    assert "nested too deeply" in reply.error and "\n" not in reply.error
    _alive_and_serving(daemon)


@pytest.mark.parametrize("where", ["caller", "claim_field", "meta", "selection"])
def test_3000_deep_maps_inside_a_claim_cost_only_that_connection(daemon: Daemon, where: str) -> None:
    deep = framefuzz.nested(3000, "map", b"\xc0")
    fields = {"op": framefuzz.mp_str("claim"), "agent_id": framefuzz.mp_str("a"),
              "repo": framefuzz.mp_str("acme/widgets"), "target": framefuzz.mp_str("1")}
    if where == "claim_field":
        fields["unknown"] = deep
    else:
        fields[where] = framefuzz.mp_map_header(1) + framefuzz.mp_str("unknown") + deep
    body = framefuzz.mp_map_header(len(fields)) + b"".join(
        framefuzz.mp_str(k) + v for k, v in fields.items())
    reply = _raw_frame(daemon, body, hello=True)
    assert reply is not None and reply.exit_code == p.EXIT_USAGE and "\n" not in reply.error
    _alive_and_serving(daemon)
    assert "frame nested deeper" in daemon.log()


def test_connection_failures_are_logged_with_type_message_and_stack(tmp_path: Path) -> None:
    import io

    from agentcoordd.daemon import logging as daemon_logging

    stream = io.StringIO()
    daemon_logging.configure("info", stream=stream)
    try:
        raise RecursionError("maximum recursion depth exceeded while deserializing an object")
    except RecursionError:
        daemon_logging.get_logger().exception("connection failed; dropped it",
                                              token="secret-value")
    line = json.loads(stream.getvalue().splitlines()[-1])
    (exc,) = line["exception"]
    assert exc["exc_type"] == "RecursionError" and "deserializing" in exc["exc_value"]
    assert exc["frames"] and "locals" not in exc["frames"][0]
    assert line["token"] == daemon_logging.REDACTED and "exc_info" not in line


# ---- 2. memory and connections are bounded ---------------------------------------------


def test_a_flood_of_partial_2mb_frames_stays_small_and_serves_throughout(daemon: Daemon) -> None:
    figures = hardening.flood(daemon, clients=300)
    assert figures["alive"] and figures["served_throughout"], figures
    assert figures["rss_growth_mb"] <= 50, figures
    assert figures["refused"] > 0 and figures["refusals_one_line"], figures
    assert figures["refusal_reasons"] == ["agentcoordd is busy: a"], figures


def test_idle_pre_hello_connections_past_the_limit_are_refused_at_once(daemon_factory: Any) -> None:
    d = daemon_factory("idle")
    d.start("--max-connections", "64", "--hello-timeout", "1")
    figures = hardening.idle_connections(d, count=200, hello_timeout=1.0)
    assert figures["alive"] and figures["served_after_deadline"], figures
    assert figures["accepted"] <= 64 and figures["refused"] >= 200 - 64, figures
    assert figures["refusal"].startswith("agentcoordd is busy: ") and "limit 64" in figures["refusal"]
    assert figures["refusals_one_line"]


def test_a_refused_ctl_call_prints_the_daemons_reason_and_exits_2(daemon_factory: Any) -> None:
    d = daemon_factory("busy")
    d.start("--max-connections", "1", "--hello-timeout", "5")
    time.sleep(0.3)  # the start-up probe's connection is gone
    with RawClient(d.socket):  # holds the only slot
        time.sleep(0.2)
        result = d.ctl("daemon", "status", timeout=30)
    assert result.returncode == 2
    assert result.stderr.decode().strip().startswith("agentcoordd is busy: 1 connections open")


def test_the_daemon_refuses_bad_limit_flags(daemon_factory: Any) -> None:
    d = daemon_factory("flags")
    for flag, value in (("--max-connections", "0"), ("--hello-timeout", "nan"),
                        ("--max-buffered-bytes", "inf")):
        result = subprocess.run([PYTHON, "-m", "agentcoordd.daemon.main", "--foreground",
                                 "--socket", str(d.socket), "--state-dir", str(d.state_dir),
                                 flag, value], capture_output=True, timeout=30, env=d.daemon_env())
        assert result.returncode == 2 and b"Traceback" not in result.stderr
        assert flag.encode() in result.stderr


# ---- 3. ctl never prints a traceback; output errors have honest exit codes ----------------


@pytest.mark.parametrize("args", [
    ["--timeout", "nan", "version"],
    ["--timeout", "inf", "version"],
    ["--timeout", "-inf", "version"],
    ["status", "--events", "99999999999999999999999"],
    ["heartbeat", "--agent-id", "a", "--keep-alive", "--watch-pid", "99999999999"],
    ["heartbeat", "--agent-id", "a", "--keep-alive", "--renew-every", "nan"],
    ["wait", "--until-stop-requested", "--batch-id", "b", "--timeout", "inf"],
    ["status", "--watch", "--interval", "nan"],
])
def test_hostile_numbers_are_one_line_usage_errors(daemon: Daemon, args: list[str]) -> None:
    result = daemon.ctl(*args)
    err = result.stderr.decode()
    assert result.returncode == 1, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    _alive_and_serving(daemon)


def test_a_huge_ttl_is_refused_by_the_machines_lease_bound(daemon: Daemon) -> None:
    """agent-coord takes any positive TTL (conformance claim_ttl_values) and blocks the target
    until 9999; the machine's maximum lease refuses it (docs/compat.md#lease-bounds)."""
    result = daemon.ctl("claim", "--agent-id", "a", "--repo", "acme/widgets", "--target", "1",
                        "--ttl", "99999999999999999999")
    assert result.returncode == 1 and b"maximum lease of 86400s" in result.stderr
    assert not (daemon.root / "claims/acme/widgets/1.json").exists()


def test_a_claim_with_stdout_closed_is_exit_2_and_says_it_succeeded(daemon: Daemon) -> None:
    env = daemon.env()
    result = subprocess.run(
        [PYTHON, "-m", "agentcoordctl.cli", "claim", "--agent-id", "a", "--repo", "acme/widgets",
         "--target", "7"], env=env, stdout=None, stderr=subprocess.PIPE, timeout=30,
        cwd=str(daemon.base), pass_fds=(), preexec_fn=lambda: os.close(1))
    err = result.stderr.decode()
    assert result.returncode == 2 and "Traceback" not in err
    assert "could not write the output" in err and "the command itself succeeded" in err
    assert (daemon.root / "claims/acme/widgets/7.json").exists()


def test_a_claim_into_a_full_disk_is_exit_2_and_says_it_succeeded(daemon: Daemon) -> None:
    with open("/dev/full", "wb") as full:
        result = subprocess.run(
            [PYTHON, "-m", "agentcoordctl.cli", "claim", "--agent-id", "a", "--repo",
             "acme/widgets", "--target", "8"], env=daemon.env(), stdout=full,
            stderr=subprocess.PIPE, timeout=30, cwd=str(daemon.base))
    err = result.stderr.decode()
    assert result.returncode == 2 and "No space left on device" in err and "Traceback" not in err
    assert (daemon.root / "claims/acme/widgets/8.json").exists()


def test_a_refused_claim_keeps_exit_3_when_its_output_fails(daemon: Daemon) -> None:
    assert daemon.ctl("claim", "--agent-id", "a", "--repo", "acme/widgets", "--target", "9"
                      ).returncode == 0
    with open("/dev/full", "wb") as full:
        result = subprocess.run(
            [PYTHON, "-m", "agentcoordctl.cli", "claim", "--agent-id", "b", "--repo",
             "acme/widgets", "--target", "9", "--json"], env=daemon.env(), stdout=full,
            stderr=subprocess.PIPE, timeout=30, cwd=str(daemon.base))
    assert result.returncode == 3


@pytest.mark.parametrize("command", [["status"], ["version"], ["status", "--json"]])
def test_a_reader_that_goes_away_ends_quietly_with_exit_0(daemon: Daemon, command: list[str]) -> None:
    for n in range(8):
        assert daemon.ctl("heartbeat", "--agent-id", f"pipe-{n}").returncode == 0
    for _ in range(5):
        shell = subprocess.run(
            ["bash", "-c", f"{PYTHON} -m agentcoordctl.cli {' '.join(command)} | head -c 1 >/dev/null;"
             " echo ${PIPESTATUS[0]}"], env=daemon.env(), capture_output=True, timeout=60,
            cwd=str(daemon.base))
        assert shell.stdout.decode().strip() == "0", shell.stderr.decode()
        assert b"Traceback" not in shell.stderr and b"Exception ignored" not in shell.stderr


# ---- 4. one lock holder must not stall the daemon ------------------------------------------


def test_a_held_record_lock_fails_its_calls_in_time_and_nothing_else(daemon: Daemon) -> None:
    figures = hardening.lock_holder(daemon, seconds=5.0, locked_calls=45, other_calls=40)
    assert figures["locked_exit_codes"] == [2] and figures["locked_errors_name_lock"], figures
    assert figures["slowest_locked_call"] <= figures["timeout"] + 1.0, figures
    assert set(figures["other_exit_codes"]) <= {0, 3} and not figures["other_failures"], figures
    assert figures["slowest_other_call"] < figures["timeout"], figures
    assert figures["after_release_exit_code"] == 0


# ---- 5. state roots are private --------------------------------------------------------------


def test_state_directories_are_0700_and_records_and_locks_0600(daemon: Daemon) -> None:
    shared = daemon.base / "world-readable-parent"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    root = shared / "root"
    request = p.Claim(agent_id="a", repo="acme/widgets", target="1", batch_id="b1")
    request.caller = local_caller(daemon)
    request.selection = p.Selection(state_root=str(root))
    with RawClient(daemon.socket) as raw:
        raw.hello()
        assert raw.call(request).exit_code == 0
    modes = {path.relative_to(root).as_posix(): path.stat().st_mode & 0o777
             for path in [root, *root.rglob("*")]}
    assert modes["."] == 0o700
    assert {m for path, m in modes.items() if (root / path).is_dir()} == {0o700}
    assert {m for path, m in modes.items() if (root / path).is_file()} == {0o600}
    assert any(path.endswith(".lock") for path in modes)


def test_another_user_reads_nothing_of_a_state_root(daemon: Daemon, other_user: list[str]) -> None:
    shared = Path(daemon.base) / "pub"
    shared.mkdir()
    for directory in (daemon.base.parent, daemon.base, shared):
        os.chmod(directory, 0o755)
    root = shared / "root"
    for request in (p.Claim(agent_id="a", repo="acme/widgets", target="1", batch_id="b1"),
                    p.RecordEvent(batch_id="b1", type="note", message="secret plan")):
        request.caller = local_caller(daemon)
        request.selection = p.Selection(state_root=str(root))
        with RawClient(daemon.socket) as raw:
            raw.hello()
            assert raw.call(request).exit_code == 0
    claim = root / "claims/acme/widgets/1.json"
    probe = subprocess.run(
        [*other_user, PYTHON, "-c",
         "import os, sys\n"
         "for path in sys.argv[1:]:\n"
         "    try:\n"
         "        os.listdir(path) if os.path.isdir(path) else open(path).read()\n"
         "        print('READ', path)\n"
         "    except PermissionError:\n"
         "        print('DENIED', path)\n"
         "    except OSError as exc:\n"
         "        print('ERR', exc.errno, path)\n",
         str(root), str(root / "claims"), str(claim), str(claim) + ".lock"],
        capture_output=True, timeout=30)
    lines = probe.stdout.decode().splitlines()
    assert len(lines) == 4 and all(line.startswith(("DENIED", "ERR 13")) for line in lines), (
        lines, probe.stderr.decode())


def test_an_operator_can_loosen_an_explicit_root(daemon: Daemon) -> None:
    root = daemon.base / "team-root"
    result = daemon.ctl("claim", "--agent-id", "a", "--repo", "acme/widgets", "--target", "1",
                        env={"AGENT_COORD_STATE_ROOT": str(root), "AGENT_COORD_STATE_MODE": "0750"})
    assert result.returncode == 0, result.stderr.decode()
    assert (root / "claims").stat().st_mode & 0o777 == 0o750
    assert (root / "claims/acme/widgets/1.json").stat().st_mode & 0o777 == 0o640
    bad = daemon.ctl("claim", "--agent-id", "a", "--repo", "acme/widgets", "--target", "2",
                     env={"AGENT_COORD_STATE_ROOT": str(root), "AGENT_COORD_STATE_MODE": "0644"})
    assert bad.returncode == 1 and "AGENT_COORD_STATE_MODE" in bad.stderr.decode()


# ---- 6. the outbox does not depend on the daemon's own environment --------------------------


def test_queued_events_wait_for_a_callers_token_across_a_restart(daemon_factory: Any,
                                                                 reliability_worker: Any) -> None:
    d = daemon_factory("tok")
    d.start()
    figures = hardening.caller_token_restart(d, reliability_worker, events=7)
    assert figures["queued"] == 7 and figures["undelivered_before_token"] == 7, figures
    assert figures["waiting_for_token"] == 7, figures
    assert figures["drained"] and figures["delivered"] == 7 and figures["duplicates"] == 0, figures


def test_outbox_flush_delivers_with_the_callers_token(daemon_factory: Any,
                                                      reliability_worker: Any) -> None:
    d = daemon_factory("flush")
    d.start()
    env = {"AGENT_COORD_API_URL": reliability_worker.url,
           "AGENT_COORD_API_TOKEN": reliability_worker.tokens["ref-all"]}
    reliability_worker.stop()
    try:
        queued = d.ctl("--timeout", "2", "record-event", "--batch-id", "flush-b", "--type",
                       "note", "--queue-on-failure", env=env)
        assert queued.returncode == 0, queued.stderr.decode()
        d.proc.kill()
        d.proc.wait()
        d.start()
    finally:
        reliability_worker.restart()
    listing = d.ctl("outbox", "--json")
    assert json.loads(listing.stdout)["entries"][0]["waiting_for_token"] is True
    assert "waiting for a token" in d.ctl("outbox").stdout.decode()
    doctor = json.loads(d.ctl("doctor", "--daemon", "--json").stdout)
    assert doctor["daemon"]["outbox"]["waiting_for_token"] == 1
    flushed = d.ctl("outbox", "flush", env=env)
    assert flushed.returncode == 0, flushed.stderr.decode()
    assert "1 delivered, 0 queued" in flushed.stdout.decode()


# ---- 7. one state dir has one daemon --------------------------------------------------------


def test_a_second_daemon_on_the_same_state_dir_is_refused_and_nothing_is_lost(
        daemon_factory: Any) -> None:
    figures = hardening.shared_state_dir(daemon_factory, appends=40)
    assert figures["second_daemon_exit"] == 1, figures
    assert "one state dir has one daemon" in figures["second_daemon_message"]
    assert figures["outbox_lost"] == 0 and figures["first_alive"], figures


def test_ctl_without_xdg_runtime_dir_uses_the_daemon_that_owns_the_state_dir(
        daemon_factory: Any) -> None:
    d = daemon_factory("xdg")
    runtime = d.base / "runtime"
    runtime.mkdir(mode=0o700)
    d.socket = runtime / "agentcoord" / "agentcoordd.sock"
    d.state_dir = d.base / "xdgstate" / "agentcoord"  # the default for this HOME
    d.start()
    cron_env = {"XDG_STATE_HOME": str(d.base / "xdgstate")}
    result = d.ctl("daemon", "status", "--json", env=cron_env,
                   unset=("AGENT_COORD_SOCKET", "AGENT_COORD_NO_AUTOSTART", "XDG_RUNTIME_DIR"))
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["pid"] == d.proc.pid
    assert b"started agentcoordd" not in result.stderr


def test_racing_autostarts_log_no_error_lines(daemon_factory: Any) -> None:
    d = daemon_factory("race")
    env = d.env()
    env.pop("AGENT_COORD_NO_AUTOSTART")
    racers = [subprocess.Popen([PYTHON, "-m", "agentcoordctl.cli", "heartbeat", "--agent-id",
                                f"r{n}"], env=env, cwd=str(d.base), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE) for n in range(4)]
    codes = [r.wait(60) for r in racers]
    for r in racers:
        r.stdout.close()
        r.stderr.close()
    assert codes == [0, 0, 0, 0]
    log = (d.base / "xdgstate" / "agentcoord" / "agentcoordd.log").read_text()
    levels = [json.loads(line).get("level") for line in log.splitlines() if line.startswith("{")]
    assert "error" not in levels, log
    # The racers' own start-ups that lost were stopped: one `daemon stop` ends it all.
    stop = d.ctl("daemon", "stop")
    assert stop.returncode == 0, stop.stderr.decode()


# ---- 9. dependency cycles are refused ---------------------------------------------------


def _manifest(batch: str, lanes: list[dict[str, Any]]) -> bytes:
    return json.dumps({"batch_id": batch, "repo": "acme/widgets", "lanes": lanes}).encode()


def _lane(name: str, *deps: str) -> dict[str, Any]:
    return {"name": name, "owner": "agent-a", "targets": ["1"], "depends_on": list(deps)}


@pytest.mark.parametrize("lanes, named", [
    ([_lane("a", "c1:a")], "c1:a -> c1:a"),
    ([_lane("a", "c1:b"), _lane("b", "c1:a")], "c1:a -> c1:b -> c1:a"),
    ([_lane(f"l{i}", f"c1:l{(i + 1) % 300}") for i in range(300)], "c1:l0 -> c1:l1 -> c1:l2"),
])
def test_dependency_cycles_are_refused_naming_the_cycle(daemon: Daemon, lanes: list[Any],
                                                        named: str) -> None:
    path = daemon.base / "m.json"
    path.write_bytes(_manifest("c1", lanes))
    for command in (["register-batch", "--file", str(path)],
                    ["validate", "--family", "batch", str(path)]):
        result = daemon.ctl(*command)
        err = result.stderr.decode() + result.stdout.decode()
        assert result.returncode == 1 and "dependency cycle" in err and named in err, err
    assert not (daemon.root / "batches" / "c1.json").exists()


def test_a_cycle_through_a_registered_batch_is_refused(daemon: Daemon) -> None:
    first = daemon.base / "x1.json"
    first.write_bytes(_manifest("x1", [_lane("a", "x2:b")]))
    assert daemon.ctl("register-batch", "--file", str(first)).returncode == 0
    second = daemon.base / "x2.json"
    second.write_bytes(_manifest("x2", [_lane("b", "x1:a")]))
    result = daemon.ctl("register-batch", "--file", str(second))
    assert result.returncode == 1
    assert "x2:b -> x1:a -> x2:b" in result.stderr.decode()


# ---- 10. text output cannot be spoofed; crashes leave no litter; new dirs are durable -------


def test_control_and_bidi_characters_are_escaped_in_text_and_verbatim_in_json(daemon: Daemon) -> None:
    branch = "main\nclaimed acme/widgets#2 by ghost\t\x1b[2J\u202eevil"
    assert daemon.ctl("claim", "--agent-id", "a", "--repo", "acme/widgets", "--target", "1",
                      "--branch", branch).returncode == 0
    text = daemon.ctl("status").stdout.decode()
    assert "claimed acme/widgets#2 by ghost" not in text.splitlines()
    assert "main\\x0aclaimed" in text and "\\u202e" in text and "\x1b" not in text
    stored = json.loads((daemon.root / "claims/acme/widgets/1.json").read_text())
    assert stored["branch"] == branch
    assert json.loads(daemon.ctl("status", "--json").stdout)["claims"][0]["branch"] == branch


def test_a_dead_writers_temp_files_are_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    from agentcoordd.store.local import LocalStore

    root = tmp_path / "root"
    (root / "claims").mkdir(parents=True)
    dead = subprocess.run([PYTHON, "-c", "import os; print(os.getpid())"], capture_output=True)
    dead_pid = int(dead.stdout)
    stale = root / "claims" / f".1.json.tmp-{dead_pid}-abcd1234"
    live = root / "claims" / f".2.json.tmp-{os.getpid()}-abcd1234"
    young = root / "claims" / f".3.json.tmp-{dead_pid}-00000000"
    foreign = root / "claims" / ".agent-coord-ruby-tmp"
    for path in (stale, live, young, foreign):
        path.write_text("{")
    old = time.time() - 600
    for path in (stale, live, foreign):
        os.utime(path, (old, old))
    LocalStore(root).write_sync("heartbeats/a.json", {"agent_id": "a"}, None)
    assert not stale.exists() and live.exists() and young.exists() and foreign.exists()


def test_a_new_directory_is_synced_into_its_parent(tmp_path: Path, monkeypatch: Any) -> None:
    from agentcoordd.store import local

    synced: list[str] = []
    real = local.fsync_dir

    def recording(directory: Any) -> None:
        synced.append(os.fspath(directory))
        real(directory)

    monkeypatch.setattr(local, "fsync_dir", recording)
    root = tmp_path / "root"
    root.mkdir()
    local.LocalStore(root).write_sync("claims/acme/widgets/1.json", {"v": 1}, None)
    for parent in (root, root / "claims", root / "claims/acme"):
        assert str(parent) in synced
