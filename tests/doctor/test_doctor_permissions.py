"""Unreadable root and unreadable record, with permission bits enforced.

The suite may run as root (CI), where permission bits are not enforced; the
daemon and every ctl call then run as `agentcoord-other` (setpriv,
tests/conftest.py `permission_bits_apply`), never skipped in CI.
"""

from __future__ import annotations

import json

from .conftest import UnprivilegedDaemon


def out(result) -> str:
    return result.stdout.decode()


def stack_check(payload: dict, check_id: str) -> dict:
    (check,) = [c for c in payload["checks"] if c["id"] == check_id]
    return check


def arrange(d: UnprivilegedDaemon) -> None:
    d.hand_over()
    d.start()
    result = d.ctl("claim", "--agent-id", "agent-a", "--repo", "acme/widgets", "--target", "1")
    assert result.returncode == 0, result.stderr.decode()


def test_unreadable_root_fails_lightweight_and_stack(unprivileged_daemon: UnprivilegedDaemon) -> None:
    d = unprivileged_daemon
    arrange(d)
    d.root.chmod(0o000)

    light = d.ctl("doctor", "--json")
    assert light.returncode == 2
    report = json.loads(out(light))
    assert report["status"] == "error"
    assert report["error"] == f"state root is not readable: {d.root} (Permission denied)"

    stack = d.ctl("doctor", "--stack-json", "--deep", "--state-root", str(d.root))
    assert stack.returncode == 2
    payload = json.loads(out(stack))
    assert payload["status"] == "failed"
    backend = stack_check(payload, "backend.readability")
    assert backend["status"] == "failed"
    assert backend["details"]["error"] == f"state root is not readable: {d.root} (Permission denied)"
    assert stack_check(payload, "resources.deep")["details"] == {
        "mode": "deep", "reason": "backend_unavailable"}


def test_unreadable_record_passes_lightweight_and_fails_deep_naming_it(
        unprivileged_daemon: UnprivilegedDaemon) -> None:
    d = unprivileged_daemon
    arrange(d)
    record = d.root / "claims" / "acme" / "widgets" / "1.json"
    record.chmod(0o000)

    light = d.ctl("doctor", "--json")
    assert light.returncode == 0, out(light)

    deep = d.ctl("doctor", "--deep", "--json")
    assert deep.returncode == 2
    report = json.loads(out(deep))
    assert report["failing_path"] == "claims/acme/widgets/1.json"
    assert report["error"].startswith("claims: cannot read claims/acme/widgets/1.json under ")
    assert report["error"].endswith("Permission denied")

    stack = d.ctl("doctor", "--stack-json", "--deep", "--state-root", str(d.root))
    assert stack.returncode == 2
    resources = stack_check(json.loads(out(stack)), "resources.deep")
    assert resources["details"]["failures"][0]["path"] == "claims/acme/widgets/1.json"
