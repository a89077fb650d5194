"""Property: no identifier the validators accept can name a file outside the state root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentcoordd.model import ids
from agentcoordd.model.errors import UsageError

# Biased toward the characters that matter: separators, dots, NUL, backslash,
# the accepted punctuation, non-ASCII and lone surrogates.
TRICKY = st.sampled_from(list("./\\\x00:@+=,~-_ \n") + ["..", "../", "/..", "\udcff", "\u00e9", "\u2215", "\uff0e"])
IDENTIFIER = st.lists(st.one_of(TRICKY, st.characters(), st.sampled_from("abcAZ09")), max_size=24).map("".join)
REPO = st.tuples(IDENTIFIER, st.sampled_from(["/", "/../", "//", "/./"]), IDENTIFIER).map("".join)

SETTINGS = settings(
    max_examples=400,
    deadline=None,
    database=None,  # leave nothing in the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def state_root(tmp_path_factory) -> Path:
    return Path(os.path.realpath(tmp_path_factory.mktemp("state")))


def accepted(build, *args) -> str | None:
    try:
        return build(*args)
    except UsageError:
        return None


def assert_inside(root: Path, rel: str) -> None:
    assert not os.path.isabs(rel)
    joined = os.path.join(root, rel)
    for resolved in (os.path.normpath(joined), os.path.realpath(joined)):
        assert os.path.commonpath([root, resolved]) == str(root), rel
        assert resolved != str(root)
    # nothing to normalize away: the stored path is already canonical
    assert os.path.normpath(rel) == rel
    assert "\x00" not in rel


@SETTINGS
@given(repo=REPO, target=IDENTIFIER)
def test_accepted_claim_paths_stay_inside_the_root(state_root, repo, target):
    path = accepted(ids.claim_path, repo, target)
    if path is not None:
        assert_inside(state_root, path)
        assert path.count("/") == 3
        assert_inside(state_root, ids.archive_path(path))


@SETTINGS
@given(agent=IDENTIFIER)
def test_accepted_heartbeat_paths_stay_inside_the_root(state_root, agent):
    path = accepted(ids.heartbeat_path, agent)
    if path is not None:
        assert_inside(state_root, path)
        assert path.count("/") == 1


@SETTINGS
@given(batch=IDENTIFIER, lane=IDENTIFIER, event=IDENTIFIER)
def test_accepted_batch_and_event_paths_stay_inside_the_root(state_root, batch, lane, event):
    batch_path = accepted(ids.batch_path, batch)
    if batch_path is not None:
        assert_inside(state_root, batch_path)
        lane_id = accepted(ids.lane_closed_event_id, lane)
        if lane_id is not None:
            assert_inside(state_root, ids.event_path(batch, lane_id))
        event_path = accepted(ids.event_path, batch, event)
        if event_path is not None:
            assert_inside(state_root, event_path)


@SETTINGS
@given(path=st.lists(st.one_of(IDENTIFIER, st.sampled_from(["claims", "events", "archive", "..", "."])),
                     min_size=1, max_size=6).map("/".join).map(lambda p: p + ".json"))
def test_any_accepted_state_path_stays_inside_the_root(state_root, path):
    checked = accepted(ids.state_path, path)
    if checked is not None:
        assert_inside(state_root, checked)
        assert len(checked.encode("utf-8")) <= ids.MAX_ARCHIVE_PATH_BYTES


@SETTINGS
@given(value=IDENTIFIER)
def test_every_accepted_segment_is_a_single_safe_file_name(value):
    for check in (ids.agent_id, ids.target, ids.batch_id, ids.lane_name):
        segment = accepted(check, value)
        if segment is not None:
            assert segment not in ("", ".", "..")
            assert "/" not in segment and "\\" not in segment and "\x00" not in segment
            assert not segment.startswith(".")
            assert len((segment + ".json.lock").encode("utf-8")) <= 255
