"""scripts/test-all and the ci-install scripts: every apt-get waits for the dpkg
lock, a failing step is named, an install already done is skipped, and a
non-root user without sudo is told what to run (the README's command 2)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STEPS = REPO / "scripts" / "install-steps.sh"
INSTALLERS = ["scripts/test-all", "tests/store/etcd-ci-install.sh", "worker/ci-install.sh",
              "tests/dashboard/ci-install.sh"]


def bash(script: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", f". {STEPS}\n{script}"], cwd=cwd,
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("path", INSTALLERS)
def test_every_apt_get_waits_for_the_dpkg_lock(path: str) -> None:
    text = (REPO / path).read_text()
    assert ". " in text and "install-steps.sh" in text
    commands = [line for line in text.splitlines()
                if not line.lstrip().startswith(("#", "echo")) and re.search(r"\bapt-get\b", line)
                and "step " not in line]
    assert commands == [], f"{path}: apt-get without apt_get (no lock timeout): {commands}"
    assert "apt_get " in text


def test_apt_get_passes_the_lock_timeout() -> None:
    defined = bash("declare -f apt_get")
    assert "apt-get -o DPkg::Lock::Timeout=300" in defined.stdout


def test_a_failing_step_says_which_one_and_keeps_its_status() -> None:
    done = bash("STEP_PREFIX=scripts/test-all\nstep etcd bash -c 'exit 100'\necho not reached")
    assert done.returncode == 100
    assert done.stderr.splitlines() == [
        "scripts/test-all: step 'etcd' failed (exit 100): bash -c exit 100"]
    assert "not reached" not in done.stdout
    assert bash("step ok true\necho after").stdout == "after\n"


def test_an_install_is_redone_only_when_its_input_is_newer(tmp_path: Path) -> None:
    lock = tmp_path / "package-lock.json"
    lock.write_text("{}")
    stamp = tmp_path / "node_modules" / ".agentcoord-installed"
    check = f"if stale {stamp} {lock}; then echo stale; else echo fresh; fi"
    assert bash(check).stdout == "stale\n"  # never installed
    assert bash(f"touch_stamp {stamp}").returncode == 0
    os.utime(lock, (1_000_000, 1_000_000))
    assert bash(check).stdout == "fresh\n"
    os.utime(lock, None)
    os.utime(stamp, (1_000_000, 1_000_000))
    assert bash(check).stdout == "stale\n"  # the lock file changed since


def test_the_installers_skip_what_is_done() -> None:
    test_all = (REPO / "scripts" / "test-all").read_text()
    assert 'stale "$venv_stamp" pyproject.toml' in test_all
    worker = (REPO / "worker" / "ci-install.sh").read_text()
    assert '! stale "$stamp" package-lock.json' in worker


def test_non_root_without_sudo_is_told_to_run_it_as_root(other_user: list[str]) -> None:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
    if any(Path(d, "sudo").exists() for d in ("/usr/bin", "/bin")):
        pytest.skip("sudo is installed here: scripts/test-all would re-run itself under it")
    done = subprocess.run([*other_user, str(REPO / "scripts" / "test-all")], env=env,
                          capture_output=True, text=True, timeout=30, cwd="/tmp")
    assert done.returncode == 1
    assert "run it as root (there is no sudo here)" in done.stderr
    assert "scripts/test-all --quick" in done.stderr


def test_readme_gives_both_spellings_of_command_2() -> None:
    readme = (REPO / "README.md").read_text()
    assert "\nscripts/test-all      " in readme and "sudo scripts/test-all" in readme
