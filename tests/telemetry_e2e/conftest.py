"""Fixtures: a real agentcoordd subprocess and ctl subprocesses (tests/integration/helpers.py)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.helpers import Daemon, make_daemon

BATCH = {"batch_id": "b1", "repo": "acme/widgets", "lanes": [
    {"name": "backend", "owner": "agent-a", "targets": ["1"]},
    {"name": "docs", "owner": "agent-b", "targets": ["2"]},
]}


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    base = Path(tempfile.mkdtemp(prefix="acte.", dir="/tmp"))  # short socket paths
    d = make_daemon(base)
    try:
        d.start()
        yield d
    finally:
        d.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def batch(daemon: Daemon) -> dict:
    """Batch b1 registered, agent-a claiming and heartbeating acme/widgets#1 in it."""
    manifest = daemon.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    assert daemon.ctl("register-batch", "--file", str(manifest)).returncode == 0
    assert daemon.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
                      "--batch-id", "b1").returncode == 0
    assert daemon.ctl("heartbeat", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
                      "--batch-id", "b1").returncode == 0
    return BATCH
