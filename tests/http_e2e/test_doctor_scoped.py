"""doctor --deep with a token scoped to part of the state (as agent-coord):
the families it cannot read are reported as forbidden, the ones it reads
partly as filtered, and the verdict is still `status: ok` (exit 0). A stack
report says degraded (exit 1)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from .conftest import err, out


def _claims_only(worker: Any, node: Any) -> str:
    """A fresh machine token that reads and writes claims only."""
    name = f"claims-only-{uuid.uuid4().hex[:6]}"
    made = node.daemon.ctl("token", "provision", name, "--local", "--persist-to", str(worker.persist_to),
                           "--read-prefix", "claims", "--write-prefix", "claims", timeout=120)
    assert made.returncode == 0, err(made)
    return out(made).strip()


def test_deep_doctor_with_a_claims_only_token_is_ok_naming_the_forbidden_families(
        e2e_worker: Any, node_factory: Any) -> None:
    n = node_factory("n", e2e_worker, "m-a")
    n.token = _claims_only(e2e_worker, n)
    result = n.ctl("doctor", "--deep", "--json")
    assert result.returncode == 0, out(result) + err(result)
    report = json.loads(out(result))
    assert report["status"] == "ok"
    families = {f["prefix"]: f for f in report["families"]}
    assert families["claims"]["status"] == "ok"
    for forbidden in ("heartbeats", "batches", "events", "archive"):
        assert families[forbidden]["status"] == "forbidden", families[forbidden]
    assert "heartbeats not readable by scoped token" in report["degraded"]
    assert report["section_notes"]["events"] == "events not readable by scoped token"
    assert "error" not in report

    text = n.ctl("doctor", "--deep")
    assert text.returncode == 0, out(text) + err(text)
    assert "status: ok" in out(text)
    assert "heartbeats: forbidden" in out(text)


def test_deep_doctor_with_a_token_reading_part_of_a_family_reports_it_filtered(
        e2e_worker: Any, node_factory: Any) -> None:
    w = node_factory("w", e2e_worker, "widgets-only")
    result = w.ctl("doctor", "--deep", "--json")
    assert result.returncode == 0, out(result) + err(result)
    report = json.loads(out(result))
    assert report["status"] == "ok"
    families = {f["prefix"]: f["status"] for f in report["families"]}
    assert families["claims"] == "partial"
    assert families["heartbeats"] == "forbidden"
    assert report["section_notes"]["claims"] == "claims filtered by scoped token"


def test_deep_stack_doctor_with_a_scoped_token_is_degraded(e2e_worker: Any, node_factory: Any) -> None:
    n = node_factory("n", e2e_worker, "m-a")
    n.token = _claims_only(e2e_worker, n)
    result = n.ctl("doctor", "--deep", "--stack-json", "--api-url", e2e_worker.url)
    assert result.returncode == 1, out(result) + err(result)
    stack = json.loads(out(result))
    deep = next(c for c in stack["checks"] if c["id"] == "resources.deep")
    assert deep["status"] == "degraded"
    assert "heartbeats" in deep["details"]["forbidden_prefixes"]
