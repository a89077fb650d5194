"""The batch manifest docs/contracts.md shows is one `register-batch` accepts, and
register-batch and `validate --family batch` agree on dependency refs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .helpers import Daemon

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "contracts" / "fixtures" / "valid" / "batch--two-lanes.json"


def documented_manifest() -> dict:
    text = (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    section = text.split("## A batch manifest", 1)[1]
    return json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))


def _file(d: Daemon, name: str, data: dict) -> str:
    path = d.base / name
    path.write_text(json.dumps(data))
    return str(path)


def test_the_documented_manifest_registers_with_every_field_kept(daemon: Daemon) -> None:
    manifest = documented_manifest()
    assert len(manifest["lanes"]) == 2 and manifest["lanes"][1]["depends_on"] == ["wave-9:parser"]
    result = daemon.ctl("register-batch", "--file", _file(daemon, "wave-9.json", manifest))
    assert result.returncode == 0, result.stderr
    stored = json.loads((daemon.root / "batches" / "wave-9.json").read_text())
    assert {k: stored[k] for k in manifest} == manifest


def test_the_published_valid_batch_fixture_validates_and_registers(daemon: Daemon) -> None:
    assert daemon.ctl("validate", "--family", "batch", str(FIXTURE)).returncode == 0
    result = daemon.ctl("register-batch", "--file", str(FIXTURE))
    assert result.returncode == 0, result.stderr


def test_a_bare_dependency_is_refused_by_validate_and_register_naming_the_form(daemon: Daemon) -> None:
    bare = json.loads(FIXTURE.read_text())
    bare["lanes"][1]["depends_on"] = ["parser"]
    path = _file(daemon, "bare.json", bare)
    expected = ("batch lane lexer has invalid dependency ref: parser "
                "(expected <batch-id>:<lane>, e.g. wave-9:parser)")
    checked = daemon.ctl("validate", "--family", "batch", path)
    assert checked.returncode == 1
    assert f"$.lanes[1].depends_on: {expected}" in checked.stdout.decode() + checked.stderr.decode()
    registered = daemon.ctl("register-batch", "--file", path)
    assert registered.returncode == 1
    assert registered.stderr.decode().strip() == expected


def test_an_unknown_lane_of_the_same_batch_is_refused_by_both(daemon: Daemon) -> None:
    ghost = json.loads(FIXTURE.read_text())
    ghost["lanes"][1]["depends_on"] = ["wave-9:ghost"]
    path = _file(daemon, "ghost.json", ghost)
    expected = "batch lane lexer depends on unknown lane wave-9:ghost"
    checked = daemon.ctl("validate", "--family", "batch", path)
    assert checked.returncode == 1 and expected in checked.stdout.decode() + checked.stderr.decode()
    registered = daemon.ctl("register-batch", "--file", path)
    assert (registered.returncode, registered.stderr.decode().strip()) == (1, expected)
