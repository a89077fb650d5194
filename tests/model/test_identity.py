"""Machine and session identity (spec: Machine and session identity)."""

from __future__ import annotations

import pytest

from agentcoordd.model.errors import UsageError
from agentcoordd.model.identity import Identity, resolve_identity, stamp_attribution

# ---- resolution: a pure function of the environment mapping ------------------------


def test_nothing_set_resolves_to_no_attribution():
    assert resolve_identity({}) == Identity()


def test_machine_comes_from_agent_coord_machine_id():
    assert resolve_identity({"AGENT_COORD_MACHINE_ID": "m5"}).machine_id == "m5"


def test_explicit_session_id_wins_over_codex_thread_id():
    identity = resolve_identity({"AGENT_COORD_SESSION_ID": "run-1", "CODEX_THREAD_ID": "thread-9"})
    assert (identity.session_id, identity.session_source) == ("run-1", "agent_coord_session_id")


def test_codex_thread_id_is_the_session_fallback():
    identity = resolve_identity({"CODEX_THREAD_ID": "019a2f6c-codex-thread"})
    assert (identity.session_id, identity.session_source) == ("019a2f6c-codex-thread", "codex_thread_id")


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_blank_values_are_unset(blank):
    env = {"AGENT_COORD_MACHINE_ID": blank, "AGENT_COORD_SESSION_ID": blank, "CODEX_THREAD_ID": "t-1"}
    identity = resolve_identity(env)
    assert identity.machine_id is None
    assert (identity.session_id, identity.session_source) == ("t-1", "codex_thread_id")


def test_fallback_machine_applies_only_when_the_caller_sets_none():
    assert resolve_identity({}, fallback_machine="daemon-m").machine_id == "daemon-m"
    assert resolve_identity({"AGENT_COORD_MACHINE_ID": "m1"}, fallback_machine="daemon-m").machine_id == "m1"


def test_unrelated_variables_are_ignored():
    assert resolve_identity({"AGENT_COORD_API_TOKEN": "secret", "HOME": "/home/x"}) == Identity()


@pytest.mark.parametrize("name", ["AGENT_COORD_MACHINE_ID", "AGENT_COORD_SESSION_ID", "CODEX_THREAD_ID"])
@pytest.mark.parametrize("value", ["a b", "a\x00b", "x" * 10_240, "../\n"])
def test_hostile_identity_values_are_a_one_line_usage_error_naming_the_variable(name, value):
    with pytest.raises(UsageError) as excinfo:
        resolve_identity({name: value})
    assert excinfo.value.exit_code == 1
    assert name in str(excinfo.value)
    assert "\n" not in str(excinfo.value)


# ---- stamping: the tuple is atomic per write ---------------------------------------

RECORDED = {"agent_id": "a", "machine_id": "m1", "session_id": "s1", "session_source": "codex_thread_id"}


def test_first_write_stamps_the_resolved_tuple():
    stamped = stamp_attribution({"agent_id": "a"}, Identity("m5", "s-9", "agent_coord_session_id"))
    assert stamped == {
        "agent_id": "a",
        "machine_id": "m5",
        "session_id": "s-9",
        "session_source": "agent_coord_session_id",
    }


def test_write_without_identity_preserves_the_last_recorded_attribution():
    assert stamp_attribution(RECORDED, Identity()) == RECORDED


def test_write_without_identity_on_a_fresh_record_adds_no_attribution():
    assert stamp_attribution({"agent_id": "a"}, Identity()) == {"agent_id": "a"}


def test_a_different_machine_without_a_session_clears_the_stale_session():
    stamped = stamp_attribution(RECORDED, Identity(machine_id="m2"))
    assert stamped == {"agent_id": "a", "machine_id": "m2"}


def test_the_same_machine_without_a_session_keeps_the_recorded_session():
    assert stamp_attribution(RECORDED, Identity(machine_id="m1")) == RECORDED


def test_a_different_session_without_a_machine_clears_the_stale_machine():
    stamped = stamp_attribution(RECORDED, Identity(session_id="s2", session_source="agent_coord_session_id"))
    assert stamped == {"agent_id": "a", "session_id": "s2", "session_source": "agent_coord_session_id"}


def test_the_same_session_without_a_machine_keeps_the_recorded_machine():
    stamped = stamp_attribution(RECORDED, Identity(session_id="s1", session_source="codex_thread_id"))
    assert stamped == RECORDED


def test_a_full_tuple_replaces_both_fields():
    stamped = stamp_attribution(RECORDED, Identity("m2", "s2", "agent_coord_session_id"))
    assert stamped == {
        "agent_id": "a",
        "machine_id": "m2",
        "session_id": "s2",
        "session_source": "agent_coord_session_id",
    }


def test_stamping_does_not_mutate_its_input():
    original = dict(RECORDED)
    stamp_attribution(original, Identity(machine_id="m2"))
    assert original == RECORDED
