"""The contract's working statuses and QA event statuses, end to end."""

from __future__ import annotations

import json

import pytest

from integration.helpers import Daemon


@pytest.mark.parametrize("status", ["queued", "token_limit_pause", "continued"])
def test_contract_working_statuses_are_accepted_without_a_warning(daemon: Daemon, status: str) -> None:
    result = daemon.ctl("heartbeat", "--agent-id", "agent-a", "--status", status)
    assert (result.returncode, result.stderr) == (0, b"")
    record = json.loads((daemon.root / "heartbeats/agent-a.json").read_text())
    assert record["status"] == status and "status_raw" not in record


def test_config_show_lists_them_as_working_statuses(daemon: Daemon) -> None:
    payload = json.loads(daemon.ctl("config", "show", "--json").stdout)
    working = payload["heartbeat_status_vocabulary"]["working"]
    assert working[-3:] == ["queued", "token_limit_pause", "continued"]
    assert "queued" not in payload["dependency_terminal_statuses"]


def test_qa_statuses_do_not_warn_on_qa_events_but_still_warn_elsewhere(
        daemon: Daemon, batch: dict) -> None:
    qa = daemon.ctl("record-event", "--batch-id", "b1", "--type", "qa.validation_passed",
                    "--status", "passed")
    other = daemon.ctl("record-event", "--batch-id", "b1", "--type", "done", "--status", "passed")
    assert (qa.returncode, qa.stderr) == (0, b"")
    assert other.returncode == 0 and other.stderr.startswith(b'warning: status "passed" is not in')
