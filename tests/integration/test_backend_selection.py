"""Backend selection and identity, through the real daemon (DESIGN.md)."""

from __future__ import annotations

import json

from agentcoordd import protocol as p

from .helpers import Daemon, local_request

CLAIM = ("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1")


def test_zero_config_uses_the_xdg_state_root_with_the_local_mode_notice(daemon: Daemon) -> None:
    result = daemon.ctl(*CLAIM, unset=("AGENT_COORD_STATE_ROOT",))
    assert result.returncode == 0, result.stderr
    implicit = daemon.base / "xdgstate" / "agent-coordination"
    assert (implicit / "claims/acme/widgets/1.json").exists()
    lines = result.stderr.decode().splitlines()
    assert lines[0] == f"notice: local mode — single-machine only; state root: {implicit}"
    assert lines[1:] == [line for line in lines[1:] if line.startswith("fencing token ")]


def test_relative_xdg_state_home_falls_back_to_home_local_state(daemon: Daemon) -> None:
    result = daemon.ctl(*CLAIM, env={"XDG_STATE_HOME": "relative/dir"},
                        unset=("AGENT_COORD_STATE_ROOT",))
    assert result.returncode == 0, result.stderr
    assert (daemon.base / "home/.local/state/agent-coordination/claims/acme/widgets/1.json").exists()


def test_legacy_backend_selectors_are_refused_with_exit_2(daemon: Daemon) -> None:
    flag = daemon.ctl(*CLAIM, "--backend", "acme/state", unset=("AGENT_COORD_STATE_ROOT",))
    env = daemon.ctl(*CLAIM, env={"AGENT_COORD_BACKEND": "acme/state"},
                     unset=("AGENT_COORD_STATE_ROOT",))
    for result in (flag, env):
        assert result.returncode == 2
        assert "legacy GitHub backend not supported; use --api-url or --etcd-endpoints" in \
            result.stderr.decode()


def test_state_root_and_api_url_flags_use_the_local_root_with_a_warning(daemon: Daemon) -> None:
    """agent-coord's rule for exactly this pair (recorded: env_backend_selection)."""
    result = daemon.ctl(*CLAIM, "--state-root", str(daemon.root), "--api-url", "http://127.0.0.1:9")
    assert result.returncode == 0, result.stderr
    assert ("warning: --api-url and --state-root are both set; using the local backend."
            in result.stderr.decode())
    assert (daemon.root / "claims").is_dir()


def test_an_etcd_flag_with_another_selector_is_a_usage_error(daemon: Daemon) -> None:
    result = daemon.ctl(*CLAIM, "--state-root", str(daemon.root), "--etcd-endpoints",
                        "http://127.0.0.1:9")
    assert result.returncode == 1
    assert "choose one backend" in result.stderr.decode()


def test_explicit_state_root_wins_over_environment(daemon: Daemon) -> None:
    other = daemon.base / "other"
    other.mkdir()
    result = daemon.ctl(*CLAIM, "--state-root", str(other))
    assert result.returncode == 0, result.stderr
    assert (other / "claims/acme/widgets/1.json").exists()
    assert not (daemon.root / "claims").exists()


def test_consumer_env_file_configures_the_backend_for_implicit_calls(daemon: Daemon) -> None:
    configured = daemon.base / "fleet-root"
    configured.mkdir()
    env_file = daemon.base / "xdgconfig" / "agent-coord" / "env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text(f'# fleet\nexport AGENT_COORD_STATE_ROOT="{configured}"\n'
                        "AGENT_COORD_MACHINE_ID=m7\n")
    result = daemon.ctl(*CLAIM, unset=("AGENT_COORD_STATE_ROOT",))
    assert result.returncode == 0, result.stderr
    assert "local mode" not in result.stderr.decode()
    record = json.loads((configured / "claims/acme/widgets/1.json").read_text())
    assert record["machine_id"] == "m7"  # the machine's own id, from its env file


def test_local_opt_in_beats_the_configured_backend(daemon: Daemon) -> None:
    env_file = daemon.base / "coord.env"
    env_file.write_text("AGENT_COORD_API_URL=http://127.0.0.1:9\n")
    for value, expect in (("yes", 0), ("TRUE", 0), ("0", 2)):
        result = daemon.ctl("heartbeat", "--agent-id", f"agent-{value}",
                            env={"AGENT_COORD_ENV_FILE": str(env_file), "AGENT_COORD_LOCAL": value},
                            unset=("AGENT_COORD_STATE_ROOT",), timeout=60)
        assert result.returncode == expect, (value, result.stderr)


def test_unreadable_env_file_refuses_writes_naming_the_file(daemon: Daemon) -> None:
    env_file = daemon.base / "broken.env"
    env_file.write_bytes(b"# not text below\n\xff\xfe\n")  # a non-assignment line is skipped; this is unusable
    result = daemon.ctl(*CLAIM, env={"AGENT_COORD_ENV_FILE": str(env_file)},
                        unset=("AGENT_COORD_STATE_ROOT",))
    assert result.returncode == 2
    assert str(env_file) in result.stderr.decode()


def test_caller_machine_id_wins_and_session_comes_only_from_the_caller(daemon: Daemon) -> None:
    with daemon.raw() as client:
        client.hello()
        reply = client.call(local_request(daemon, p.Heartbeat(agent_id="agent-a"),
                                          AGENT_COORD_MACHINE_ID="m1", CODEX_THREAD_ID="thr-9"))
    assert reply.exit_code == 0, reply.error
    record = json.loads((daemon.root / "heartbeats/agent-a.json").read_text())
    assert (record["machine_id"], record["session_id"], record["session_source"]) == (
        "m1", "thr-9", "codex_thread_id")


def test_tokens_never_reach_the_daemon_log(daemon: Daemon) -> None:
    daemon.ctl(*CLAIM, env={"AGENT_COORD_API_URL": "http://127.0.0.1:9",
                            "AGENT_COORD_API_TOKEN": "sekrit-token-123"}, timeout=60)
    daemon.ctl("daemon", "status")
    assert "sekrit-token-123" not in daemon.log()
