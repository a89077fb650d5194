"""The same fleet shape on the HTTP backend (our Worker under `wrangler dev`), smaller."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.plan import CHAOS_KINDS, Params
from sim.run import run
from sim.verify import verify

pytestmark = [pytest.mark.slow, pytest.mark.timeout(500)]


def test_http_fleet_with_all_chaos_keeps_every_invariant(run_dir: Path) -> None:
    from worker_fixture import require_toolchain

    require_toolchain()
    params = Params(agents=10, lanes=20, seed=3, chaos=CHAOS_KINDS)

    info = run(params, run_dir, backend="http", duration=300)
    result = verify(run_dir, info["batch_id"])

    assert result["violations"] == []
    assert result["summary"]["lanes_terminal"] == 20
    assert result["summary"]["feed_events"] == result["summary"]["events"]  # events --follow saw all
    assert result["summary"]["takeovers"] >= 1 and result["summary"]["handoffs"] >= 1
