"""Mutual exclusion under contention: many processes claiming the same targets
through the daemon — never two holders at once, no acknowledged write lost."""

from __future__ import annotations

import uuid
from typing import Any

from integration.helpers import Daemon

from .scenarios import contention, http_get

PROCS, ROUNDS, TARGETS = 6, 12, 2  # full size (bench/reliability.py): 32 × 200


def test_local_store_contention_grants_each_target_to_one_holder_at_a_time(daemon: Daemon) -> None:
    figures = contention([(daemon, {}, str(daemon.root))], procs=PROCS, rounds=ROUNDS,
                         targets=TARGETS, batch="cont-b1",
                         exists=lambda path: (daemon.root / path).is_file())
    assert figures["double_grants"] == 0
    assert figures["lost_writes"] == 0, figures["lost_samples"]
    assert figures["errors"] == 0 and figures["release_failures"] == 0, figures["error_samples"]
    assert figures["grants"] > 0 and figures["refused"] > 0  # it really was contended
    assert figures["grants"] + figures["refused"] == PROCS * ROUNDS


def test_two_daemons_on_the_http_backend_never_double_grant(daemon_factory: Any,
                                                             reliability_worker: Any) -> None:
    worker = reliability_worker
    env = {"AGENT_COORD_API_URL": worker.url, "AGENT_COORD_API_TOKEN": worker.tokens["ref-all"]}
    nodes = []
    for name in ("a", "b"):
        d = daemon_factory(name)
        d.start()
        nodes.append((d, env, None))
    def exists(path: str) -> bool:
        return http_get(worker, path) is not None

    batch = f"cont-{uuid.uuid4().hex[:8]}"
    figures = contention(nodes, procs=4, rounds=6, targets=2, batch=batch, exists=exists)
    assert figures["double_grants"] == 0
    assert figures["lost_writes"] == 0, figures["lost_samples"]
    assert figures["errors"] == 0 and figures["release_failures"] == 0, figures["error_samples"]
    assert figures["grants"] > 0
