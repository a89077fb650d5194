"""batch-audit on a batch gc archived: named as archived (with the archive path),
and audited from the archive with --include-archived."""

from __future__ import annotations

import json
import time

from .helpers import Daemon

MACHINE = {"AGENT_COORD_MACHINE_ID": "m1"}
BATCH = {"batch_id": "b-arch", "repo": "acme/widgets",
         "lanes": [{"name": "api", "owner": "agent-a", "targets": ["1"]}]}


def _archived_batch(d: Daemon) -> None:
    manifest = d.base / "b.json"
    manifest.write_text(json.dumps(BATCH))
    assert d.ctl("register-batch", "--file", str(manifest)).returncode == 0
    assert d.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
                 "--batch-id", "b-arch", env=MACHINE).returncode == 0
    closed = d.ctl("release", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1",
                   "--terminal", "done", env=MACHINE)
    assert closed.returncode == 0, closed.stderr
    assert d.ctl("batch-audit", "--batch-id", "b-arch").returncode == 0
    time.sleep(1.1)  # past a zero-day hot window
    swept = d.ctl("gc", "--execute", "--hot-days", "0")
    assert swept.returncode == 0, swept.stderr
    assert not (d.root / "batches" / "b-arch.json").exists()
    assert (d.root / "archive" / "batches" / "b-arch.json").exists()
    assert not list((d.root / "events" / "b-arch").glob("*.json"))  # all compacted
    assert list((d.root / "archive" / "events" / "b-arch").glob("compact-*.json"))


def test_an_archived_batch_is_named_archived_with_its_path_not_unregistered(daemon: Daemon) -> None:
    _archived_batch(daemon)
    result = daemon.ctl("batch-audit", "--batch-id", "b-arch", "--json")
    assert result.returncode == 2
    report = json.loads(result.stdout)
    assert report["verdict"] == "unknown"
    assert report["reason"] == ("batch b-arch is archived at archive/batches/b-arch.json (gc): "
                                "pass --include-archived to audit it from the archive")
    assert report["archive_path"] == "archive/batches/b-arch.json"


def test_include_archived_audits_the_archived_manifest_and_compacted_events(daemon: Daemon) -> None:
    _archived_batch(daemon)
    result = daemon.ctl("batch-audit", "--batch-id", "b-arch", "--include-archived", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert (report["verdict"], report["archive_path"]) == ("complete", "archive/batches/b-arch.json")
    assert [(lane["name"], lane["complete"]) for lane in report["lanes"]] == [("api", True)]
    text = daemon.ctl("batch-audit", "--batch-id", "b-arch", "--include-archived")
    assert text.stdout.decode().splitlines()[:2] == [
        "batch-audit b-arch complete", "audited from the archive: archive/batches/b-arch.json"]


def test_an_unknown_batch_is_still_not_registered_with_or_without_the_flag(daemon: Daemon) -> None:
    for extra in ((), ("--include-archived",)):
        result = daemon.ctl("batch-audit", "--batch-id", "nope", "--json", *extra)
        assert result.returncode == 2
        assert json.loads(result.stdout)["reason"] == "batch nope is not registered"
