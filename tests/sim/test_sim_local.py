"""A CI-sized fleet on the local store, every chaos kind on, passes `sim verify`."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.plan import CHAOS_KINDS, Params
from sim.run import run
from sim.verify import verify

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_twenty_agents_forty_lanes_with_all_chaos_keep_every_invariant(run_dir: Path) -> None:
    params = Params(agents=20, lanes=40, seed=7, chaos=CHAOS_KINDS)

    info = run(params, run_dir, backend="local", duration=300)
    result = verify(run_dir, info["batch_id"])

    s = result["summary"]
    assert result["violations"] == []
    assert s["lanes_terminal"] == 40
    assert s["feed_events"] == s["events"] and s["feed_missing"] == 0  # events --follow saw all
    assert s["crashes"] >= 1 and s["takeovers"] >= s["crashes"] + 1  # crash takeovers + a stalled holder
    assert s["handoffs"] >= 1 and s["fenced"] >= 1
    assert not info["timed_out"]
