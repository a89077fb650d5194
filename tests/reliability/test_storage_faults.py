"""Storage faults: a read-only state root, a full disk, a record truncated by
hand. Each is a clear exit 2 naming the path; no other record is touched.

CI runs as root, so the faults are made in ways root cannot bypass: the
daemon runs as `agentcoord-other` (setpriv, tests/conftest.py) for the read-only
root, and with RLIMIT_FSIZE (prlimit) for the full disk. Never skipped in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from integration.helpers import PYTHON, Daemon, wait_for_socket

CLAIM = ("claim", "--repo", "acme/widgets")


def _records(root: Path) -> dict[str, bytes]:
    out = {}
    for current, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".json"):
                full = Path(current) / name
                out[str(full.relative_to(root))] = full.read_bytes()
    return out


def test_read_only_state_root_is_exit_2_naming_the_path(unprivileged_daemon: Any) -> None:
    d = unprivileged_daemon
    d.hand_over()
    d.start()
    assert d.ctl(*CLAIM, "--target", "1", "--agent-id", "a1").returncode == 0
    before = _records(d.root)
    for current, dirs, files in os.walk(d.root):  # the operator makes the root read-only
        os.chown(current, 0, 0)
        os.chmod(current, 0o555)
    result = d.ctl(*CLAIM, "--target", "2", "--agent-id", "a2")
    error = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2
    assert len(error) == 1 and "claims/acme/widgets/2.json" in error[0] and str(d.root) in error[0]
    assert _records(d.root) == before  # the other records are untouched
    assert d.ctl("version").returncode == 0  # the daemon is fine


def test_full_disk_is_exit_2_naming_the_path_and_leaves_no_partial_record(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory()
    # Every file the daemon writes is capped at 16 KiB (RLIMIT_FSIZE; root cannot bypass it):
    # a bigger record cannot be written, exactly like a full disk.
    prlimit = shutil.which("prlimit")
    assert prlimit, "util-linux prlimit is required"
    def start_capped(*args: str) -> Any:
        with open(d.log_path, "ab") as log:
            d.proc = subprocess.Popen(
                [prlimit, "--fsize=16384", PYTHON, "-m", "agentcoordd.daemon.main", "--foreground",
                 "--socket", str(d.socket), "--state-dir", str(d.state_dir), "--log-level",
                 "error"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                # No bytecode: under the cap Python's .pyc writes come out short and a later
                # import of the truncated file fails (marshal data too short).
                env={**d.daemon_env(), "PYTHONDONTWRITEBYTECODE": "1"})
        wait_for_socket(d.socket, d.proc)
        return d.proc

    d.start = start_capped  # type: ignore[method-assign]
    d.start()
    assert d.ctl(*CLAIM, "--target", "1", "--agent-id", "a1", "--batch-id", "b1").returncode == 0
    before = _records(d.root)
    big = ["--message", "x" * 8000, "--thread-handle", "t" * 8000, "--chat-handle", "c" * 8000]
    result = d.ctl("record-event", "--batch-id", "b1", "--type", "note", *big)
    error = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(error) == 1 and "events/b1/" in error[0] and "too large" in error[0].lower()
    assert _records(d.root) == before
    leftovers = [n for _c, _d, files in os.walk(d.root) for n in files if ".tmp-" in n]
    assert leftovers == []
    assert d.ctl(*CLAIM, "--target", "2", "--agent-id", "a2").returncode == 0  # small writes go on


def test_truncated_record_is_exit_2_naming_it_and_other_records_still_serve(daemon: Daemon) -> None:
    for target in ("1", "2"):
        assert daemon.ctl(*CLAIM, "--target", target, "--agent-id", f"a{target}").returncode == 0
    torn = daemon.root / "claims" / "acme" / "widgets" / "1.json"
    torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])  # truncated by hand
    intact = (daemon.root / "claims" / "acme" / "widgets" / "2.json").read_bytes()

    result = daemon.ctl(*CLAIM, "--target", "1", "--agent-id", "b1")
    error = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2
    assert len(error) == 1 and "claims/acme/widgets/1.json" in error[0]
    other = daemon.ctl("status", "--repo", "acme/widgets", "--target", "2", "--json")
    assert other.returncode == 0
    assert (daemon.root / "claims" / "acme" / "widgets" / "2.json").read_bytes() == intact
    json.loads(intact)
