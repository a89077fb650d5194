"""A claim is never taken from a live holder (issue 40, findings 1 and 5), on every backend.

Finding 1, as reproduced on main: an agent id whose last heartbeat is dead (an
earlier lane, yesterday) lost every fresh claim before its first heartbeat:

    heartbeat --agent-id x --ttl 1; sleep 5
    claim --agent-id x --target 2      # acquired
    claim --agent-id y --target 2      # "taken_over", exit 0

Finding 5: `claim --ttl 99999999999999999999` blocked a target until 9999.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from agentcoordd.model.timefmt import format_ts


def _dead_beat(agent: str, repo: str, target: str) -> dict[str, Any]:
    """x's heartbeat from an earlier lane, dead since (ttl 1 s, an hour ago)."""
    now = dt.datetime.now(dt.timezone.utc)
    return {"schema_version": 1, "agent_id": agent, "repo": repo, "target": target,
            "status": "in_progress", "updated_at": format_ts(now - dt.timedelta(hours=1)),
            "expires_at": format_ts(now - dt.timedelta(hours=1) + dt.timedelta(seconds=1))}


def test_a_fresh_claim_is_not_taken_over_for_an_older_dead_heartbeat(
        backend, machines, repo, agent) -> None:
    m1, m2 = machines("m1"), machines("m2")
    x, y = agent("x"), agent("y")
    backend.plant(f"heartbeats/{x}.json", _dead_beat(x, repo, "1"))
    assert m1.ctl("claim", "--agent-id", x, "--repo", repo, "--target", "2").returncode == 0
    refused = m2.ctl("claim", "--agent-id", y, "--repo", repo, "--target", "2")
    assert refused.returncode == 3, refused.stderr
    assert (f"CLAIM_REFUSED: active claim for {repo}#2 held by {x}; heartbeat predates the "
            "claim; fallback claim expires at ") in refused.stderr.decode()
    assert backend.read(f"claims/{repo}/2.json")["agent_id"] == x
    status = m2.json("status", "--repo", repo, "--target", "2")
    assert status["claims"][0]["agent_id"] == x
    assert (status["lease"]["liveness"], status["lease"]["claimable"]) == ("predates_claim", False)
    waited = m2.ctl("wait", "--until-free", "--repo", repo, "--target", "2", "--timeout", "1.5")
    assert waited.returncode == 2, waited.stderr  # never "free" where claim would refuse


def test_a_beat_after_the_claim_makes_the_heartbeat_the_evidence_again(
        backend, machines, repo, agent) -> None:
    m1 = machines("m1")
    x, y = agent("x"), agent("y")
    backend.plant(f"heartbeats/{x}.json", _dead_beat(x, repo, "1"))
    claimed = m1.json("claim", "--agent-id", x, "--repo", repo, "--target", "2")["claim"]
    # x beats after its claim and then dies at once (a heartbeat that promised nothing: ttl 0)
    at = claimed["claimed_at"]
    backend.plant(f"heartbeats/{x}.json", {**_dead_beat(x, repo, "2"), "updated_at": at,
                                           "expires_at": at})
    taken = m1.json("claim", "--agent-id", y, "--repo", repo, "--target", "2")
    assert taken["action"] == "taken_over"
    assert (taken["claim"]["previous_holder"], taken["claim"]["takeover_reason"]) == (x, "heartbeat_dead")


def test_a_ttl_above_the_machines_maximum_is_refused_and_nothing_is_written(
        backend, machines, repo, agent) -> None:
    m1 = machines("m1")
    x = agent("x")
    for argv in (("claim", "--agent-id", x, "--repo", repo, "--target", "3",
                  "--ttl", "99999999999999999999"),
                 ("heartbeat", "--agent-id", x, "--ttl", "86401"),
                 ("claim", "--agent-id", x, "--repo", repo, "--target", "3", "--keep-alive",
                  "--heartbeat-ttl", "172800")):
        result = m1.ctl(*argv)
        assert result.returncode == 1, (argv, result.stderr)
        assert "maximum lease of 86400s" in result.stderr.decode()
    assert backend.read(f"claims/{repo}/3.json") is None
    assert backend.read(f"heartbeats/{x}.json") is None
    assert m1.ctl("claim", "--agent-id", x, "--repo", repo, "--target", "3",
                  "--ttl", "86400").returncode == 0


def test_the_maximum_comes_from_the_machines_configuration(backend, machines, repo, agent) -> None:
    m1 = machines("m1", AGENT_COORD_MAX_CLAIM_TTL="600")
    refused = m1.ctl("claim", "--agent-id", agent("x"), "--repo", repo, "--target", "4", "--ttl", "601")
    assert refused.returncode == 1 and "maximum lease of 600s" in refused.stderr.decode()
    shown = m1.json("config", "show")["leases"]
    assert shown["max_claim_ttl_seconds"] == 600
    assert shown["sources"]["max_ttl"] == "AGENT_COORD_MAX_CLAIM_TTL (environment)"
