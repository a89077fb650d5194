"""status --watch: a live-refreshing view of batches, lanes and claims.

Every `--interval` seconds ctl sends one `Overview` request (each bounded by
`--timeout`, like any call) and redraws:

* on a terminal: the screen is redrawn in place (cursor hidden), liveness in
  colour (live green, stale yellow, dead red, unknown grey; `NO_COLOR`
  honoured), lanes with owner, state, holder, machine, status, the holder's
  liveness, blocked_on, PR and
  QA, a STOP REQUESTED badge on batches with a stop request, claims and
  heartbeats; cut to the terminal's height;
* otherwise (a pipe, a file, a CI log): plain text snapshots, each headed by
  `--- agentcoord status <time> ---` (or one JSON object per line with
  `--json`).

A call that fails (daemon unreachable, timeout) is shown and retried at the
next tick. Ctrl-C (SIGINT) ends the watch with exit 0.
"""

from __future__ import annotations

import json as jsonlib
import os
import shutil
import sys
import time
from typing import Any, TextIO

from agentcoordctl import client, output
from agentcoordctl.render import printable
from agentcoordctl.options import Globals
from agentcoordctl.spec import Exit
from agentcoordd import protocol as p

MIN_INTERVAL = 0.2
COLOURS = {"live": "32", "stale": "33", "dead": "31"}
GREY = "90"
# A lane's row is told from its own claim (lane_state, holder: docs/compat.md#lane-holders).
LANE_COLUMNS = ("lane", "owner", "state", "holder", "machine", "status", "liveness", "blocked_on",
                "pr", "qa")
CLAIM_COLUMNS = ("claim", "status", "agent", "branch", "expires")
BEAT_COLUMNS = ("heartbeat", "status", "liveness", "target", "updated")


def _cell(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


class Painter:
    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def paint(self, text: str, code: str | None) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour and code else text

    def liveness(self, text: str, value: Any) -> str:
        return self.paint(text, COLOURS.get(str(value), GREY))


def _table(rows: list[list[str]], header: tuple[str, ...], painter: Painter,
           colour_col: int | None = None, indent: str = "  ") -> list[str]:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    out = [indent + "  ".join(painter.paint(h.ljust(w), "1") for h, w in zip(header, widths)).rstrip()]
    for row in rows:
        cells = []
        for i, (cell, width) in enumerate(zip(row, widths)):
            padded = cell.ljust(width)
            cells.append(painter.liveness(padded, cell) if i == colour_col else padded)
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def _matches(record: dict[str, Any], repo: str | None, target: str | None) -> bool:
    if repo is not None and record.get("repo") != repo:
        return False
    if target is not None:
        targets = {str(t) for t in record.get("targets") or []} | {str(record.get("target"))}
        if target not in targets:
            return False
    return True


def filtered(payload: dict[str, Any], *, batch_id: str | None, repo: str | None,
             target: str | None) -> dict[str, Any]:
    """The overview narrowed to a batch / repo / target (client side)."""
    if batch_id is None and repo is None and target is None:
        return payload
    out = dict(payload)
    batches = []
    for batch in payload.get("batches") or []:
        if batch_id is not None and batch.get("batch_id") != batch_id:
            continue
        lanes = [lane for lane in batch.get("lanes") or [] if _matches(lane, repo, target)]
        if (repo is not None or target is not None) and not lanes:
            continue
        batches.append({**batch, "lanes": lanes})
    out["batches"] = batches
    out["claims"] = [c for c in payload.get("claims") or []
                     if (batch_id is None or c.get("batch_id") == batch_id) and _matches(c, repo, target)]
    out["heartbeats"] = [h for h in payload.get("heartbeats") or []
                         if batch_id is None or h.get("batch_id") == batch_id]
    return out


def render(payload: dict[str, Any], painter: Painter) -> list[str]:
    lines: list[str] = []
    batches = payload.get("batches") or []
    lines.append(painter.paint(f"batches ({len(batches)})", "1"))
    if not batches:
        lines.append("  - none")
    for batch in batches:
        head = f"  {batch.get('batch_id')}  {_cell(batch.get('repo'))}"
        if batch.get("objective"):
            head += f"  {batch['objective']}"
        lanes = batch.get("lanes") or []
        head += f"  lanes {len(lanes)}  events {batch.get('event_count', 0)}"
        stop = batch.get("stop") or {}
        if stop.get("stopped"):
            head += "  " + painter.paint("STOPPED", "1;31")
        elif stop.get("stop_requested"):
            head += "  " + painter.paint("STOP REQUESTED", "1;33")
        lines.append(head)
        rows = [[_cell(lane.get("name")), _cell(lane.get("owner")),
                 _cell(str(lane.get("lane_state") or "").replace("_", " ")), _cell(lane.get("holder")),
                 _cell(lane.get("machine")), _cell(lane.get("status")), _cell(lane.get("liveness")),
                 _cell(lane.get("blocked_on")), _cell(f"#{lane['pr']}" if lane.get("pr") else None),
                 _cell(lane.get("qa"))] for lane in lanes]
        if rows:
            lines.extend(_table(rows, LANE_COLUMNS, painter, colour_col=6, indent="    "))
    claims = payload.get("claims") or []
    lines.append(painter.paint(f"claims ({len(claims)})", "1"))
    if claims:
        lines.extend(_table([[f"{c.get('repo')}#{c.get('target')}", _cell(c.get("status")),
                              _cell(c.get("agent_id")), _cell(c.get("branch")),
                              _cell(c.get("expires_at"))] for c in claims], CLAIM_COLUMNS, painter))
    else:
        lines.append("  - none")
    beats = payload.get("heartbeats") or []
    lines.append(painter.paint(f"heartbeats ({len(beats)})", "1"))
    if beats:
        lines.extend(_table([[_cell(h.get("agent_id")), _cell(h.get("status")), _cell(h.get("liveness")),
                              _cell(h.get("target")), _cell(h.get("updated_at"))] for h in beats],
                            BEAT_COLUMNS, painter, colour_col=2))
    else:
        lines.append("  - none")
    for note in payload.get("degraded") or []:
        lines.append(painter.paint(f"degraded: {note}", "33"))
    return lines


def _fetch(selection: p.Selection) -> tuple[dict[str, Any] | None, list[str], str | None]:
    """One overview: (payload, notices and warnings for stderr, the error that left
    this refresh without a payload: the snapshot says it, every time)."""
    message = p.Overview(selection=selection, caller=client.caller())
    try:
        response, _ = client.request(message, timeout=Globals.timeout)
    except client.ClientError as exc:
        return None, [], exc.message
    notes = list(response.notices) + [f"warning: {w}" for w in response.warnings]
    payload = response.payload if isinstance(response.payload, dict) else None
    return payload, notes, response.error


def run(*, selection: p.Selection, interval: float, batch_id: str | None, repo: str | None,
        target: str | None, as_json: bool, out: TextIO | None = None) -> None:
    """Refresh until Ctrl-C (then exit 0)."""
    out = out or sys.stdout
    interval = max(interval, MIN_INTERVAL)
    tty = out.isatty() and not as_json
    painter = Painter(tty and not os.environ.get("NO_COLOR"))
    seen_notes: set[str] = set()
    try:
        if tty:
            out.write("\x1b[?25l")  # hide the cursor
        while True:
            started = time.monotonic()
            payload, notes, error = _fetch(selection)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            if payload is not None:
                payload = filtered(payload, batch_id=batch_id, repo=repo, target=target)
            # notices and warnings go to stderr (once), never into stdout; so does a JSON
            # stream's error (a JSON line holds only payloads)
            for note in notes + ([error] if as_json and error else []):
                if note not in seen_notes:
                    seen_notes.add(note)
                    print(note, file=sys.stderr, flush=True)
            if as_json:
                if payload is not None:
                    out.write(jsonlib.dumps({"at": stamp, **payload}, ensure_ascii=False) + "\n")
            else:
                lines = [painter.paint(f"agentcoord status {stamp}", "1")
                         + f"  (every {interval:g}s; Ctrl-C to quit)"]
                if tty:  # the redrawn screen would wipe them from stderr: keep them in view
                    lines.extend(painter.paint(n, "33") for n in notes)
                if error:  # part of the snapshot (the state is unknown), not a notice
                    lines.append(painter.paint(printable(error), "31"))
                lines.extend(render(printable(payload), painter) if payload is not None else [])
                if tty:
                    rows = shutil.get_terminal_size().lines
                    if len(lines) > rows - 1:
                        cut = len(lines) - (rows - 2)
                        lines = lines[: rows - 2] + [f"… {cut} more lines (narrow with --batch-id)"]
                    out.write("\x1b[H\x1b[2J" + "\n".join(lines) + "\n")
                else:
                    lines[0] = f"--- agentcoord status {stamp} ---"
                    out.write("\n".join(lines) + "\n")
            out.flush()
            if output.failed():  # the reader went away (`| head`): stop refreshing
                break
            time.sleep(max(interval - (time.monotonic() - started), 0.0))
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        if tty:
            try:
                out.write("\x1b[?25h\n")  # show the cursor again
                out.flush()
            except (OSError, ValueError):
                pass
    raise Exit(0)
