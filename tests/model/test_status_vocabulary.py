"""Heartbeat status vocabulary (spec: Heartbeat status vocabulary)."""

from __future__ import annotations

import pytest

from agentcoordd.model.status import (
    CANONICAL_STATUSES,
    normalize_status,
    satisfies_dependency,
)

CANONICAL_MESSAGE_TAIL = (
    "Canonical statuses: in_progress, blocked, blocked_user_input, "
    "waiting_on_checks_or_review, external_gate_failing, no_pr_evidence, failed, done, "
    "merged, ready, ready_gates_clean, ready_no_merge_authority, abandoned, superseded."
)


def test_vocabulary_is_the_spec_table_in_order():
    assert CANONICAL_STATUSES == (
        "in_progress", "blocked", "blocked_user_input", "waiting_on_checks_or_review",
        "external_gate_failing", "no_pr_evidence", "failed",
        "done", "merged", "ready", "ready_gates_clean", "ready_no_merge_authority",
        "abandoned", "superseded",
    )


@pytest.mark.parametrize("status", CANONICAL_STATUSES)
def test_canonical_status_is_kept_without_status_raw(status):
    assert normalize_status(status) == (status, None, None)


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("Done", "done"),
        ("DONE", "done"),
        ("In-Progress", "in_progress"),
        ("waiting-on-checks-or-review", "waiting_on_checks_or_review"),
        ("Blocked-User-Input", "blocked_user_input"),
    ],
)
def test_case_and_hyphens_fold_to_snake_case_with_status_raw(given, canonical):
    assert normalize_status(given) == (canonical, given, None)


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("complete", "done"),
        ("completed", "done"),
        ("ready_to_merge", "ready"),
        ("ready_handoff", "ready"),
        ("ready_for_coordinator", "ready"),
        ("in_process", "in_progress"),
        ("claimed", "in_progress"),
        ("implementing", "in_progress"),
        ("validating", "in_progress"),
        ("pushing", "in_progress"),
        ("Ready-To-Merge", "ready"),
    ],
)
def test_aliases_map_to_canonical_with_the_original_in_status_raw(alias, canonical):
    assert normalize_status(alias) == (canonical, alias, None)


@pytest.mark.parametrize("value", ["released", "weird_value", "mystery"])
def test_unknown_status_is_kept_verbatim_with_status_raw_and_a_warning(value):
    result = normalize_status(value)
    assert result.status == value
    assert result.status_raw == value
    assert result.warning == (
        f'status "{value}" is not in the canonical status vocabulary; preserving it '
        "verbatim with a status_raw copy. " + CANONICAL_MESSAGE_TAIL
    )


def test_released_is_deliberately_not_an_alias():
    assert normalize_status("released").status == "released"
    assert not satisfies_dependency("released")


@pytest.mark.parametrize(
    "status", ["done", "merged", "ready", "ready_gates_clean", "ready_no_merge_authority", "complete", "completed"]
)
def test_dependency_satisfying_statuses_include_legacy_synonyms(status):
    assert satisfies_dependency(status)


@pytest.mark.parametrize("status", ["abandoned", "superseded", "in_progress", "released", None, 3])
def test_abandoned_superseded_and_working_statuses_do_not_satisfy_dependencies(status):
    assert not satisfies_dependency(status)


@pytest.mark.parametrize("status", ["queued", "token_limit_pause", "continued"])
def test_contract_working_statuses_are_accepted_without_warning_and_never_satisfy_dependencies(status):
    assert normalize_status(status) == (status, None, None)
    assert not satisfies_dependency(status)
    assert status not in CANONICAL_STATUSES  # the unknown-status warning keeps the spec's list


@pytest.mark.parametrize("status", ["requested", "in_progress", "passed", "failed"])
def test_qa_statuses_are_accepted_on_qa_events(status):
    assert normalize_status(status, event_type="qa.validation_passed") == (status, None, None)


@pytest.mark.parametrize("status", ["requested", "passed"])
def test_qa_statuses_still_warn_outside_qa_events(status):
    assert normalize_status(status).warning is not None
    assert normalize_status(status, event_type="done").warning is not None


def test_stop_signal_statuses_are_accepted_on_their_own_event_type_only():
    assert normalize_status("stop_requested", event_type="batch.stop_requested").warning is None
    assert normalize_status("stopped", event_type="batch.stopped").warning is None
    assert normalize_status("stopped", event_type="batch.stop_requested").warning is not None
