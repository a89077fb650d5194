"""Requests that get answers, through ctl and real daemons: `answer`,
`record-event --wait-answer`, `wait --until-answered`, open requests in status
and health — two agents on two daemons sharing one local state root."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration import answer_flow
from tests.integration.helpers import PYTHON, Daemon

BATCH = "wave-9"


def out(result: subprocess.CompletedProcess) -> str:
    return result.stdout.decode()


def err(result: subprocess.CompletedProcess) -> str:
    return result.stderr.decode()


def register(d: Daemon) -> None:
    answer_flow.register(agent(d), BATCH, d.base)


def request_help(d: Daemon, *extra: str) -> str:
    result = d.ctl("record-event", "--batch-id", BATCH, "--type", "help_requested",
                   "--reason", "question", "--lane", "parser", "--agent-id", "worker-1",
                   "--message", "which database?", "--json", *extra)
    assert result.returncode == 0, err(result)
    return json.loads(out(result))["event"]["event_id"]


@pytest.fixture
def pair(daemon_factory: Any) -> tuple[Daemon, Daemon]:
    """Two daemons (own sockets, own state dirs) on one shared local root."""
    one, two = daemon_factory("a"), daemon_factory("b")
    two.root = one.root
    one.start()
    two.start()
    register(one)
    return one, two


def spawn(d: Daemon, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "agentcoordctl.cli", *args], env=d.env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(d.base))


def agent(d: Daemon, machine: str = "") -> answer_flow.Agent:
    env = {"AGENT_COORD_MACHINE_ID": machine} if machine else {}
    return answer_flow.Agent(ctl=lambda *args: d.ctl(*args, env=env),
                             spawn=lambda *args: spawn(d, *args, **env))


def open_requests(d: Daemon) -> list[dict[str, Any]]:
    return answer_flow.open_requests(agent(d), BATCH)


def wait_open(d: Daemon, count: int) -> list[dict[str, Any]]:
    return answer_flow.wait_open(agent(d), BATCH, count)


def test_answer_round_trip_between_two_agents_on_two_daemons(pair: tuple[Daemon, Daemon]) -> None:
    one, two = pair
    latency = answer_flow.round_trip(agent(one, "m-one"), agent(two, "m-two"), BATCH)
    print(f"answer round trip on a local root: answer to print {latency * 1000:.0f} ms")
    assert latency < 5
    shown = json.loads(out(one.ctl("status", "--batch-id", BATCH, "--json")))["events"]
    answer = next(e for e in shown if e["type"] == "help_answered")
    assert answer["machine_id"] == "m-two"  # agent 2's machine, as record-event attributes


def test_a_waiter_survives_a_daemon_restart(pair: tuple[Daemon, Daemon]) -> None:
    one, two = pair
    asked = request_help(one)
    waiting = spawn(one, "wait", "--until-answered", "--batch-id", BATCH, "--event-id", asked,
                    "--timeout", "40")
    try:
        time.sleep(1.0)
        one.stop()
        one.start()
        assert two.ctl("answer", "--batch-id", BATCH, "--to-event", asked,
                       "--message", "after the restart").returncode == 0
        stdout, stderr = waiting.communicate(timeout=40)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0, stderr.decode()
    assert stdout.decode().rstrip().endswith("after the restart")


def test_wait_until_answered_returns_the_earliest_of_two_answers(pair: tuple[Daemon, Daemon]) -> None:
    one, two = pair
    asked = request_help(one)
    first = two.ctl("answer", "--batch-id", BATCH, "--to-event", asked, "--message", "first")
    assert first.returncode == 0 and err(first) == "", err(first)
    second = one.ctl("answer", "--batch-id", BATCH, "--to-event", asked, "--message", "second")
    assert second.returncode == 0
    assert "already has 1 answer(s)" in err(second)
    result = one.ctl("wait", "--until-answered", "--batch-id", BATCH, "--event-id", asked,
                     "--json", "--timeout", "5")
    assert result.returncode == 0, err(result)
    payload = json.loads(out(result))
    assert payload["met"] and payload["answers"] == 2
    assert payload["answer"]["message"] == "first" and payload["request"]["event_id"] == asked


def test_escalation_is_answered_with_escalation_answered_and_json_waits_print_one_object(
        pair: tuple[Daemon, Daemon]) -> None:
    one, two = pair
    asking = spawn(one, "record-event", "--batch-id", BATCH, "--type", "escalation_requested",
                   "--from-route", "small/low", "--to-route", "large/high", "--evidence", "stuck",
                   "--wait-answer", "30", "--json")
    try:
        asked = wait_open(two, 1)[0]["event_id"]
        result = two.ctl("answer", "--batch-id", BATCH, "--to-event", asked, "--message",
                         "granted", "--decision", "large/high", "--json")
        assert result.returncode == 0, err(result)
        assert json.loads(out(result))["event"]["type"] == "escalation_answered"
        stdout, stderr = asking.communicate(timeout=30)
    finally:
        if asking.poll() is None:
            asking.kill()
            asking.wait()
    assert asking.returncode == 0, stderr.decode()
    payload = json.loads(stdout)
    assert payload["met"] and payload["request"]["event_id"] == asked
    assert (payload["answer"]["type"], payload["answer"]["decision"]) == ("escalation_answered",
                                                                          "large/high")


def test_no_answer_times_out_with_exit_2_and_one_line(pair: tuple[Daemon, Daemon]) -> None:
    one, _ = pair
    started = time.monotonic()
    result = one.ctl("record-event", "--batch-id", BATCH, "--type", "help_requested",
                     "--reason", "question", "--wait-answer", "1.5")
    assert result.returncode == 2
    assert 1.4 < time.monotonic() - started < 10
    assert out(result) == ""
    lines = [line for line in err(result).splitlines() if line.startswith("wait:")]
    assert len(lines) == 1 and "no answer yet" in lines[0] and "UNKNOWN" in lines[0]
    assert len(wait_open(one, 1)) == 1

    asked = wait_open(one, 1)[0]["event_id"]
    waited = one.ctl("wait", "--until-answered", "--batch-id", BATCH, "--event-id", asked,
                     "--timeout", "1")
    assert waited.returncode == 2 and "no answer yet" in err(waited)


@pytest.mark.parametrize("case", ["not-a-request", "unknown-id", "wrong-batch", "bad-id",
                                  "blank-message"])
def test_answer_refuses_what_is_not_an_open_request_with_exit_1(
        pair: tuple[Daemon, Daemon], case: str) -> None:
    one, two = pair
    asked = request_help(one)
    other = one.ctl("record-event", "--batch-id", BATCH, "--type", "note", "--message", "x",
                    "--json")
    note = json.loads(out(other))["event"]["event_id"]
    batch, event, message = {
        "not-a-request": (BATCH, note, "hi"),
        "unknown-id": (BATCH, "20260101T000000.000000Z-deadbeef", "hi"),
        "wrong-batch": ("wave-8", asked, "hi"),
        "bad-id": (BATCH, "../x", "hi"),
        "blank-message": (BATCH, asked, ""),
    }[case]
    result = two.ctl("answer", "--batch-id", batch, "--to-event", event, "--message", message)
    assert result.returncode == 1, err(result)
    assert len(err(result).strip().splitlines()) == 1 and "Traceback" not in err(result)
    assert open_requests(one)[0]["event_id"] == asked


def test_wait_usage_errors_are_exit_1(pair: tuple[Daemon, Daemon]) -> None:
    one, _ = pair
    note = json.loads(out(one.ctl("record-event", "--batch-id", BATCH, "--type", "note",
                                  "--json")))["event"]["event_id"]
    for args in (("wait", "--until-answered", "--batch-id", BATCH),
                 ("wait", "--until-answered", "--batch-id", BATCH, "--event-id", note),
                 ("record-event", "--batch-id", BATCH, "--type", "note", "--wait-answer", "5"),
                 ("record-event", "--batch-id", BATCH, "--type", "help_answered",
                  "--message", "x")):
        result = one.ctl(*args)
        assert result.returncode == 1, (args, err(result))
        assert len(err(result).strip().splitlines()) == 1, err(result)


def test_health_warns_about_a_request_open_past_the_threshold(pair: tuple[Daemon, Daemon]) -> None:
    one, _ = pair
    request_help(one)
    calm = json.loads(out(one.ctl("health", "--batch-id", BATCH, "--json")))
    assert len(calm["open_requests"]) == 1
    assert calm["signals"]["request_unanswered"] == 0
    time.sleep(1.1)
    result = one.ctl("health", "--batch-id", BATCH, "--unanswered-after", "1", "--json")
    payload = json.loads(out(result))
    assert result.returncode == 1
    assert payload["signals"]["request_unanswered"] == 1
    assert [w["signal"] for w in payload["warnings"]].count("request_unanswered") == 1
    text = out(one.ctl("health", "--batch-id", BATCH, "--unanswered-after", "1"))
    assert "request_unanswered" in text and "open requests" in text


def test_validate_accepts_answers_and_refuses_malformed_ones(tmp_path: Path, daemon: Daemon) -> None:
    good = {"schema_version": 1, "event_id": "20260803T081500.000000Z-1a2b3c4d",
            "batch_id": BATCH, "type": "help_answered", "at": "2026-08-03T08:15:00Z",
            "reply_to": "20260803T080000.000000Z-0a1b2c3d", "message": "ok", "decision": "go"}
    cases = {"good": (good, 0), "no-reply-to": ({**good, "reply_to": None}, 1),
             "no-message": ({k: v for k, v in good.items() if k != "message"}, 1),
             "decision-on-error": ({**good, "type": "error", "severity": "P2", "category": "ci",
                                    "reply_to": None}, 1)}
    for name, (record, code) in cases.items():
        record = {k: v for k, v in record.items() if v is not None}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(record))
        result = daemon.ctl("validate", "--family", "event", str(path))
        assert result.returncode == code, (name, out(result), err(result))
