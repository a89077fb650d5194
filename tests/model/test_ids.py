"""Identifier and state-path validation (spec: State Layout, Event Schema, Batch Schema)."""

from __future__ import annotations

import re

import pytest

from agentcoordd.model import ids
from agentcoordd.model.errors import EXIT_USAGE, UsageError
from agentcoordd.model.timefmt import new_event_id

# The hostile values every identifier must refuse (issue 2, "Must show").
HOSTILE = [
    pytest.param("../x", id="dotdot"),
    pytest.param("a/../../b", id="traversal"),
    pytest.param("", id="empty"),
    pytest.param("a" * 10_240, id="10KB"),
    pytest.param("a\x00b", id="NUL"),
    pytest.param("a\udcffb", id="surrogate"),
    pytest.param("caf\u00e9", id="unicode"),
    pytest.param("a/b", id="slash"),
    pytest.param(".hidden", id="leading-dot"),
    pytest.param("a\nb", id="newline"),
    pytest.param("a b", id="space"),
    pytest.param("..", id="dotdot-alone"),
    pytest.param("a\\b", id="backslash"),
]

SEGMENT_VALIDATORS = [
    pytest.param(ids.agent_id, id="agent-id"),
    pytest.param(ids.target, id="target"),
    pytest.param(ids.batch_id, id="batch-id"),
    pytest.param(ids.lane_name, id="lane"),
]


def assert_one_line_usage_error(excinfo: pytest.ExceptionInfo[UsageError]) -> None:
    assert excinfo.value.exit_code == EXIT_USAGE
    message = str(excinfo.value)
    assert "\n" not in message and "\r" not in message
    assert len(message) < 200
    message.encode("utf-8")  # printable on any terminal: no lone surrogates


@pytest.mark.parametrize("validator", SEGMENT_VALIDATORS)
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_identifier_is_a_one_line_usage_error(validator, value):
    with pytest.raises(UsageError) as excinfo:
        validator(value)
    assert_one_line_usage_error(excinfo)


@pytest.mark.parametrize(
    "value",
    [v for v in HOSTILE if v.id != "slash"] + ["noslash", "a/b/c", "/x", "x/", "acme/.hidden", "acme/..", "./x"],
)
def test_hostile_repo_is_refused_by_shape_or_by_its_claim_path(value):
    with pytest.raises(UsageError) as excinfo:
        ids.claim_path(value, "1")
    assert_one_line_usage_error(excinfo)


@pytest.mark.parametrize(
    ("check", "value"),
    [
        (ids.agent_id, "worker-3969"),
        (ids.agent_id, "a:b"),
        (ids.target, "3969"),
        (ids.target, "a:b"),
        (ids.batch_id, "batch-2026-06-13"),
        (ids.batch_id, "b:1"),
        (ids.lane_name, "backend"),
        (ids.lane_name, "a.b"),
        (ids.repo, "shakacode/react_on_rails"),
        (ids.repo, "acme/repo-00"),
    ],
)
def test_ordinary_identifiers_are_accepted_unchanged(check, value):
    assert check(value) == value


def test_lane_names_cannot_contain_a_colon():
    with pytest.raises(UsageError, match="cannot contain ':'") as excinfo:
        ids.lane_name("batch:lane")
    assert_one_line_usage_error(excinfo)


def test_batch_ids_may_contain_a_colon():
    assert ids.batch_path("b:1") == "batches/b:1.json"


def test_dot_segments_in_a_repo_are_refused_naming_the_path():
    """Golden bad_ids step 1: `--repo ../x` reports the unsafe claim path."""
    with pytest.raises(UsageError) as excinfo:
        ids.claim_path("../x", "1")
    assert str(excinfo.value) == "unsafe state path: claims/../x/1.json"


@pytest.mark.parametrize(
    ("check", "value", "message"),
    [
        (ids.repo, "noslash", "invalid target repo: noslash"),
        (ids.repo, "https://github.com/acme/widgets", "invalid target repo: https://github.com/acme/widgets"),
        (ids.target, "../x", "invalid target: ../x"),
        (ids.target, "#12", "invalid target: #12"),
        (ids.agent_id, "../x", "invalid agent-id: ../x"),
        (ids.batch_id, "../x", "invalid batch-id: ../x"),
    ],
)
def test_error_messages_start_with_the_existing_tools_and_say_what_is_accepted(check, value, message):
    """agent-coord's words first (`invalid target: #12`), then what is accepted (issue 42)."""
    with pytest.raises(UsageError) as excinfo:
        check(value)
    want = {ids.repo: "owner/name, e.g. acme/widgets", ids.target: "an issue or PR number or id, e.g. 12",
            ids.agent_id: "letters, digits, '_', ':' and '-', with single dots between them, e.g. worker-1",
            ids.batch_id: "letters, digits, '_', ':' and '-', with single dots between them, e.g. wave-10"}
    assert str(excinfo.value) == f"{message} (want {want[check]})"


@pytest.mark.parametrize("check", [
    ids.workspace_id,
    lambda value: ids.admission_prefix("host_limits", value),
    lambda value: ids.admission_path("host_limits", "default", "m1", value, "s"),
    lambda value: ids.admission_path("capacity_reservations", "default", value),
], ids=["workspace", "admission-prefix", "host-limit-key", "reservation-key"])
@pytest.mark.parametrize("value", ["", "../x", "a/b"])
def test_every_invalid_id_is_a_usage_error_saying_what_is_accepted(check, value):
    """Found by the CLI fuzzer: `limit list --workspace ''` was a daemon internal error
    (exit 2), the message table had no entry for workspaces or admission keys."""
    with pytest.raises(UsageError) as excinfo:
        check(value)
    assert excinfo.value.exit_code == EXIT_USAGE
    assert str(excinfo.value).startswith("invalid ") and "(want letters, digits" in str(excinfo.value)


def test_hostile_value_is_escaped_and_shortened_in_the_message():
    with pytest.raises(UsageError) as excinfo:
        ids.agent_id("x" * 10_240 + "\n")
    assert "..." in str(excinfo.value)
    with pytest.raises(UsageError) as excinfo:
        ids.agent_id("a\x00\n\udcff")
    assert str(excinfo.value).startswith("invalid agent-id: a\\x00\\n\\udcff (want ")


def test_layout_paths_follow_the_spec():
    assert ids.claim_path("acme/widgets", "1") == "claims/acme/widgets/1.json"
    assert ids.heartbeat_path("agent-a") == "heartbeats/agent-a.json"
    assert ids.batch_path("b1") == "batches/b1.json"
    assert ids.event_path("b1", "x") == "events/b1/x.json"
    assert ids.archive_path("claims/acme/widgets/1.json") == "archive/claims/acme/widgets/1.json"


def test_state_path_allows_exactly_512_utf8_bytes():
    at_limit = "claims/" + "a" * 500 + ".json"
    assert len(at_limit.encode()) == 512
    assert ids.state_path(at_limit) == at_limit
    with pytest.raises(UsageError):
        ids.state_path("claims/" + "a" * 501 + ".json")


def test_state_path_limit_counts_utf8_bytes_not_characters():
    # 250 two-byte characters = 500 bytes, +1 byte over the limit
    with pytest.raises(UsageError):
        ids.state_path("claims/" + "\u00e9" * 250 + "a.json")


def test_archive_paths_allow_520_bytes_for_a_512_byte_suffix():
    suffix = "claims/" + "a" * 500 + ".json"
    assert ids.archive_path(suffix) == "archive/" + suffix
    with pytest.raises(UsageError):
        ids.state_path("archive/claims/" + "a" * 501 + ".json")


@pytest.mark.parametrize(
    "path",
    [
        "/claims/a/b/1.json",
        "claims//b/1.json",
        "claims/a/./1.json",
        "claims/a/../1.json",
        "claims/a/.hidden.json",
        "claims/a/b/1.txt",
        "secrets/a.json",
        "claims\\..\\x.json",
        "claims/a\x00.json",
        "claims/a\udcff.json",
        "archive/archive/claims/a.json",
        "",
    ],
)
def test_unsafe_state_paths_are_refused(path):
    with pytest.raises(UsageError) as excinfo:
        ids.state_path(path)
    assert_one_line_usage_error(excinfo)


@pytest.mark.parametrize("prefix", ["claims", "claims/acme", "events/b:1", "archive", "archive/events"])
def test_listing_prefixes_name_a_family_directory(prefix):
    assert ids.state_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["", "/", "claims/", "../claims", "claims/../x", "other", "claims/\x00"])
def test_unsafe_listing_prefixes_are_refused(prefix):
    with pytest.raises(UsageError):
        ids.state_prefix(prefix)


@pytest.mark.parametrize(
    ("lane", "event_id"),
    [
        ("backend", "lane_closed-10e08a419e850eba"),  # conformance/golden
        ("docs", "lane_closed-46b42b4229cd7a39"),  # conformance/golden
        ("lane-001", "lane_closed-76a23cdf1916414d"),  # spec/state-root-sample
    ],
)
def test_lane_closed_id_is_the_deterministic_reservation_of_the_existing_tool(lane, event_id):
    assert ids.lane_closed_event_id(lane) == event_id


def test_lane_closed_id_refuses_a_lane_name_with_a_colon():
    with pytest.raises(UsageError):
        ids.lane_closed_event_id("b1:backend")


def test_ordinary_event_id_is_time_sortable_with_a_random_suffix():
    import datetime as dt

    moment = dt.datetime(2026, 7, 8, 23, 55, 0, 123456, tzinfo=dt.timezone.utc)
    assert new_event_id(moment, "deadbeef") == "20260708T235500.123456Z-deadbeef"
    generated = new_event_id(moment)
    assert re.fullmatch(r"\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{8}", generated)
    later = new_event_id(moment + dt.timedelta(microseconds=1))
    assert later > generated


@pytest.mark.parametrize("kind", ["AGENT_COORD_MACHINE_ID", "AGENT_COORD_SESSION_ID"])
@pytest.mark.parametrize("value", ["m5", "m1-codex", "019a2f6c-codex-thread", "host.example:1"])
def test_attribution_ids_accept_machine_and_session_shapes(kind, value):
    assert ids.attribution(kind, value) == value


@pytest.mark.parametrize("value", ["", "a b", "a\x00", "a\n", "x" * 300, "\u00e9", ".hidden"])
def test_attribution_ids_refuse_hostile_values(value):
    with pytest.raises(UsageError) as excinfo:
        ids.attribution("AGENT_COORD_MACHINE_ID", value)
    assert_one_line_usage_error(excinfo)
    assert "AGENT_COORD_MACHINE_ID" in str(excinfo.value)


def test_error_messages_keep_letters_and_escape_what_breaks_a_line() -> None:
    """agent-coord prints `invalid batch-id: bé` (differential scenario
    non_ascii_in_messages); controls, bidi marks and lone surrogates stay escaped."""
    with pytest.raises(UsageError) as excinfo:
        ids.batch_id("b\u00e9")
    assert str(excinfo.value).startswith("invalid batch-id: b\u00e9 (want ")  # then what is accepted
    assert ids.shown("a\nb\x1bc\u202ed\udcff") == "a\\nb\\x1bc\\u202ed\\udcff"


def test_an_empty_repo_is_a_missing_one() -> None:
    """agent-coord's words for `claim|release|status --repo ''` (differential tester)."""
    with pytest.raises(UsageError, match="^missing required --repo$") as excinfo:
        ids.repo("")
    assert excinfo.value.exit_code == EXIT_USAGE
