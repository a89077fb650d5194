"""Fixtures: a real agentcoordd per test (tests/integration helpers), one that
runs as an unprivileged user (so permission bits are enforced even when the
suite runs as root, as in CI: `agentcoord-other`), and a Worker under `wrangler dev` for the HTTP
cases (tests/worker_fixture.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.conftest import daemon, daemon_factory, short_dir  # noqa: F401 - fixtures
from integration.helpers import PYTHON, Daemon, make_daemon, wait_for_socket

# Tokens provisioned on the doctor's own Worker: name -> (read, write) scopes.
DOCTOR_MACHINES: dict[str, tuple[list[str], list[str]] | None] = {
    "dr-all": None,
    "dr-events": (["events"], ["events"]),
    "dr-record": (["heartbeats/dr-agent.json"], ["heartbeats/dr-agent.json"]),
    "dr-revoked": None,
    "dr-widgets": (["claims/acme/widgets"], ["claims/acme/widgets"]),
}


class UnprivilegedDaemon(Daemon):
    """The daemon and every ctl call run as `agentcoord-other` when the suite runs as root
    (tests/conftest.py `permission_bits_apply`), as the suite's user otherwise."""

    prefix: list[str]

    def start(self, *args: str) -> subprocess.Popen:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, PYTHON, "-m", "agentcoordd.daemon.main", "--foreground",
                 "--socket", str(self.socket), "--state-dir", str(self.state_dir),
                 "--log-level", "debug", *args],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                env=self.daemon_env(),
            )
        wait_for_socket(self.socket, self.proc)
        return self.proc

    def ctl(self, *args: str, env: dict[str, str] | None = None, input: bytes | None = None,
            timeout: float = 30, unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        full = self.env(**(env or {}))
        for name in unset:
            full.pop(name, None)
        return subprocess.run([*self.prefix, PYTHON, "-m", "agentcoordctl.cli", *args], env=full,
                              input=input, capture_output=True, timeout=timeout,
                              cwd=str(self.base))


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    for current, dirs, files in os.walk(path):
        os.chown(current, uid, gid)
        for name in dirs + files:
            os.lchown(os.path.join(current, name), uid, gid)


@pytest.fixture
def unprivileged_daemon(permission_bits_apply: list[str]) -> Iterator[UnprivilegedDaemon]:
    """Started on demand (`d.start()`) so a test can arrange files first; call
    `d.hand_over()` after arranging to give the tree to the unprivileged user."""
    base = Path(tempfile.mkdtemp(prefix="acdr.", dir="/tmp"))
    made = make_daemon(base)
    d = UnprivilegedDaemon(**{k: getattr(made, k) for k in
                              ("base", "socket", "state_dir", "root", "log_path")})
    d.prefix = permission_bits_apply
    if d.prefix:
        uid = int(d.prefix[d.prefix.index("--reuid") + 1])
        gid = int(d.prefix[d.prefix.index("--regid") + 1])
        os.chmod(base, 0o755)

        def hand_over() -> None:
            _chown_tree(base, uid, gid)
    else:
        def hand_over() -> None:
            return None
    d.hand_over = hand_over  # type: ignore[attr-defined]
    try:
        yield d
    finally:
        d.stop()
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def doctor_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Our Worker with the doctor's machines; only tests/doctor writes to it."""
    from worker_fixture import launch_worker

    with launch_worker(tmp_path_factory.mktemp("doctor-worker"), DOCTOR_MACHINES) as server:
        yield server
