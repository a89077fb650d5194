"""A wait whose slice the daemon has to cut off (the backend froze mid-read) goes on
without printing a false alarm, and ends with the answer once the backend is back."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from integration.helpers import PYTHON
from store.etcd_cluster import running_cluster

from .conftest import NO_LOCAL, EtcdDaemon, new_prefix


def test_a_wait_through_a_frozen_backend_prints_no_unknown_line_and_ends_ready(
        daemon_factory: Any, short_dir: Path) -> None:
    with running_cluster(short_dir / "etcd") as cluster:
        node = EtcdDaemon(daemon_factory(), cluster.endpoints, new_prefix())
        node.daemon.start()
        manifest = node.daemon.base / "batch.json"
        manifest.write_text(json.dumps({"batch_id": "b-frozen", "repo": "acme/w", "lanes": [
            {"name": "api", "owner": "pool", "pool": True, "targets": ["1"]}]}))
        assert node.ctl("register-batch", "--file", str(manifest)).returncode == 0
        env = node.daemon.env(**node.caller_env)
        for name in NO_LOCAL:
            env.pop(name, None)
        cluster.freeze(0)  # every read now hangs
        try:
            waiter = subprocess.Popen(
                [PYTHON, "-m", "agentcoordctl.cli", "wait", "--until-ready", "--batch-id", "b-frozen",
                 "--timeout", "120", "--interval", "0.2"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(node.daemon.base))
            time.sleep(4)  # the first slice (a check with a 1 s budget) has been cut off
            assert waiter.poll() is None
        finally:
            cluster.freeze(0, frozen=False)
        stdout, stderr = waiter.communicate(timeout=90)
    assert waiter.returncode == 0, stderr
    assert stdout.decode().startswith("ready: lane api of b-frozen is ready")
    assert b"UNKNOWN" not in stderr and b"timed out" not in stderr, stderr
