"""A lane's persisted backend selection never carries a credential; resume gets it back."""

from __future__ import annotations

from pathlib import Path

from agentcoordd.daemon.backends import Resolved
from agentcoordd.daemon.descriptors import descriptor_key as backend_key
from agentcoordd.daemon.descriptors import persisted_backend, resolve_persisted
from agentcoordd.daemon.lanes import LaneRegistry, LaneSpec


def test_persisted_http_selection_has_no_token_and_resume_takes_it_from_the_machine(tmp_path: Path) -> None:
    resolved = Resolved("http", "https://coord.example", "environment", "tok-secret-9")
    backend = persisted_backend(resolved)
    assert "tok-secret-9" not in repr(backend)
    LaneRegistry(tmp_path).save([LaneSpec(agent_id="a", ttl=60, renew_every=20.0,
                                          idle_timeout=60.0, backend=backend)])
    assert b"tok-secret-9" not in (tmp_path / "lanes.json").read_bytes()
    machine_env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
                   "AGENT_COORD_API_URL": "https://coord.example/",
                   "AGENT_COORD_API_TOKEN": "tok-secret-9"}
    again = resolve_persisted(backend, machine_env)
    assert (again.kind, again.location, again.token) == ("http", "https://coord.example", "tok-secret-9")
    assert backend_key(again) == backend["key"]


def test_resume_without_a_matching_machine_backend_has_no_token(tmp_path: Path) -> None:
    backend = persisted_backend(Resolved("http", "https://other.example", "--api-url", "tok-x"))
    again = resolve_persisted(backend, {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)})
    assert (again.location, again.token) == ("https://other.example", None)


def test_local_selection_round_trips(tmp_path: Path) -> None:
    backend = persisted_backend(Resolved("local", str(tmp_path), "--state-root"))
    assert resolve_persisted(backend, {}).location == str(tmp_path)
