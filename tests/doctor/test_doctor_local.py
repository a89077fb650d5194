"""doctor on the local store, end to end: ctl subprocess -> real daemon -> files.

Outputs are compared with the existing tool's captures field by field
(tests/fixtures/spec-outputs/doctor-*.txt, `<TMP>` = the test's base directory).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from integration.helpers import Daemon

from . import spec_outputs

UNSET_ROOT = ("AGENT_COORD_STATE_ROOT",)


def out(result) -> str:
    return result.stdout.decode()


def err(result) -> str:
    return result.stderr.decode()


def claim(d: Daemon, target: str = "1", **env: str) -> None:
    result = d.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", target,
                   env=env)
    assert result.returncode == 0, err(result)


def stack_check(payload: dict, check_id: str) -> dict:
    (check,) = [c for c in payload["checks"] if c["id"] == check_id]
    return check


# ---- the spec's captures ---------------------------------------------------------


def test_lightweight_json_is_the_spec_report(daemon: Daemon, fixtures_dir: Path) -> None:
    spec = spec_outputs.load(fixtures_dir, "json")
    result = daemon.ctl("doctor", "--json")
    assert result.returncode == spec.exit == 0
    assert json.loads(out(result)) == spec.json(daemon.base)
    assert err(result) == spec.stderr == ""


def test_deep_json_is_the_spec_report_with_environment_identity(daemon: Daemon,
                                                                 fixtures_dir: Path) -> None:
    claim(daemon)
    spec = spec_outputs.load(fixtures_dir, "deep-json")
    result = daemon.ctl("doctor", "--deep", "--json")
    assert result.returncode == spec.exit == 0
    report = json.loads(out(result))
    assert report == spec.json(daemon.base)
    assert list(report) == list(spec.json(daemon.base))  # same key order, too


def test_deep_text_has_the_spec_lines(daemon: Daemon, fixtures_dir: Path) -> None:
    spec = spec_outputs.load(fixtures_dir, "deep-text")
    result = daemon.ctl("doctor", "--deep")
    assert result.returncode == spec.exit == 0
    assert out(result) == spec.text(daemon.base)


def test_lightweight_text_says_lightweight_and_omits_identity(daemon: Daemon) -> None:
    result = daemon.ctl("doctor")
    assert result.returncode == 0
    assert out(result).splitlines() == [
        "agent-coord doctor", "version: 0.1.0", "backend: local", "backend_repo: ",
        f"state_root: {daemon.root}", "mode: lightweight", "status: ok"]


@pytest.mark.parametrize("name,args", [
    ("stack-json-healthy", ("--stack-json", "--deep")),
    ("stack-json-shallow", ("--stack-json",)),
])
def test_stack_json_is_the_component_contract(daemon: Daemon, fixtures_dir: Path, name: str,
                                              args: tuple[str, ...]) -> None:
    claim(daemon)
    spec = spec_outputs.load(fixtures_dir, name)
    result = daemon.ctl("doctor", *args, "--state-root", str(daemon.root), unset=UNSET_ROOT)
    assert result.returncode == spec.exit == 0
    assert json.loads(out(result)) == spec.json(daemon.base)
    assert err(result) == ""


def test_stack_json_missing_root_is_failed_and_never_created(daemon: Daemon,
                                                             fixtures_dir: Path) -> None:
    spec = spec_outputs.load(fixtures_dir, "stack-json-missing-root")
    missing = daemon.base / "missing"
    result = daemon.ctl("doctor", "--stack-json", "--deep", "--state-root", str(missing),
                        unset=UNSET_ROOT)
    assert result.returncode == spec.exit == 2
    assert json.loads(out(result)) == spec.json(daemon.base)
    assert not missing.exists()


def test_stack_json_two_selectors_is_exit_64_with_no_json(daemon: Daemon, fixtures_dir: Path) -> None:
    spec = spec_outputs.load(fixtures_dir, "stack-json-two-selectors")
    result = daemon.ctl("doctor", "--stack-json", "--state-root", str(daemon.root), "--api-url",
                        "http://127.0.0.1:9")
    assert result.returncode == spec.exit == 64
    assert out(result) == spec.stdout == ""
    # Ours names --etcd-endpoints too (docs/compat.md).
    assert err(result).strip() == ("doctor --stack-json requires exactly one of --state-root, "
                                   "--api-url, --etcd-endpoints, or --backend")


@pytest.mark.parametrize("args", [
    ("--stack-json",),  # environment defaults do not satisfy the selector rule
    ("--stack-json", "--no-such-flag", "--state-root", "x"),
    ("--stack-json", "--json", "--state-root", "x"),
    ("--stack-json", "--state-root", "x", "--doctor-prefix", "../etc"),
    ("--stack-json", "--state-root"),  # option without its value
])
def test_stack_json_usage_errors_are_exit_64_with_no_json(daemon: Daemon,
                                                          args: tuple[str, ...]) -> None:
    result = daemon.ctl("doctor", *args)
    assert result.returncode == 64, err(result)
    assert out(result) == ""
    assert err(result).strip()


def test_two_selectors_without_stack_json_is_the_ordinary_usage_error(daemon: Daemon) -> None:
    result = daemon.ctl("doctor", "--state-root", str(daemon.root), "--etcd-endpoints",
                        "http://127.0.0.1:9")
    assert result.returncode == 1
    assert "choose one backend" in err(result)


def test_legacy_backend_is_a_failed_component_with_exit_2(daemon: Daemon) -> None:
    result = daemon.ctl("doctor", "--stack-json", "--deep", "--backend", "acme/state",
                        unset=UNSET_ROOT)
    assert result.returncode == 2
    payload = json.loads(out(result))
    assert payload["status"] == "failed"
    backend = stack_check(payload, "backend.readability")
    assert backend["status"] == "failed"
    assert backend["details"] == {
        "backend": "github", "backend_repo": "acme/state", "backend_url": None,
        "state_root": None,
        "error": "legacy GitHub backend not supported; use --api-url or --etcd-endpoints"}
    assert "--api-url or --etcd-endpoints" in backend["guidance"]
    assert stack_check(payload, "resources.deep")["details"] == {
        "mode": "deep", "reason": "backend_unavailable"}


def test_legacy_backend_json_report_is_status_error_exit_2(daemon: Daemon) -> None:
    result = daemon.ctl("doctor", "--json", "--backend", "acme/state", unset=UNSET_ROOT)
    assert result.returncode == 2
    report = json.loads(out(result))
    assert (report["backend"], report["backend_repo"], report["status"]) == (
        "github", "acme/state", "error")
    assert report["error"].startswith("legacy GitHub backend not supported")


# ---- lightweight and first run -----------------------------------------------------


def test_first_unconfigured_run_initializes_the_zero_config_root(daemon: Daemon) -> None:
    implicit = daemon.base / "xdgstate" / "agent-coordination"
    assert not implicit.exists()
    result = daemon.ctl("doctor", "--json", unset=UNSET_ROOT)
    assert result.returncode == 0, err(result)
    report = json.loads(out(result))
    assert (report["state_root"], report["status"], report["initialized"]) == (
        str(implicit), "ok", True)
    assert implicit.is_dir()
    assert f"notice: local mode — single-machine only; state root: {implicit}" in err(result)
    again = json.loads(out(daemon.ctl("doctor", "--json", unset=UNSET_ROOT)))
    assert "initialized" not in again


def test_explicit_missing_root_is_an_error_and_not_created(daemon: Daemon) -> None:
    missing = daemon.base / "typo"
    result = daemon.ctl("doctor", "--json", "--state-root", str(missing))
    assert result.returncode == 2
    report = json.loads(out(result))
    assert report["status"] == "error"
    assert report["error"] == f"state root does not exist: {missing}"
    assert not missing.exists()


def test_root_that_is_a_file_is_reported(daemon: Daemon) -> None:
    target = daemon.base / "file-root"
    target.write_text("not a directory\n")
    result = daemon.ctl("doctor", "--json", "--state-root", str(target))
    assert result.returncode == 2
    assert json.loads(out(result))["error"] == f"state root is not a directory: {target}"


def test_malformed_record_passes_lightweight_and_fails_deep_naming_it(daemon: Daemon) -> None:
    claim(daemon)
    bad = daemon.root / "heartbeats" / "agent-z.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("{not json\n")
    missing_field = daemon.root / "batches" / "b1.json"
    missing_field.parent.mkdir(parents=True)
    missing_field.write_text('{"lanes": []}\n')

    light = daemon.ctl("doctor", "--json")
    assert light.returncode == 0, out(light)
    assert json.loads(out(light))["status"] == "ok"

    deep = daemon.ctl("doctor", "--deep", "--json")
    assert deep.returncode == 2
    report = json.loads(out(deep))
    assert report["status"] == "error"
    assert report["failing_path"] == "heartbeats/agent-z.json"
    assert report["error"] == "heartbeats: invalid JSON in record heartbeats/agent-z.json"
    families = {f["prefix"]: f for f in report["families"]}
    assert list(families) == ["claims", "heartbeats", "batches", "events", "archive"]
    assert families["claims"] == {"prefix": "claims", "status": "ok", "records": 1}
    assert families["heartbeats"]["status"] == "invalid"
    assert families["heartbeats"]["invalid"] == [
        {"path": "heartbeats/agent-z.json",
         "error": "invalid JSON in record heartbeats/agent-z.json"}]
    assert families["batches"]["failing_path"] == "batches/b1.json"
    assert "missing required field `batch_id`" in families["batches"]["invalid"][0]["error"]

    stack = daemon.ctl("doctor", "--stack-json", "--deep", "--state-root", str(daemon.root))
    assert stack.returncode == 2
    payload = json.loads(out(stack))
    assert stack_check(payload, "backend.readability")["status"] == "healthy"
    resources = stack_check(payload, "resources.deep")
    assert resources["status"] == "failed"
    assert [(f["prefix"], f["path"]) for f in resources["details"]["failures"]] == [
        ("heartbeats", "heartbeats/agent-z.json"), ("batches", "batches/b1.json")]


def test_deep_text_names_the_failing_family_and_path(daemon: Daemon) -> None:
    bad = daemon.root / "claims" / "acme" / "widgets" / "7.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"schema_version": 1}\n')
    lines = out(daemon.ctl("doctor", "--deep")).splitlines()
    assert "status: error" in lines
    assert "failing_path: claims/acme/widgets/7.json" in lines
    assert "claims: invalid (1 records, 1 invalid) claims/acme/widgets/7.json" in lines
    assert "heartbeats: ok (0 records)" in lines


# ---- symlinks below the root fail closed; the root itself may be one ----------------


@pytest.mark.parametrize("planted", [
    "claims",  # a top-level state prefix
    "claims/acme",  # a directory below it
    "claims/acme/widgets/1.json",  # a record
    "archive/claims",  # a directory in the archive
])
def test_symlink_below_the_root_fails_closed_naming_the_path(daemon: Daemon, planted: str) -> None:
    claim(daemon)
    elsewhere = daemon.base / "elsewhere"
    target = daemon.root / planted
    if planted == "archive/claims":
        target.parent.mkdir(parents=True)
        (elsewhere / "acme").mkdir(parents=True)
    elif target.suffix == ".json":
        elsewhere.mkdir()
        (elsewhere / "1.json").write_bytes(target.read_bytes())
        target.unlink()
        elsewhere = elsewhere / "1.json"
    else:
        elsewhere.parent.mkdir(parents=True, exist_ok=True)
        os.rename(target, elsewhere)
    os.symlink(elsewhere, target)

    deep = daemon.ctl("doctor", "--deep", "--json")
    assert deep.returncode == 2
    report = json.loads(out(deep))
    assert report["status"] == "error"
    assert report["failing_path"] == planted
    assert f"symlink below state root refused: {planted}" in report["error"]

    stack = daemon.ctl("doctor", "--stack-json", "--deep", "--state-root", str(daemon.root))
    assert stack.returncode == 2
    checked = json.loads(out(stack))
    backend, resources = stack_check(checked, "backend.readability"), stack_check(checked, "resources.deep")
    if backend["status"] == "failed":  # agent-coord's rule: no backend, no resource evidence
        assert backend["details"]["failing_path"] == planted
        assert resources["status"] == "skipped"
        assert resources["details"]["reason"] == "backend_unavailable"
    else:
        assert resources["status"] == "failed"
        assert planted in [f["path"] for f in resources["details"]["failures"]]


def test_the_root_itself_may_be_a_symlink(daemon: Daemon) -> None:
    claim(daemon)
    link = daemon.base / "root-link"
    os.symlink(daemon.root, link)
    result = daemon.ctl("doctor", "--deep", "--json", "--state-root", str(link))
    assert result.returncode == 0, out(result)
    assert json.loads(out(result))["status"] == "ok"


# ---- --doctor-prefix ----------------------------------------------------------------


def test_doctor_prefix_lists_a_directory_and_reads_a_record(daemon: Daemon) -> None:
    claim(daemon)
    result = daemon.ctl("doctor", "--json", "--doctor-prefix", "claims/acme",
                        "--doctor-prefix", "claims/acme/widgets/1.json")
    assert result.returncode == 0, out(result)
    assert json.loads(out(result))["probes"] == [
        {"prefix": "claims/acme", "method": "walk", "status": "ok"},
        {"prefix": "claims/acme/widgets/1.json", "method": "read", "status": "ok"},
    ]


def test_deep_with_doctor_prefix_audits_only_that_prefix(daemon: Daemon) -> None:
    claim(daemon)
    bad = daemon.root / "heartbeats" / "x.json"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("{")
    result = daemon.ctl("doctor", "--deep", "--json", "--doctor-prefix", "claims")
    assert result.returncode == 0, out(result)
    assert json.loads(out(result))["families"] == [
        {"prefix": "claims", "status": "ok", "records": 1}]


@pytest.mark.parametrize(("prefix", "message"), [
    ("../etc", "unsafe state path: ../etc"),
    ("claims/./x", "unsafe state path: claims/./x"),
    ("bogus", "unknown doctor prefix family: bogus"),
    ("events/.x", "invalid doctor prefix shape: events/.x"),
])
def test_invalid_doctor_prefix_is_a_usage_error(daemon: Daemon, prefix: str, message: str) -> None:
    result = daemon.ctl("doctor", "--doctor-prefix", prefix)
    assert result.returncode == 1
    assert err(result).strip() == message  # agent-coord's words
    assert out(result) == ""


# ---- identity -------------------------------------------------------------------------


def test_deep_reports_the_callers_identity_tuple(daemon: Daemon) -> None:
    result = daemon.ctl("doctor", "--deep", "--json",
                        env={"AGENT_COORD_MACHINE_ID": "m1", "CODEX_THREAD_ID": "thr-9"})
    assert result.returncode == 0
    assert json.loads(out(result))["environment_identity"] == {
        "client_version": "0.1.0", "machine_id": "m1", "session_id": "thr-9",
        "session_source": "codex_thread_id", "token_machine": None,
        "machine_match": "unverified"}


def test_explicit_session_id_wins_over_codex_thread(daemon: Daemon) -> None:
    result = daemon.ctl("doctor", "--deep", env={"AGENT_COORD_SESSION_ID": "run-1",
                                                 "CODEX_THREAD_ID": "thr-9"})
    lines = out(result).splitlines()
    assert "session_id: run-1" in lines
    assert "session_source: agent_coord_session_id" in lines


def test_machine_id_falls_back_to_the_machines_env_file(daemon: Daemon) -> None:
    env_file = daemon.base / "xdgconfig" / "agent-coord" / "env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text("AGENT_COORD_MACHINE_ID=m7\n")
    report = json.loads(out(daemon.ctl("doctor", "--deep", "--json")))
    assert report["environment_identity"]["machine_id"] == "m7"
    stack = json.loads(out(daemon.ctl("doctor", "--stack-json", "--state-root",
                                      str(daemon.root))))
    identity = stack_check(stack, "identity.machine")
    assert (identity["status"], identity["details"]["machine_id"]) == ("skipped", "m7")


def test_invalid_machine_id_fails_the_identity_check(daemon: Daemon) -> None:
    result = daemon.ctl("doctor", "--stack-json", "--state-root", str(daemon.root),
                        env={"AGENT_COORD_MACHINE_ID": "bad id with spaces"})
    assert result.returncode == 2
    identity = stack_check(json.loads(out(result)), "identity.machine")
    assert identity["status"] == "failed"
    assert "AGENT_COORD_MACHINE_ID" in identity["details"]["error"]


# ---- split brain and env files ---------------------------------------------------------


def write_env_file(d: Daemon, text: str) -> Path:
    """`BAD` stands for a line that is not UTF-8 (what makes an env file unusable)."""
    env_file = d.base / "xdgconfig" / "agent-coord" / "env"
    env_file.parent.mkdir(parents=True, exist_ok=True)
    env_file.write_bytes(text.encode().replace(b"BAD", b"\xff\xfe"))
    return env_file


def test_split_brain_env_file_is_reported_with_exit_2(daemon: Daemon) -> None:
    """An env file configures the fleet API but cannot be used: calls land locally."""
    env_file = write_env_file(daemon, "export AGENT_COORD_API_URL=https://fleet.example\n"
                                      "BAD\n")
    result = daemon.ctl("doctor", "--json", unset=UNSET_ROOT)
    assert result.returncode == 2
    report = json.loads(out(result))
    implicit = daemon.base / "xdgstate" / "agent-coordination"
    assert report["backend"] == "local" and report["state_root"] == str(implicit)
    assert report["status"] == "split_brain"
    assert report["split_brain_env_file"] == str(env_file)
    assert report["env_file_errors"] == [{"path": str(env_file),
                                         "error": "line 2 is not UTF-8 text"}]
    text = daemon.ctl("doctor", unset=UNSET_ROOT)
    assert text.returncode == 2
    assert f"split_brain_env_file: {env_file}" in out(text).splitlines()
    assert "status: split_brain" in out(text).splitlines()


@pytest.mark.parametrize("opt_in", [
    {"env": {"AGENT_COORD_LOCAL": "1"}},
    {"env": {"AGENT_COORD_LOCAL": "yes"}},
    {"env": {"AGENT_COORD_STATE_ROOT": "ROOT"}},
    {"args": ("--state-root", "ROOT")},
])
def test_explicit_opt_ins_clear_split_brain(daemon: Daemon, opt_in: dict) -> None:
    write_env_file(daemon, "AGENT_COORD_API_URL=https://fleet.example\nBAD\n")
    env = {k: v.replace("ROOT", str(daemon.root)) for k, v in opt_in.get("env", {}).items()}
    args = tuple(a.replace("ROOT", str(daemon.root)) for a in opt_in.get("args", ()))
    unset = tuple(name for name in UNSET_ROOT if name not in env)
    result = daemon.ctl("doctor", "--json", *args, env=env, unset=unset)
    assert result.returncode == 0, out(result) + err(result)
    report = json.loads(out(result))
    assert report["status"] == "ok"
    assert "split_brain_env_file" not in report
    assert "cannot be used" in err(result)  # the broken file is still mentioned


def test_local_opt_in_zero_is_not_an_opt_in(daemon: Daemon) -> None:
    write_env_file(daemon, "AGENT_COORD_API_URL=https://fleet.example\nBAD\n")
    result = daemon.ctl("doctor", "--json", env={"AGENT_COORD_LOCAL": "0"}, unset=UNSET_ROOT)
    assert result.returncode == 2
    assert json.loads(out(result))["status"] == "split_brain"


def test_unparsable_env_file_without_api_url_is_an_error_naming_it(daemon: Daemon) -> None:
    env_file = write_env_file(daemon, "BAD\n")
    result = daemon.ctl("doctor", "--json", unset=UNSET_ROOT)
    assert result.returncode == 2
    report = json.loads(out(result))
    assert report["status"] == "error"
    assert report["error"] == f"cannot use consumer env file {env_file}: line 1 is not UTF-8 text"


def test_configured_backend_from_a_readable_env_file_is_used_and_named(daemon: Daemon) -> None:
    fleet = daemon.base / "fleet-root"
    fleet.mkdir()
    env_file = write_env_file(daemon, f"AGENT_COORD_STATE_ROOT={fleet}\n")
    result = daemon.ctl("doctor", "--json", "--daemon", unset=UNSET_ROOT)
    assert result.returncode == 0, out(result)
    report = json.loads(out(result))
    assert (report["state_root"], report["status"]) == (str(fleet), "ok")
    configured = report["daemon"]["configured_backend"]
    assert configured == {"kind": "local", "location": str(fleet),
                          "source": f"env file {env_file}", "env_file": str(env_file),
                          "credentials": False}


# ---- daemon unreachable ------------------------------------------------------------


def test_stack_json_with_no_daemon_is_a_failed_component(daemon: Daemon) -> None:
    daemon.stop()
    result = daemon.ctl("doctor", "--stack-json", "--deep", "--state-root", str(daemon.root))
    assert result.returncode == 2
    payload = json.loads(out(result))
    assert payload["status"] == "failed"
    backend = stack_check(payload, "backend.readability")
    assert backend["status"] == "failed"
    assert "agentcoordd is not running" in backend["details"]["error"]
    assert [c["id"] for c in payload["checks"]] == [
        "cli.version", "backend.readability", "resources.deep", "identity.machine"]
