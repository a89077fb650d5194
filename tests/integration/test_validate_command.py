"""`agentcoordctl validate`: a record checked client-side against its published contract."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .helpers import PYTHON, Daemon
from .test_import_hygiene import FORBIDDEN, PROBE

CLAIM = {
    "schema_version": 1, "repo": "acme/widgets", "target": "1", "agent_id": "agent-a",
    "status": "active", "claimed_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
    "expires_at": "2026-01-01T01:00:00Z",
}
LANE_CLOSED = {
    "schema_version": 2, "event_id": "lane_closed-0123456789abcdef", "batch_id": "b1",
    "type": "lane_closed", "lane": "backend", "agent_id": "agent-a", "repo": "acme/widgets",
    "target": "1", "terminal": "done", "workspace": "default",
    "closed_by": {"agent_id": "agent-a", "machine": "m1"}, "at": "2026-01-01T00:00:00Z",
}


@pytest.fixture
def offline(daemon_factory: Any) -> Daemon:
    """A caller environment with no daemon running (and autostart off): validate needs none."""
    return daemon_factory()


def write(d: Daemon, name: str, content: bytes | str) -> Path:
    path = d.base / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def test_valid_record_exits_0_without_a_daemon(offline: Daemon) -> None:
    path = write(offline, "claim.json", json.dumps(CLAIM))
    result = offline.ctl("validate", "--family", "claim", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == f"valid: {path} is a valid claim record\n"


def test_each_violation_is_reported_with_its_json_path(offline: Daemon) -> None:
    record = dict(LANE_CLOSED, pr_url="ftp://example.com/pr/1", lane="a:b")
    path = write(offline, "closed.json", json.dumps(record))
    result = offline.ctl("validate", "--family", "lane_closed", str(path), "--json")
    assert result.returncode == 1
    payload = json.loads(result.stdout)
    assert payload["family"] == "lane_closed" and payload["valid"] is False
    assert [v["path"] for v in payload["violations"]] == ["$.pr_url"]


def test_procedural_violations_are_all_listed_in_text(offline: Daemon) -> None:
    manifest = {"batch_id": "b1", "objective": None,
                "lanes": [{"name": "a:b"}, {"name": "x"}, {"name": "x"}]}
    result = offline.ctl("validate", "--family", "batch", "-", input=json.dumps(manifest).encode())
    assert result.returncode == 1
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "$.objective: must be omitted rather than null"
    assert lines[1].startswith("$.lanes[0].name: invalid lane: a:b")
    assert lines[2].startswith("$.lanes[2].name: duplicate lane name 'x'")
    assert lines[3] == "invalid: - is not a valid batch record (3 violations)"


@pytest.mark.parametrize(("record", "path"), [
    pytest.param(dict(CLAIM, target=7), "$.target", id="number-for-string"),
    pytest.param({k: v for k, v in CLAIM.items() if k != "agent_id"}, "$.agent_id", id="missing"),
    pytest.param(dict(CLAIM, closed_by={"agent_id": "a"}), "$.closed_by.machine", id="nested"),
    pytest.param(dict(CLAIM, release_mode="yolo"), "$.release_mode", id="enum"),
    pytest.param([CLAIM], "$", id="array-not-object"),
    pytest.param("claim", "$", id="string-not-object"),
])
def test_wrong_types_are_invalid_with_exit_1(offline: Daemon, record: Any, path: str) -> None:
    result = offline.ctl("validate", "--family", "claim", "-", "--json", input=json.dumps(record).encode())
    assert result.returncode == 1
    assert json.loads(result.stdout)["violations"][0]["path"] == path


def test_list_names_every_family_with_a_description(offline: Daemon) -> None:
    text = offline.ctl("validate", "--list")
    listed = offline.ctl("validate", "--list", "--json")
    assert text.returncode == listed.returncode == 0
    families = {f["name"]: f["description"] for f in json.loads(listed.stdout)["families"]}
    assert {"claim", "heartbeat", "batch", "event", "lane_closed", "archive", "route",
            "capacity_reservation", "batch_blocker"} <= set(families)
    assert all(families.values())
    assert [line.split()[0] for line in text.stdout.decode().splitlines()] == list(families)


@pytest.mark.parametrize(("content", "message"), [
    pytest.param(b"", "is not JSON: Input data was truncated", id="empty-file"),
    pytest.param(b"\xff\xfe{\"a\": 1}", "is not JSON", id="not-utf8"),
    pytest.param(b'{"batch_id": "b\xff"}', "is not JSON: Invalid UTF-8", id="utf8-inside-string"),
    pytest.param(b"{not json", "is not JSON", id="garbage"),
    pytest.param(b'{"a": 1} {"b": 2}', "is not JSON", id="two-documents"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "nesting too deep", id="deep-nesting"),
])
def test_input_that_is_not_json_is_exit_1_with_one_line(offline: Daemon, content: bytes,
                                                         message: str) -> None:
    path = write(offline, "bad.json", content)
    result = offline.ctl("validate", "--family", "batch", str(path))
    assert result.returncode == 1
    assert message in result.stderr.decode()
    assert len(result.stderr.decode().strip().splitlines()) == 1
    assert result.stdout == b""


def test_deep_but_decodable_nesting_is_just_invalid(offline: Daemon) -> None:
    content = b'{"batch_id": "b1", "lanes": [' + b"[" * 900 + b"]" * 900 + b"]}"
    result = offline.ctl("validate", "--family", "batch", "-", "--json", input=content)
    assert result.returncode == 1
    assert json.loads(result.stdout)["violations"][0]["path"].startswith("$.lanes[0]")


def test_five_megabytes_is_refused_before_parsing(offline: Daemon) -> None:
    path = write(offline, "big.json", b'{"x": "' + b"a" * (5 * 1024 * 1024) + b'"}')
    result = offline.ctl("validate", "--family", "claim", str(path))
    assert result.returncode == 1
    assert "larger than 1048576 bytes" in result.stderr.decode()


def test_unknown_family_is_a_usage_error_naming_the_known_ones(offline: Daemon) -> None:
    path = write(offline, "claim.json", json.dumps(CLAIM))
    result = offline.ctl("validate", "--family", "claims\x1b[31m", str(path))
    assert result.returncode == 1
    err = result.stderr.decode()
    assert err.startswith("unknown record family: claims\\x1b[31m (known: claim, heartbeat")


@pytest.mark.parametrize("args", [
    pytest.param((), id="nothing"),
    pytest.param(("--family", "claim"), id="no-file"),
    pytest.param(("x.json",), id="no-family"),
    pytest.param(("--list", "--family", "claim"), id="list-with-family"),
])
def test_incomplete_invocations_are_usage_errors(offline: Daemon, args: tuple[str, ...]) -> None:
    assert offline.ctl("validate", *args).returncode == 1


@pytest.mark.parametrize("name", ["missing.json", "."])
def test_unreadable_file_is_exit_2(offline: Daemon, name: str) -> None:
    result = offline.ctl("validate", "--family", "claim", str(offline.base / name))
    assert result.returncode == 2
    assert result.stderr.decode().startswith("record unreadable: ")  # agent-coord's form


def test_validate_never_imports_daemon_side_libraries(offline: Daemon) -> None:
    path = write(offline, "claim.json", json.dumps(CLAIM))
    result = subprocess.run([PYTHON, "-c", PROBE, "validate", "--family", "claim", str(path)],
                            env=offline.env(), capture_output=True, timeout=30, cwd=str(offline.base))
    report = json.loads(result.stderr.decode().strip().splitlines()[-1])
    assert report["code"] == 0, result.stderr
    # The validators live in agentcoordd.coord (imported by this command only); the
    # libraries that make ctl start-up slow must still stay out.
    assert [m for m in report["loaded"] if m.split(".")[0] in FORBIDDEN] == []
