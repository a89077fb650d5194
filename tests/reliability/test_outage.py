"""Backend outage: our Worker stopped during a workload (full size 30 s, CI a few
seconds). Commands fail within --timeout with exit 2; queued events are all
delivered after it returns, none twice."""

from __future__ import annotations

from typing import Any

from .scenarios import outage

SECONDS = 3.0  # full size (bench/reliability.py): 30


def test_worker_outage_fails_fast_then_delivers_every_queued_event_once(daemon_factory: Any,
                                                                        reliability_worker: Any) -> None:
    d = daemon_factory("o")
    d.start()
    figures = outage(d, reliability_worker, seconds=SECONDS, timeout=2.0, drain_within=60.0)
    assert figures["commands_during"] > 0 and figures["exit_codes"] == [2]
    assert figures["max_command_seconds"] <= figures["timeout"] + 0.5
    assert figures["queued"] > 0 and figures["drained"]
    assert figures["delivered"] == figures["queued"] and figures["duplicates"] == 0
    assert figures["events_stored"] == figures["events_expected"]
    assert figures["after_exit_code"] == 0
