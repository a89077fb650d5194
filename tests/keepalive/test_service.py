"""systemd socket activation + sd_notify, `service install|uninstall|status`, `bootstrap`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from integration.helpers import PYTHON, Daemon

from .support import ctl

REPO = Path(__file__).resolve().parents[2]
# What systemd does: the listening socket as fd 3, LISTEN_FDS=1, LISTEN_PID=<the daemon's pid>.
ACTIVATE = (
    "import os, sys\n"
    "os.dup2(int(sys.argv[1]), 3)\n"
    "os.environ['LISTEN_FDS'] = '1'\n"
    "os.environ['LISTEN_PID'] = str(os.getpid())\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'agentcoordd.daemon.main', *sys.argv[2:]])\n"
)


def _notifications(sock: socket.socket, until: str, timeout: float = 10.0) -> list[str]:
    sock.settimeout(timeout)
    seen: list[str] = []
    while not any(until in m for m in seen):
        seen.append(sock.recv(4096).decode())
    return seen


def test_socket_activation_serves_the_inherited_socket_and_notifies_systemd(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory("sa")
    d.socket.parent.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(d.socket))
    listener.listen(16)
    inode = os.stat(d.socket).st_ino
    notify_path = d.base / "notify"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    env = {**d.daemon_env(), "NOTIFY_SOCKET": str(notify_path), "WATCHDOG_USEC": "1000000"}
    with open(d.log_path, "ab") as log:
        d.proc = subprocess.Popen(
            [PYTHON, "-c", ACTIVATE, str(listener.fileno()), "--foreground", "--socket", str(d.socket),
             "--state-dir", str(d.state_dir)],
            pass_fds=(listener.fileno(),), env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=log)
    try:
        messages = _notifications(notify, "READY=1")
        assert any(f"MAINPID={d.proc.pid}" in m for m in messages)
        listener.close()  # only the daemon holds it now
        result = ctl(d, "heartbeat", "--agent-id", "activated", "--ttl", "5", "--keep-alive")
        assert result.returncode == 0, result.stderr
        assert os.stat(d.socket).st_ino == inode  # it served our socket, never bound its own
        later = _notifications(notify, "WATCHDOG=1", timeout=5.0)
        later += _notifications(notify, "STATUS=1 keep-alive lanes", timeout=10.0)
        assert any("backends: local ok" in m for m in later)
        d.proc.send_signal(signal.SIGTERM)
        assert any("STOPPING=1" in m for m in _notifications(notify, "STOPPING=1"))
        assert d.proc.wait(15) == 0
        assert os.path.exists(d.socket)  # systemd's socket unit owns the path: left alone
    finally:
        notify.close()
        listener.close()


def _rendered(kind: str, home: Path, env_file: Path, python: str) -> dict[Path, str]:
    templates = REPO / "service"
    log = home / ".local" / "state" / "agentcoord" / "agentcoordd.log"
    if kind == "systemd":
        names = {home / ".config/systemd/user" / n: templates / "systemd" / n
                 for n in ("agentcoordd.socket", "agentcoordd.service")}
    else:
        names = {home / "Library/LaunchAgents/dev.agentcoord.agentcoordd.plist":
                 templates / "launchd" / "dev.agentcoord.agentcoordd.plist"}
    return {dest: src.read_text().replace("@PYTHON@", python).replace("@ENV_FILE@", str(env_file))
            .replace("@LOG@", str(log)) for dest, src in names.items()}


def _service(tmp_path: Path, *args: str, path_dir: Path | None = None,
             **extra: str) -> subprocess.CompletedProcess:
    env = {"HOME": str(tmp_path), "PATH": f"{path_dir}:{os.environ['PATH']}" if path_dir
           else os.environ["PATH"], "RECORD": str(tmp_path / "calls"), **extra}
    return subprocess.run([PYTHON, "-m", "agentcoordctl.cli", "service", *args], env=env,
                          capture_output=True, timeout=30)


@pytest.mark.parametrize("kind", ["systemd", "launchd"])
def test_service_install_dry_run_prints_the_rendered_files_and_commands(tmp_path: Path, kind: str) -> None:
    env_file = tmp_path / "coord.env"
    result = _service(tmp_path, "install", "--dry-run", "--kind", kind, "--env-file", str(env_file))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    expected: list[str] = []
    for dest, text in _rendered(kind, tmp_path, env_file, PYTHON).items():
        expected.append(f"write {dest}")
        expected.extend("    " + line for line in text.splitlines())
    body = [line for line in lines if not line.startswith(("note:", "warning:", "run "))]
    assert body == expected
    assert "@PYTHON@" not in result.stdout.decode() and PYTHON in result.stdout.decode()
    runs = [line for line in lines if line.startswith("run ")]
    if kind == "systemd":
        assert runs == ["run systemctl --user daemon-reload",
                        "run systemctl --user enable --now agentcoordd.socket"]
    else:
        assert runs == [f"run launchctl bootstrap gui/{os.getuid()} "
                        f"{tmp_path}/Library/LaunchAgents/dev.agentcoord.agentcoordd.plist"]
    assert not (tmp_path / ".config" / "systemd").exists()
    assert not (tmp_path / "Library").exists()


# A user manager that answers: is-system-running says "running", is-active/is-enabled
# answer for the socket; everything else succeeds. `fail` makes that subcommand exit 1.
STAND_IN = """#!/bin/sh
echo "{name} $*" >> "$RECORD"
case "$2" in
  is-system-running) echo running ;;
  is-active) echo active ;;
  is-enabled) echo enabled ;;
  {fail}) echo "Failed to {fail} unit: Unit file agentcoordd.socket does not exist." >&2; exit 1 ;;
esac
"""


def _stand_ins(tmp_path: Path, fail: str = "never") -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("systemctl", "launchctl"):
        script = bin_dir / name
        script.write_text(STAND_IN.format(name=name, fail=fail))
        script.chmod(0o755)
    return bin_dir


MANAGER_CHECK = "systemctl --user is-system-running"


def test_service_install_and_uninstall_run_systemctl_with_stand_ins(tmp_path: Path) -> None:
    bin_dir = _stand_ins(tmp_path)
    env_file = tmp_path / "coord.env"
    env_file.write_text("AGENT_COORD_MACHINE_ID=m1\n")
    env_file.chmod(0o644)
    installed = _service(tmp_path, "install", "--kind", "systemd", "--env-file", str(env_file),
                         path_dir=bin_dir)
    assert installed.returncode == 0, installed.stderr
    assert b"warning: env file" in installed.stdout and b"chmod 600" in installed.stdout
    for dest, text in _rendered("systemd", tmp_path, env_file, PYTHON).items():
        assert dest.read_text() == text
    status = _service(tmp_path, "status", "--kind", "systemd", path_dir=bin_dir)
    assert status.returncode == 0
    removed = _service(tmp_path, "uninstall", "--kind", "systemd", path_dir=bin_dir)
    assert removed.returncode == 0
    assert not (tmp_path / ".config/systemd/user/agentcoordd.service").exists()
    assert (tmp_path / "calls").read_text().splitlines() == [
        MANAGER_CHECK,
        "systemctl --user daemon-reload",
        "systemctl --user enable --now agentcoordd.socket",
        MANAGER_CHECK,
        "systemctl --user status --no-pager agentcoordd.socket agentcoordd.service",
        MANAGER_CHECK,
        "systemctl --user disable --now agentcoordd.socket agentcoordd.service",
        "systemctl --user daemon-reload",
    ]


def test_service_install_bootstraps_the_launchd_agent_with_a_stand_in(tmp_path: Path) -> None:
    bin_dir = _stand_ins(tmp_path)
    result = _service(tmp_path, "install", "--kind", "launchd", path_dir=bin_dir)
    assert result.returncode == 0, result.stderr
    plist = tmp_path / "Library/LaunchAgents/dev.agentcoord.agentcoordd.plist"
    assert plist.exists()
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"launchctl bootstrap gui/{os.getuid()} {plist}"]


def test_a_failing_enable_step_exits_2_and_removes_the_units_it_wrote(tmp_path: Path) -> None:
    bin_dir = _stand_ins(tmp_path, fail="enable")
    result = _service(tmp_path, "install", "--kind", "systemd", path_dir=bin_dir)
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        "error: `systemctl --user enable --now agentcoordd.socket` exited 1: "
        "Failed to enable unit: Unit file agentcoordd.socket does not exist."]
    assert b"remove " in result.stdout and b"(install failed)" in result.stdout
    assert list((tmp_path / ".config" / "systemd" / "user").iterdir()) == []


NO_BUS = "#!/bin/sh\necho \"$*\" >> \"$RECORD\"\necho 'Failed to connect to bus: No medium found' >&2\nexit 1\n"


def _no_user_manager(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(NO_BUS)
    (bin_dir / "systemctl").chmod(0o755)
    return bin_dir


def test_install_without_a_user_manager_says_what_to_do_in_one_line_and_writes_nothing(
        tmp_path: Path) -> None:
    bin_dir = _no_user_manager(tmp_path)
    result = _service(tmp_path, "install", "--kind", "systemd", path_dir=bin_dir,
                      XDG_RUNTIME_DIR=str(tmp_path / "run"))
    assert result.returncode == 2
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith(f"error: no systemd user manager for this user (no {tmp_path}/run/bus)")
    assert "loginctl enable-linger" in line
    assert not (tmp_path / ".config" / "systemd").exists()
    assert (tmp_path / "calls").read_text().splitlines() == ["--user is-system-running"]


def test_uninstall_exits_2_when_a_systemctl_step_fails(tmp_path: Path) -> None:
    bin_dir = _stand_ins(tmp_path, fail="disable")
    assert _service(tmp_path, "install", "--kind", "systemd", path_dir=bin_dir).returncode == 0
    removed = _service(tmp_path, "uninstall", "--kind", "systemd", path_dir=bin_dir)
    assert removed.returncode == 2
    assert b"error: `systemctl --user disable --now agentcoordd.socket agentcoordd.service` exited 1" \
        in removed.stderr
    assert not (tmp_path / ".config/systemd/user/agentcoordd.socket").exists()
    again = _service(tmp_path, "uninstall", "--kind", "systemd", path_dir=bin_dir)
    assert again.returncode == 0 and again.stdout.startswith(b"not installed: no ")


def test_uninstall_without_a_user_manager_removes_the_units_and_exits_2(tmp_path: Path) -> None:
    units = tmp_path / ".config/systemd/user"
    units.mkdir(parents=True)
    (units / "agentcoordd.socket").write_text("[Socket]\n")
    removed = _service(tmp_path, "uninstall", "--kind", "systemd", path_dir=_no_user_manager(tmp_path))
    assert removed.returncode == 2
    assert removed.stderr.decode().startswith("error: unit files removed but not disabled: no systemd user manager")
    assert not (units / "agentcoordd.socket").exists()


def test_status_json_reports_units_and_exits_0_when_running(tmp_path: Path) -> None:
    import json

    bin_dir = _stand_ins(tmp_path)
    assert _service(tmp_path, "install", "--kind", "systemd", path_dir=bin_dir).returncode == 0
    status = _service(tmp_path, "status", "--json", "--kind", "systemd", path_dir=bin_dir)
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert (report["kind"], report["user_manager"], report["running"]) == ("systemd", True, True)
    assert [(u["unit"], u["installed"], u["active"], u["enabled"]) for u in report["units"]] == [
        ("agentcoordd.socket", True, "active", "enabled"), ("agentcoordd.service", True, "active", "enabled")]


def test_status_json_without_a_user_manager_exits_2_with_the_reason(tmp_path: Path) -> None:
    import json

    status = _service(tmp_path, "status", "--json", "--kind", "systemd", path_dir=_no_user_manager(tmp_path))
    assert status.returncode == 2
    report = json.loads(status.stdout)
    assert report["user_manager"] is False and report["running"] is False
    assert report["error"].startswith("no systemd user manager")
    assert [u["installed"] for u in report["units"]] == [False, False]


def test_units_go_under_xdg_config_home_when_it_is_set(tmp_path: Path) -> None:
    bin_dir = _stand_ins(tmp_path)
    config = tmp_path / "xdg"
    result = _service(tmp_path, "install", "--kind", "systemd", path_dir=bin_dir, XDG_CONFIG_HOME=str(config))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (config / "systemd" / "user").iterdir()) == sorted(
        ["agentcoordd.socket", "agentcoordd.service"])
    assert not (tmp_path / ".config").exists()
    assert f"--env-file {config}/agent-coord/env".encode() in result.stdout or \
        f"{config}/agent-coord/env".encode() in result.stdout


def test_bootstrap_links_both_commands_and_is_idempotent(tmp_path: Path) -> None:
    profile = tmp_path / ".bashrc"
    args = [PYTHON, "-m", "agentcoordctl.cli", "bootstrap", "--install-dir", str(tmp_path / "bin"),
            "--profile", str(profile)]
    env = {"HOME": str(tmp_path), "PATH": os.environ["PATH"]}
    first = subprocess.run(args, env=env, capture_output=True, timeout=30)
    second = subprocess.run(args, env=env, capture_output=True, timeout=30)
    assert first.returncode == 0 and second.returncode == 0, first.stderr
    for name in ("agentcoordctl", "agent-coord"):
        link = tmp_path / "bin" / name
        assert link.is_symlink() and os.readlink(link) == str(Path(sys.executable).parent / "agentcoordctl")
    assert b"linked" in first.stdout and b"appended PATH line" in first.stdout
    assert b"linked" not in second.stdout and b"unchanged" in second.stdout
    assert profile.read_text().count(f'export PATH="{tmp_path / "bin"}:$PATH"') == 1
    version = subprocess.run([str(tmp_path / "bin" / "agent-coord"), "--help"], capture_output=True,
                             env=env, timeout=30)
    assert version.returncode == 0
