"""docs/keepalive.md: lanes that end by themselves stay listed; `lanes stop`
removes the agent's lanes from the listing at once and leaves the claim."""

from __future__ import annotations

import json

from integration.helpers import Daemon

from .support import ctl, lane


def _claim(d: Daemon, agent: str, target: str) -> None:
    result = ctl(d, "claim", "--agent-id", agent, "--repo", "acme/widgets", "--target", target,
                 "--keep-alive", "--heartbeat-ttl", "5")
    assert result.returncode == 0, result.stderr


def test_a_released_lane_stays_listed_as_ended(daemon: Daemon) -> None:
    _claim(daemon, "rel", "1")
    assert ctl(daemon, "release", "--agent-id", "rel", "--repo", "acme/widgets", "--target", "1").returncode == 0
    row = lane(daemon, "rel")
    assert row is not None and (row["state"], row["end_reason"]) == ("ended", "released")


def test_lanes_stop_ends_an_active_lane_and_drops_it_at_once_keeping_the_claim(daemon: Daemon) -> None:
    _claim(daemon, "act", "2")
    stopped = ctl(daemon, "lanes", "stop", "--agent-id", "act")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.decode().startswith("stopped keep-alive lane act (")
    assert lane(daemon, "act") is None
    claim = json.loads((daemon.root / "claims" / "acme" / "widgets" / "2.json").read_text())
    assert claim["status"] == "active"
