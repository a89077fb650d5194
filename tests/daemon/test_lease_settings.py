"""The machine's lease bounds (daemon/lease_settings.py) over real files in a temp dir:
where each comes from, bad values, and re-reading a changed file."""

from __future__ import annotations

from pathlib import Path

from machine_config import machine

from agentcoordd.coord.context import LeasePolicy
from agentcoordd.daemon.lease_settings import Leases, load


def test_nothing_configured_is_the_documented_default(tmp_path: Path) -> None:
    found = load(machine(tmp_path))
    assert found.policy == LeasePolicy(max_ttl=86_400, max_clock_offset=5.0)
    assert (found.sources, found.errors) == ({}, ())


def test_environment_beats_env_file_beats_config_file(tmp_path: Path) -> None:
    env = machine(tmp_path, toml="[leases]\nmax_claim_ttl = 600\nmax_clock_offset = 2.5\n",
                  env_file="export AGENT_COORD_MAX_CLAIM_TTL=1200\n")
    found = load(env)
    assert found.policy == LeasePolicy(max_ttl=1200, max_clock_offset=2.5)
    assert found.sources["max_ttl"].startswith("AGENT_COORD_MAX_CLAIM_TTL (env file ")
    assert found.sources["max_clock_offset"].startswith("leases.max_clock_offset (config file ")
    assert load({**env, "AGENT_COORD_MAX_CLAIM_TTL": "30"}).policy.max_ttl == 30


def test_bad_values_are_one_line_each_and_keep_the_default(tmp_path: Path) -> None:
    env = machine(tmp_path, toml='[leases]\nmax_claim_ttl = "soon"\nmax_clock_offset = -1\n'
                                 "surprise = 1\n")
    found = load(env)
    assert found.policy == LeasePolicy()
    assert len(found.errors) == 3, found.errors
    assert any("unknown setting leases.surprise" in e for e in found.errors)
    assert any("max_claim_ttl" in e and "whole number of seconds" in e for e in found.errors)
    assert load({**env, "AGENT_COORD_MAX_CLAIM_TTL": str(10**12)}).errors  # past the ceiling


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    env = machine(tmp_path, toml="[leases]\nmax_claim_ttl = 600\n")
    leases = Leases(env)
    assert leases.policy.max_ttl == 600
    (tmp_path / "config" / "agentcoord" / "agentcoordd.toml").write_text(
        "[leases]\nmax_claim_ttl = 900\n# a longer file: another size\n")
    leases._checked_at -= 2.0  # as a second later: the files are looked at again
    assert leases.policy.max_ttl == 900
