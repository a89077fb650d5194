"""The clock offset estimate from responses' time stamps (model/clockskew.py)."""

from __future__ import annotations

import random

from agentcoordd.model.clockskew import OffsetEstimate


def test_nothing_measured_is_no_estimate() -> None:
    assert OffsetEstimate().current() is None


def test_one_second_stamps_narrow_to_the_round_trip() -> None:
    """Date headers say the second; many samples at different phases pin the offset."""
    rng = random.Random(3)
    truth = 2.37  # ours is 2.37 s ahead of the server
    estimate = OffsetEstimate()
    local = 1_000_000.0
    for i in range(200):
        local += rng.uniform(0.05, 0.9)
        rtt = rng.uniform(0.001, 0.02)
        server_moment = local - truth + rtt / 2
        estimate.add(sent=local, received=local + rtt, server=float(int(server_moment)),
                     resolution=1.0, at=float(i))
    found = estimate.current()
    assert found is not None
    assert abs(found.seconds - truth) <= found.uncertainty + 1e-9
    assert found.uncertainty < 0.05


def test_a_millisecond_stamp_is_precise_at_once() -> None:
    estimate = OffsetEstimate()
    estimate.add(sent=100.0, received=100.004, server=400.002, resolution=0.001, at=0.0)
    found = estimate.current()
    assert found is not None and abs(found.seconds - -300.0) < 0.01 and found.uncertainty < 0.01
    assert found.certainly_beyond(5.0) and not found.certainly_beyond(301.0)


def test_a_stepped_clock_starts_the_estimate_again() -> None:
    estimate = OffsetEstimate()
    estimate.add(sent=10.0, received=10.01, server=10.0, resolution=0.001, at=0.0)
    estimate.add(sent=20.0, received=20.01, server=320.0, resolution=0.001, at=1.0)  # NTP stepped
    found = estimate.current()
    assert found is not None and abs(found.seconds - -300.0) < 0.02


def test_old_samples_stop_narrowing_after_the_window() -> None:
    estimate = OffsetEstimate(window=10.0)
    estimate.add(sent=0.0, received=0.001, server=0.0, resolution=0.001, at=0.0)
    estimate.add(sent=50.0, received=51.0, server=50.5, resolution=0.001, at=20.0)  # a slow answer
    found = estimate.current()
    assert found is not None and found.uncertainty > 0.4  # from the new sample alone
