"""record-event and register-batch refuse what the published contracts call invalid
(exit 1, `validate`'s words), and still accept free-form types and unknown fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import Daemon

REPO = "acme/widgets"
MACHINE = {"AGENT_COORD_MACHINE_ID": "m1"}
LANE = {"name": "backend", "owner": "agent-a", "targets": ["1"]}


def close(d: Daemon, *extra: str):  # noqa: ANN201
    return d.ctl("record-event", "--batch-id", "b1", "--type", "lane_closed", "--lane", "backend",
                 "--agent-id", "agent-a", "--repo", REPO, "--target", "1", "--terminal", "done",
                 *extra, env=MACHINE)


def events(d: Daemon) -> list[Path]:
    folder = d.root / "events" / "b1"
    return sorted(folder.glob("*.json")) if folder.exists() else []


@pytest.mark.parametrize(("flag", "value"), [
    ("--pr-url", "ftp://example.com/pr/1"),
    ("--pr-url", "github.com/acme/widgets/pull/1"),
    ("--evidence-url", "javascript:alert(1)"),
    ("--evidence-url", "https://"),
])
def test_lane_closed_url_that_is_not_http_is_exit_1_and_nothing_is_written(
        daemon: Daemon, flag: str, value: str) -> None:
    assert register(daemon, {"batch_id": "b1", "repo": REPO, "lanes": [LANE]}).returncode == 0
    result = close(daemon, flag, value)
    assert result.returncode == 1
    assert result.stderr.decode().strip() == f"{flag} must be an HTTP(S) URL with a host"
    assert events(daemon) == []


def test_lane_closed_with_http_urls_is_recorded(daemon: Daemon) -> None:
    assert register(daemon, {"batch_id": "b1", "repo": REPO, "lanes": [LANE]}).returncode == 0
    result = close(daemon, "--pr-url", "https://github.com/acme/widgets/pull/1",
                   "--evidence-url", "HTTP://ci.example/run/7")
    assert result.returncode == 0, result.stderr
    assert [p.name.startswith("lane_closed-") for p in events(daemon)] == [True]


def test_typed_event_violation_is_exit_1(daemon: Daemon) -> None:
    result = daemon.ctl("record-event", "--batch-id", "b1", "--type", "error", "--severity", "P9",
                        "--category", "ci", "--message", "boom")
    assert result.returncode == 1
    assert "--severity must be one of: P0, P1, P2, P3" in result.stderr.decode()
    assert events(daemon) == []


def test_free_form_types_and_unknown_metadata_stay_accepted(daemon: Daemon) -> None:
    result = daemon.ctl("record-event", "--batch-id", "b1", "--type", "custom.thing",
                        "--reason", "anything", "--pr-url", "not-a-url", "--dashboard-url", "x",
                        "--message", "free text")
    assert result.returncode == 0, result.stderr
    [path] = events(daemon)
    record = json.loads(path.read_text())
    assert (record["type"], record["reason"], record["pr_url"]) == ("custom.thing", "anything", "not-a-url")


def register(d: Daemon, manifest: object):  # noqa: ANN201
    path = d.base / "batch.json"
    path.write_text(json.dumps(manifest))
    return d.ctl("register-batch", "--file", str(path))


@pytest.mark.parametrize(("manifest", "expected"), [
    pytest.param({"batch_id": "b1", "objective": None, "lanes": [LANE]},
                 "batch manifest violates the batch contract: $.objective: must be omitted rather than null",
                 id="null-for-omitted"),
    pytest.param({"batch_id": "b1", "objective": 5, "lanes": [LANE]},
                 "batch manifest violates the batch contract: $.objective: Expected `str | null`, got `int`",
                 id="wrong-type"),
    pytest.param({"batch_id": "b1", "lanes": [dict(LANE, closed_by={"agent_id": "agent-a"})]},
                 "batch manifest violates the batch contract: $.lanes[0].closed_by.machine: "
                 "Object missing required field `machine`", id="lane-field"),
    pytest.param({"batch_id": "b1", "merge_authority": "merge_when_green", "lanes": [LANE]},
                 "batch manifest violates the merge_authority contract: $.merge_authority: "
                 "Invalid enum value 'merge_when_green'", id="merge-authority"),
    pytest.param({"batch_id": "b1", "lanes": [dict(LANE, route="gpt-5 high")]},
                 "batch manifest violates the route contract: $.lanes[0].route: Expected `str` matching",
                 id="route"),
])
def test_register_batch_refuses_contract_violations_with_validates_words(
        daemon: Daemon, manifest: dict, expected: str) -> None:
    result = register(daemon, manifest)
    assert result.returncode == 1
    assert result.stderr.decode().startswith(expected)
    assert len(result.stderr.decode().strip().splitlines()) == 1
    assert not (daemon.root / "batches" / "b1.json").exists()
    checked = daemon.ctl("validate", "--family", "batch", str(daemon.base / "batch.json"))
    if "merge_authority" not in expected and "route" not in expected:
        assert checked.returncode == 1  # validate reports the same violation


def test_register_batch_keeps_unknown_fields_legacy_lane_ids_and_valid_routes(daemon: Daemon) -> None:
    manifest = {"batch_id": "b1", "objective": "ship", "merge_authority": "ask", "custom": {"x": None},
                "lanes": [{"id": "backend", "owner": "agent-a", "targets": ["1"], "whatever": None,
                           "route": {"model": "openai/gpt-5", "effort": "high"}},
                          dict(LANE, name="frontend", route="gpt-5/high")]}
    result = register(daemon, manifest)
    assert result.returncode == 0, result.stderr
    stored = json.loads((daemon.root / "batches" / "b1.json").read_text())
    assert stored["custom"] == {"x": None} and stored["merge_authority"] == "ask"
    assert stored["lanes"][0]["id"] == "backend"


def test_register_batch_maps_the_launch_merge_authority_to_its_short_form(daemon: Daemon) -> None:
    result = register(daemon, {"batch_id": "b1", "merge_authority": "auto_merge_when_gates_pass",
                               "lanes": [LANE]})
    assert result.returncode == 0, result.stderr
    assert json.loads((daemon.root / "batches" / "b1.json").read_text())["merge_authority"] == "auto"


def test_register_batch_deeply_nested_manifest_is_exit_1(daemon: Daemon) -> None:
    path = daemon.base / "deep.json"
    path.write_bytes(b'{"batch_id": "b1", "lanes": [' + b"[" * 5000 + b"]" * 5000 + b"]}")
    result = daemon.ctl("register-batch", "--file", str(path))
    assert result.returncode == 1
    assert result.stderr.decode().strip() == "batch manifest JSON invalid: nesting too deep"
