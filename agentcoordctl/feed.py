"""`events`: a batch's events in (at, event_id) order; `--follow` streams new ones.

    events --batch-id B [--after CURSOR] [--type T]… [--lane L] [--json]
    events --batch-id B --follow [--until-type T] [--timeout S] …

`--json` prints one compact object per line, each with its `cursor`; text
prints one line per event (at, type, lane, agent, message, cursor). Resume
with `--after` the cursor of the last line you handled: nothing is lost or
repeated (docs/events.md has the rules, late arrivals included).

`--follow` is one long request: the daemon streams Progress frames from the
batch's shared feed. It ends with exit 0 when an `--until-type` event arrived
(printed last), exit 2 after `--timeout` seconds ("events: timed out …", as
`wait --timeout`). If the daemon stops or the connection breaks, ctl follows
again from the last cursor it saw (a restarted daemon answers; stderr says
so). A closed stdout (`| head -1`) ends the follow quietly, exit 0.
"""

from __future__ import annotations

import select
import sys
import time
from typing import Any

from agentcoordctl import client, output, spec
from agentcoordctl.options import (
    BACKEND, BATCH_ID_REQUIRED, JSON, Globals, eprint, fail, positive_seconds, send, show,
)
from agentcoordctl.render import printable
from agentcoordctl.spec import Exit, Opt
from agentcoordd import protocol as p

FOREVER = 10 * 365 * 86400.0  # a follow without --timeout: one request, "no" deadline
MARGIN = 5.0  # ctl waits this much longer than the daemon's own budget
RETRY = 1.0  # seconds between attempts to follow again after a lost daemon


class OutputClosed(Exception):
    """stdout went away: the follow ends (the closed-stdout convention, output.py)."""


class Printer:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.cursor: str | None = None
        self.printed = 0

    def rows(self, rows: Any) -> None:
        for row in rows if isinstance(rows, list) else []:
            if not isinstance(row, dict):
                continue
            self.cursor = row.get("cursor") or self.cursor
            sys.stdout.write((_json_line(row) if self.as_json else _text_line(row)) + "\n")
            self.printed += 1
        sys.stdout.flush()
        if output.failed():
            raise OutputClosed()


def _json_line(row: dict[str, Any]) -> str:
    import msgspec

    return msgspec.json.encode(row).decode("utf-8")


def _text_line(row: dict[str, Any]) -> str:
    row = printable(row)
    what = row.get("message") or row.get("status") or ""
    late = " (late)" if row.get("late") else ""
    return "  ".join(str(x) for x in (row.get("at") or "-", row.get("type") or "-",
                                      row.get("lane") or "-", row.get("agent_id") or "-",
                                      what, row.get("cursor") or "")) + late


def _stdout_hung_up() -> bool:
    """The reader of our stdout pipe is gone (seen between events, on keepalives)."""
    try:
        poller = select.poll()
        poller.register(1, 0)
        return any(mask & (select.POLLERR | select.POLLHUP) for _, mask in poller.poll(0))
    except (OSError, ValueError):
        return False


def events(*, batch_id: str, after: str | None, follow: bool, type: list[str] | None,
           lane: str | None, json: bool, until_type: str | None, timeout: float | None,
           selection: p.Selection) -> None:
    if not follow and (until_type is not None or timeout is not None):
        raise fail("--until-type and --timeout need --follow", p.EXIT_USAGE)
    printer = Printer(json)
    if not follow:
        response = send(p.Events(batch_id=batch_id, after=after, types=list(type or []),
                                 lane=lane, selection=selection))
        payload = response.payload if isinstance(response.payload, dict) else {}
        try:
            printer.rows(payload.get("events"))
        except OutputClosed:
            raise Exit(response.exit_code) from None
        show(msgspec_replace(response), as_json=False)
    _follow(printer, batch_id=batch_id, after=after, types=list(type or []), lane=lane,
            until_type=until_type, timeout=timeout, selection=selection)


def msgspec_replace(response: p.Response) -> p.Response:
    """The response without its payload (already printed as lines)."""
    import msgspec

    return msgspec.structs.replace(response, payload=None)


def _follow(printer: Printer, *, batch_id: str, after: str | None, types: list[str],
            lane: str | None, until_type: str | None, timeout: float | None,
            selection: p.Selection) -> None:
    started = time.monotonic()
    printer.cursor = after or None
    shown_error: str | None = None
    lost = ""

    def on_progress(frame: p.Progress) -> None:
        nonlocal shown_error
        data = frame.data if isinstance(frame.data, dict) else {}
        if "error" in data and data["error"] != shown_error:
            shown_error = data["error"]
            eprint(f"warning: feed of {batch_id}: {printable(shown_error)}" if shown_error
                   else f"feed of {batch_id}: readable again")
        printer.rows(data.get("events"))
        if data.get("cursor"):
            printer.cursor = data["cursor"]
        if frame.message == "keepalive" and _stdout_hung_up():
            raise OutputClosed()

    while True:
        remaining = None if timeout is None else timeout - (time.monotonic() - started)
        if remaining is not None and remaining <= 0:
            _timed_out(timeout, until_type, lost)
        request = p.Events(batch_id=batch_id, after=printer.cursor, types=types, lane=lane,
                           follow=True, until_type=until_type, wait_seconds=remaining,
                           selection=selection)
        request.caller = client.caller()
        try:
            # A live daemon sends a frame every second: silence for a whole call's
            # timeout means a hung daemon, and following again is the way out.
            response, _ = client.request(
                request, timeout=FOREVER if remaining is None else remaining + MARGIN,
                on_progress=on_progress, idle=Globals.timeout or client.timeout_from_env())
        except OutputClosed:
            raise Exit(0) from None
        except client.ClientError as exc:
            if exc.exit_code == p.EXIT_USAGE:
                raise fail(exc.message, exc.exit_code) from None
            if exc.message != lost:
                lost = exc.message
                eprint(f"events: {exc.message}; following again from the last cursor")
            time.sleep(RETRY)
            continue
        payload = response.payload if isinstance(response.payload, dict) else {}
        printer.cursor = payload.get("cursor") or printer.cursor
        if payload.get("stopping"):
            eprint(f"events: {response.error or 'agentcoordd stopped'}; following again from "
                   "the last cursor")
            time.sleep(RETRY)
            continue
        if payload.get("timed_out"):
            _timed_out(timeout, until_type, lost)
        show(msgspec_replace(response))


def _timed_out(timeout: float | None, until_type: str | None, why: str) -> None:
    what = f"no {until_type} event" if until_type else "follow ended"
    eprint(f"events: timed out after {timeout:g}s ({what}{'; ' + why if why else ''})")
    raise Exit(p.EXIT_OPERATIONAL)


COMMANDS = (spec.Command(
    ("events",), "Print a batch's events in (at, event_id) order; --follow streams new ones.",
    (BATCH_ID_REQUIRED,
     Opt("--after", "after", metavar="CURSOR",
         help="Only events after this cursor (a `cursor` printed by events)."),
     Opt("--follow", "follow", "flag", help="Keep streaming events as they arrive."),
     Opt("--type", "type", "many", metavar="TYPE", help="Only events of this type (repeatable)."),
     Opt("--lane", "lane", metavar="LANE", help="Only events of this lane."),
     Opt("--until-type", "until_type", metavar="TYPE",
         help="--follow: end (exit 0) once an event of this type arrived (printed last)."),
     Opt("--timeout", "timeout", "custom", parse=positive_seconds, metavar="SECONDS",
         help="--follow: give up after this long: exit 2 (like wait --timeout)."),
     JSON, BACKEND),
    events),)
