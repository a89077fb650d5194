"""A normal (non-editable) install works without the source tree: the wheel
carries everything its commands need (service templates, dashboard files)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed() -> Iterator[tuple[Path, Path]]:
    """(the venv's bin directory, an empty working directory outside the checkout)."""
    base = Path(tempfile.mkdtemp(prefix="acwh.", dir="/tmp"))
    dist = base / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(dist),
                            str(REPO)], capture_output=True, text=True, timeout=600, cwd=base)
    assert built.returncode == 0, built.stderr[-3000:]
    (base / "build.log").write_text(built.stdout + built.stderr)
    (wheel,) = dist.glob("agentcoord-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True, timeout=300)
    subprocess.run([str(base / "venv" / "bin" / "pip"), "install", "--quiet", str(wheel)],
                   check=True, timeout=900, cwd=base)
    work = base / "work"
    work.mkdir()
    yield base / "venv" / "bin", work
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(REPO / "build", ignore_errors=True)  # pip's in-tree build directory


def _ctl(installed: tuple[Path, Path], *args: str) -> subprocess.CompletedProcess[str]:
    bin_dir, work = installed
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"}
    return subprocess.run([str(bin_dir / "agentcoordctl"), *args], env=env, cwd=work,
                          capture_output=True, text=True, timeout=120)


def test_the_installed_package_is_not_the_checkout(installed: tuple[Path, Path]) -> None:
    bin_dir, work = installed
    where = subprocess.run([str(bin_dir / "python"), "-c",
                            "import agentcoordd, agentcoordctl; print(agentcoordd.__file__)"],
                           capture_output=True, text=True, cwd=work, check=True)
    assert str(REPO) not in where.stdout and "site-packages" in where.stdout


@pytest.mark.parametrize("kind", ["systemd", "launchd"])
def test_service_install_dry_run_renders_the_packaged_templates(installed: tuple[Path, Path],
                                                                kind: str) -> None:
    result = _ctl(installed, "service", "install", "--dry-run", "--kind", kind)
    assert result.returncode == 0, result.stderr
    assert "agentcoordd" in result.stdout and "@PYTHON@" not in result.stdout


def test_token_help_and_a_clear_refusal_without_a_worker_project(installed: tuple[Path, Path]) -> None:
    assert _ctl(installed, "token", "--help").returncode == 0
    refused = _ctl(installed, "token", "provision", "m1", "--local", "--all-state")
    assert refused.returncode == 2
    assert "Worker project (wrangler.toml) was not found" in refused.stderr


def test_the_guides_ship_and_print_from_the_wheel(installed: tuple[Path, Path]) -> None:
    result = _ctl(installed, "docs", "fencing")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (REPO / "docs" / "fencing.md").read_text()


def test_the_demo_runs_from_the_wheel(installed: tuple[Path, Path]) -> None:
    result = _ctl(installed, "demo")
    assert result.returncode == 0, result.stderr
    assert "demo complete" in result.stdout


def test_the_mcp_server_ships_and_names_its_extra_when_missing(installed: tuple[Path, Path]) -> None:
    bin_dir, work = installed
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"}
    result = subprocess.run([str(bin_dir / "agentcoord-mcp")], env=env, cwd=work, text=True,
                            capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "pip install 'agentcoord[mcp]'" in result.stderr


def test_the_build_warns_of_nothing_deprecated_or_left_out(installed: tuple[Path, Path]) -> None:
    """The backend is pinned (pyproject's build-system) and its warnings are fixed at their
    cause: `license` as an SPDX string, every data folder a listed package (issue 42)."""
    log = (installed[0].parents[1] / "build.log").read_text()
    assert "Deprecat" not in log and "is absent from the `packages` configuration" not in log


def test_every_package_of_the_checkout_is_listed_and_the_templates_ship_once(
        installed: tuple[Path, Path]) -> None:
    import tomllib
    import zipfile

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {str(d.relative_to(REPO)).replace("/", ".") for top in ("agentcoordd", "agentcoordctl",
               "agentcoordmcp") for d in [REPO / top, *(REPO / top).rglob("*")]
               if d.is_dir() and d.name != "__pycache__"}
    assert on_disk <= listed
    (wheel,) = (installed[0].parents[1] / "dist").glob("agentcoord-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    templates = sorted(n for n in names if n.endswith((".socket", ".service", ".plist")))
    assert templates == ["agentcoord_service/launchd/dev.agentcoord.agentcoordd.plist",
                         "agentcoord_service/systemd/agentcoordd.service",
                         "agentcoord_service/systemd/agentcoordd.socket"]
    assert sorted(p.relative_to(REPO / "service").as_posix() for p in (REPO / "service").rglob("*.*")
                  if p.suffix not in (".py", ".pyc")) == [t.split("/", 1)[1] for t in templates]
