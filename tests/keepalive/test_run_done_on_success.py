"""`run --done-on-success`: a terminal release that fails is not success, and
leaves no claim behind; `--lane` names the lane to close."""

from __future__ import annotations

import json

from integration.helpers import Daemon

from .support import ctl, events

MACHINE = {"AGENT_COORD_MACHINE_ID": "m-run"}
# target 7 is listed by two lanes: only --lane can say which one closes
BATCH = {"batch_id": "b-run", "repo": "acme/widgets", "lanes": [
    {"name": "api", "owner": "runner", "targets": ["7", "8"]},
    {"name": "ui", "owner": "runner", "targets": ["7"]},
]}


def _register(d: Daemon) -> None:
    manifest = d.base / "batch.json"
    manifest.write_text(json.dumps(BATCH))
    assert ctl(d, "register-batch", "--file", str(manifest)).returncode == 0


def _run(d: Daemon, target: str, *extra: str):
    return ctl(d, "run", "--agent-id", "runner", "--repo", "acme/widgets", "--target", target,
               "--batch-id", "b-run", "--done-on-success", *extra, "--", "true", **MACHINE)


def _claim(d: Daemon, target: str) -> dict:
    return json.loads((d.root / "claims" / "acme" / "widgets" / f"{target}.json").read_text())


def _closed(d: Daemon) -> dict[str, str]:
    return {e["lane"]: e["terminal"] for e in events(d, "b-run") if e.get("type") == "lane_closed"}


def test_an_ambiguous_close_exits_nonzero_releases_plainly_and_names_lane(daemon: Daemon) -> None:
    _register(daemon)
    result = _run(daemon, "7")
    assert result.returncode == 1, result.stderr
    assert b"does not match exactly one lane in batch b-run" in result.stderr
    assert b"(pass --lane NAME); releasing acme/widgets#7 without closing the lane" in result.stderr
    claim = _claim(daemon, "7")
    assert claim["status"] == "released" and "terminal" not in claim
    assert _closed(daemon) == {}


def test_lane_names_the_lane_the_terminal_release_closes(daemon: Daemon) -> None:
    _register(daemon)
    result = _run(daemon, "7", "--lane", "ui")
    assert result.returncode == 0, result.stderr
    assert _closed(daemon) == {"ui": "done"}
    claim = _claim(daemon, "7")
    assert (claim["status"], claim["terminal"], claim["closed_by"]["machine"]) == ("released", "done", "m-run")


def test_a_conflicting_closeout_exits_nonzero_and_leaves_no_active_claim(daemon: Daemon) -> None:
    _register(daemon)
    first = ctl(daemon, "record-event", "--batch-id", "b-run", "--type", "lane_closed", "--lane", "api",
                "--agent-id", "runner", "--repo", "acme/widgets", "--target", "8",
                "--terminal", "abandoned", **MACHINE)
    assert first.returncode == 0, first.stderr
    result = _run(daemon, "8")
    assert result.returncode == 1, result.stderr
    assert b"conflicting terminal closeout for lane api" in result.stderr
    assert b"releasing acme/widgets#8 without closing the lane" in result.stderr
    assert _claim(daemon, "8")["status"] == "released"
    assert _closed(daemon) == {"api": "abandoned"}


def test_lane_without_done_on_success_is_a_usage_error(daemon: Daemon) -> None:
    marker = daemon.base / "must-not-exist"
    result = ctl(daemon, "run", "--agent-id", "runner", "--repo", "acme/widgets", "--target", "9",
                 "--lane", "ui", "--", "touch", str(marker))
    assert result.returncode == 1
    assert b"--lane only applies with --done-on-success" in result.stderr
    assert not marker.exists()
