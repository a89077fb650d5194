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


def test_the_readme_terminal_closeout_runs_as_written_and_is_factual(daemon: Daemon) -> None:
    import shlex

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## For agents", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```sh\n(.*?)```", section, re.S)[1]
    (daemon.base / "wave-9.json").write_text(json.dumps(documented_manifest()))
    env: dict[str, str] = {}
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "export":
            env.update(word.split("=", 1) for word in words[1:])
            continue
        assert words[0] == "agentcoordctl", line
        args = [str(daemon.base / w) if w == "wave-9.json" else w for w in words[1:]]
        result = daemon.ctl(*args, env=env)
        if words[1] == "batch-audit":  # lexer is not closed yet: incomplete, parser complete
            assert result.returncode == 1, result.stdout
            assert b"- lane parser owner worker-parser complete" in result.stdout
        else:
            assert result.returncode == 0, (line, result.stderr)
        assert b"UNKNOWN" not in result.stderr, (line, result.stderr)
    claim = json.loads((daemon.root / "claims" / "acme" / "widgets" / "311.json").read_text())
    assert (claim["terminal"], claim["closed_by"]) == ("done", {"agent_id": "worker-parser", "machine": "m5"})
