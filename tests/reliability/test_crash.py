"""SIGKILL at random moments under a write-heavy workload: nothing torn, nothing
acknowledged missing, nothing blocking, lanes resume and the outbox drains."""

from __future__ import annotations

from pathlib import Path

from .scenarios import crash

KILLS = 4  # full size (bench/reliability.py): 50


def test_sigkill_during_writes_loses_no_acknowledged_write_and_recovers(short_dir: Path) -> None:
    figures = crash(short_dir, kills=KILLS, max_gap=0.4)
    assert figures["unparsable"] == 0, figures["unparsable_samples"]
    assert figures["lost_writes"] == 0, figures["lost_samples"]
    assert figures["acked_events"] > 0
    assert figures["progress_exit_codes"] == [0, 0, 0]
    assert figures["outbox_drained"] and figures["outbox_delivered"] == KILLS
    assert figures["lane_state"] == "active" and figures["lane_renewing"]
