"""`wait`: block until a coordination condition holds (exit 0) or --timeout passes (exit 2).

    wait --until-unblocked --batch-id B --lane L   every dependency of lane L is satisfied
    wait --until-free --repo R --target T          a claim on R#T would succeed now
    wait --until-complete --batch-id B             every lane of B reports a terminal status
    wait --until-stop-requested --batch-id B       the batch has a stop request (batch stop)
    wait --until-answered --batch-id B --event-id ID   the request has an answer (agentcoordctl.answer)
    wait --until-ready --batch-id B [--agent-id A] some lane is ready (one A may take)

`--until-free` and `--until-complete` poll one `status` request each
(target or batch scope). An UNKNOWN answer (backend trouble) is not the
condition: waiting goes on, and the reason is shown once.

`--until-unblocked`, `--until-stop-requested` and `--until-ready` are answered by the daemon
itself (`coord.waits`, `telemetry.wait_until_stop_requested`): one request per
slice of at most `REQUEST_TIMEOUT` seconds, each answered before its own
deadline — exit 0 with the state, or exit 2 with `timed_out` — so no slice ends
in a generic "daemon did not answer" timeout. The daemon reads only the lane's
dependencies and shares those reads between concurrent waiters.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentcoordctl import client, spec
from agentcoordctl.options import (
    BACKEND, JSON, OPT_REPO, OPT_TARGET, dump_json, eprint, fail, positive_seconds, say_notices,
)
from agentcoordctl.answer import render_answer
from agentcoordctl.render import printable
from agentcoordctl.spec import Exit, Opt
from agentcoordd import protocol as p

DEFAULT_TIMEOUT = 3600.0
REQUEST_TIMEOUT = 30.0


def wait(*, until_unblocked: bool, until_free: bool, until_complete: bool,
         until_stop_requested: bool, batch_id: str | None, lane: str | None, repo: str | None,
         target: str | None, timeout: float, interval: float, json: bool,
         selection: p.Selection, until_answered: bool = False,
         event_id: str | None = None, until_ready: bool = False,
         agent_id: str | None = None) -> None:
    modes = [m for m, on in (("until-unblocked", until_unblocked), ("until-free", until_free),
                             ("until-complete", until_complete),
                             ("until-stop-requested", until_stop_requested),
                             ("until-answered", until_answered),
                             ("until-ready", until_ready)) if on]
    if len(modes) != 1:
        raise fail("choose exactly one of --until-unblocked, --until-free, --until-complete, "
                   "--until-stop-requested, --until-answered, --until-ready", p.EXIT_USAGE)
    mode = modes[0]
    if mode in ("until-unblocked", "until-complete", "until-stop-requested",
                "until-answered", "until-ready") and not batch_id:
        raise fail(f"--{mode} needs --batch-id", p.EXIT_USAGE)
    if mode == "until-unblocked" and not lane:
        raise fail("--until-unblocked needs --lane", p.EXIT_USAGE)
    if mode == "until-free" and not (repo and target):
        raise fail("--until-free needs --repo and --target", p.EXIT_USAGE)
    if agent_id is not None and mode != "until-ready":
        raise fail("--agent-id is only valid with --until-ready", p.EXIT_USAGE)
    if timeout <= 0 or interval <= 0:
        raise fail("--timeout and --interval must be positive", p.EXIT_USAGE)
    if mode == "until-answered":
        if not event_id:
            raise fail("--until-answered needs --event-id", p.EXIT_USAGE)
        wait_answered(str(batch_id), event_id, timeout=timeout, interval=interval, json=json,
                      selection=selection)
    chosen = selection
    if mode in DAEMON_WAITS:
        build = DAEMON_WAITS[mode]

        def request(slice_: float) -> p._Wait:
            return build(batch_id, lane, slice_, interval, chosen, agent_id)

        wait_in_daemon(mode, request, timeout=timeout, interval=interval, json=json)
    started = time.monotonic()
    deadline = started + timeout
    shown = ""
    while True:
        if mode == "until-free":
            request: Any = p.Status(repo=repo, target=target, selection=chosen)
        else:
            request = p.Status(batch_id=batch_id, events=0, selection=chosen)
        request.caller = client.caller()
        remaining = deadline - time.monotonic()
        try:
            response, _ = client.request(request, timeout=max(min(REQUEST_TIMEOUT, remaining), 1.0))
        except client.ClientError as exc:
            met, why = False, exc.message
        else:
            if response.exit_code == p.EXIT_USAGE:
                raise fail(response.error or "usage error", p.EXIT_USAGE)
            if response.exit_code != 0 or not isinstance(response.payload, dict):
                met, why = False, response.error or "status is UNKNOWN (backend trouble)"
            else:
                if mode == "until-complete" and _batch(response.payload) is None:
                    unknown_batch(str(batch_id), json=json)
                met, why = CHECKS[mode](response.payload, batch_id=batch_id, lane=lane)
        waited = round(time.monotonic() - started, 3)
        if met:
            if json:
                print(dump_json({"condition": mode, "met": True, "waited_seconds": waited,
                                 "detail": why}))
            else:
                print(f"{mode.removeprefix('until-')}: {why}")
            raise Exit(0)
        if why != shown:
            shown = why
            eprint(f"waiting: {why}")
        if time.monotonic() + interval > deadline:
            if json:
                print(dump_json({"condition": mode, "met": False, "waited_seconds": waited,
                                 "detail": why}))
            eprint(f"wait: timed out after {timeout:g}s ({why})")
            raise Exit(p.EXIT_OPERATIONAL)
        time.sleep(interval)


class NothingToWaitFor(Exception):
    """The daemon says the wait can never be met (a batch that does not exist)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def unknown_batch(batch_id: str, *, json: bool, condition: str = "until-complete",
                  why: str | None = None) -> None:
    """A batch nobody registered is never unblocked, ready or complete: end the wait at
    once (exit 2), naming it."""
    why = why or f"batch {batch_id} is not registered (check --batch-id)"
    if json:
        print(dump_json({"condition": condition, "met": False, "waited_seconds": 0,
                         "detail": why}))
    raise fail(f"wait: {why}; nothing to wait for", p.EXIT_OPERATIONAL)


def send_with_ctl(request: p._Wait, timeout: float) -> p.Response:
    """One slice through ctl's client (its notices go to stderr)."""
    request.caller = client.caller()
    response, _ = client.request(request, timeout=timeout)
    say_notices(response)
    return response


def wait_slices(request: Callable[[float], p._Wait], *, timeout: float, interval: float,
                send: Callable[[p._Wait, float], p.Response] = send_with_ctl,
                shown: Callable[[str], None] = lambda why: None) -> tuple[bool, dict[str, Any], str]:
    """Daemon-side waiting in slices: (met, state, last reason) — when not met, the
    state of the last slice that ran out. Raises the usage error a slice answered
    with, and NothingToWaitFor when the daemon says nothing will ever meet it; `shown`
    sees each new reason for waiting. A slice whose call timed out (a slow backend) is
    retried without a word: only the wait's own end says what it waited for."""
    deadline = time.monotonic() + timeout
    last = ""
    last_state: dict[str, Any] = {}
    first = True
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False, last_state, last or str(last_state.get("detail") or "")
        # The first slice only checks, so the reason for waiting is shown at once.
        slice_ = 0.0 if first else min(remaining, REQUEST_TIMEOUT)
        first = False
        why, slice_over = "", False
        try:
            # The daemon answers by request.timeout - 0.5 s at the latest.
            response = send(request(slice_), slice_ + 1.0)
        except client.CallTimedOut as exc:
            why, slice_over = exc.message, True
            last_state = {"detail": why}
            continue
        except client.ClientError as exc:
            why = exc.message
        else:
            if response.exit_code == p.EXIT_USAGE:
                raise fail(response.error or "usage error", p.EXIT_USAGE)
            payload = response.payload if isinstance(response.payload, dict) else {}
            if response.exit_code == 0:
                return True, payload, str(payload.get("detail") or "")
            if payload.get("unknown_batch"):
                raise NothingToWaitFor(str(payload.get("detail")))
            if p.is_call_timeout(response.error):  # a slow backend: the next slice goes on
                last_state = {"detail": response.error}
                continue
            if payload.get("timed_out"):
                slice_over = True
                last_state = payload
                why = str(payload.get("detail") or payload.get("error") or "condition not met yet")
            else:
                why = response.error or "state is UNKNOWN (backend trouble)"
        if why != last:
            last = why
            shown(why)
        if not slice_over:  # an error answered early: do not spin
            time.sleep(min(interval, max(deadline - time.monotonic(), 0.0)))


def wait_in_daemon(mode: str, request: Callable[[float], p._Wait], *, timeout: float,
                   interval: float, json: bool) -> None:
    """Print the outcome of a daemon-side wait and exit 0 (met) or 2 (timed out)."""
    started = time.monotonic()
    try:
        met, state, why = wait_slices(request, timeout=timeout, interval=interval,
                                      shown=lambda text: eprint(f"waiting: {text}"))
    except NothingToWaitFor as nothing:
        unknown_batch("", json=json, condition=mode, why=nothing.detail)
    waited = round(time.monotonic() - started, 3)
    if mode == "until-stop-requested" and met:
        why = _stop_detail(str(state.get("batch_id")), state)
    state = {k: v for k, v in state.items() if k not in ("exit_code", "detail", "timed_out")}
    if met:
        if json:
            print(dump_json({"condition": mode, "met": True, "waited_seconds": waited,
                             "detail": why, STATE_KEY[mode]: state}))
        else:
            print(f"{mode.removeprefix('until-')}: {why}")
        raise Exit(0)
    if json:
        print(dump_json({"condition": mode, "met": False, "timed_out": True,
                         "waited_seconds": waited, "detail": why}))
    eprint(f"wait: timed out after {timeout:g}s ({why or 'condition not met'})")
    raise Exit(p.EXIT_OPERATIONAL)


def _stop_detail(batch_id: str, state: dict[str, Any]) -> str:
    text = f"batch {batch_id} has a stop request"
    if state.get("requested_at"):
        text += f" (at {state['requested_at']})"
    if state.get("message"):
        text += f": {state['message']}"
    return text


def _batch(payload: dict[str, Any]) -> dict[str, Any] | None:
    batches = payload.get("batches") or []
    return batches[0] if batches and isinstance(batches[0], dict) else None


def complete(payload: dict[str, Any], *, batch_id: str | None, lane: str | None) -> tuple[bool, str]:
    from agentcoordd.model.status import is_terminal, satisfies_dependency

    batch = _batch(payload)
    if batch is None:
        return False, f"batch {batch_id} not found"
    rows = [row for row in batch.get("lanes") or [] if isinstance(row, dict)]
    if not rows:
        return False, f"batch {batch_id} has no lanes"
    open_lanes = [f"{row.get('name')} ({row.get('status')})" for row in rows
                  if not (is_terminal(row.get("status")) or satisfies_dependency(row.get("status")))]
    if not open_lanes:
        return True, f"every lane of {batch_id} is terminal"
    return False, f"batch {batch_id} open lanes: {', '.join(open_lanes)}"


def free(payload: dict[str, Any], *, batch_id: str | None, lane: str | None) -> tuple[bool, str]:
    """A claim would not exit 3 now: the daemon's lease verdict (`lease` of the target
    status: the rule `claim` applies, coord/lease.py)."""
    scope = payload.get("scope") or {}
    label = f"{scope.get('repo')}#{scope.get('target')}"
    claims = payload.get("claims") or []
    claim = claims[0] if claims and isinstance(claims[0], dict) else None
    if claim is None:
        return True, f"{label} has no claim"
    if claim.get("status") != "active":
        return True, f"{label} is {claim.get('status')}"
    verdict = payload.get("lease") or {}
    holder = verdict.get("holder") or claim.get("agent_id")
    if verdict.get("claimable"):
        return True, f"{label} holder {holder}: {verdict.get('detail')} (claimable)"
    return False, f"{label} held by {holder} ({verdict.get('detail') or 'unreadable claim'})"


CHECKS = {"until-complete": complete, "until-free": free}
# Conditions the daemon polls: mode -> request for one slice, and the --json key of its state.
STATE_KEY = {"until-unblocked": "lane", "until-stop-requested": "stop", "until-ready": "ready"}
DAEMON_WAITS: dict[str, Callable[..., p._Wait]] = {
    "until-unblocked": lambda batch_id, lane, slice_, poll, chosen, _agent=None: p.WaitUnblocked(
        batch_id=batch_id, lane=lane, wait_seconds=slice_, poll_seconds=poll, selection=chosen),
    "until-stop-requested": lambda batch_id, lane, slice_, poll, chosen, _agent=None:
        p.WaitStopRequested(batch_id=batch_id, wait_seconds=slice_, poll_seconds=poll,
                            selection=chosen),
    "until-ready": lambda batch_id, lane, slice_, poll, chosen, agent=None: p.WaitReady(
        batch_id=batch_id, agent_id=agent, wait_seconds=slice_, poll_seconds=poll,
        selection=chosen),
}


COMMANDS = (spec.Command(
    ("wait",), "Block until a lane is unblocked, a target is free, or a batch is complete.",
    (Opt("--until-unblocked", "until_unblocked", "flag",
         help="Until lane --lane of --batch-id is unblocked."),
     Opt("--until-free", "until_free", "flag", help="Until --repo/--target can be claimed."),
     Opt("--until-complete", "until_complete", "flag",
         help="Until every lane of --batch-id is terminal."),
     Opt("--until-stop-requested", "until_stop_requested", "flag",
         help="Until --batch-id has a stop request (`batch stop`)."),
     Opt("--until-answered", "until_answered", "flag",
         help="Until event --event-id of --batch-id (a help/escalation request) is answered."),
     Opt("--until-ready", "until_ready", "flag",
         help="Until some lane of --batch-id is ready (one --agent-id may take, if given)."),
     Opt("--batch-id", "batch_id", metavar="ID"),
     Opt("--agent-id", "agent_id", metavar="ID", help="--until-ready: a lane this agent may take."),
     Opt("--lane", "lane", metavar="LANE"),
     Opt("--event-id", "event_id", metavar="EVENT_ID", help="--until-answered: the request."),
     OPT_REPO, OPT_TARGET,
     Opt("--timeout", "timeout", "custom", default=DEFAULT_TIMEOUT, parse=positive_seconds,
         metavar="SECONDS", help="Give up after this long: exit 2 (default 3600)."),
     Opt("--interval", "interval", "custom", default=1.0, parse=positive_seconds,
         metavar="SECONDS", help="Seconds between checks (default 1)."),
     JSON, BACKEND),
    wait),)


def wait_answered(batch_id: str, event_id: str, *, timeout: float, interval: float, json: bool,
                  selection: p.Selection) -> None:
    """Wait for the request's answer; print it and exit 0, or exit 2 when none came."""
    def request(slice_: float) -> p.WaitAnswered:
        return p.WaitAnswered(batch_id=batch_id, event_id=event_id, wait_seconds=slice_,
                              poll_seconds=interval, selection=selection)

    started = time.monotonic()
    try:
        met, state, why = wait_slices(request, timeout=timeout, interval=interval)
    except NothingToWaitFor as nothing:
        unknown_batch(batch_id, json=json, condition="until-answered", why=nothing.detail)
    waited = round(time.monotonic() - started, 3)
    outcome: dict[str, Any] = {"condition": "until-answered", "met": met, "waited_seconds": waited,
                               "detail": why, "batch_id": batch_id, "event_id": event_id}
    if state.get("not_taken"):  # answer records not written through `answer`: shown, not taken
        outcome["not_taken"] = state["not_taken"]
    if met:
        outcome.update(answer=state.get("answer"), request=state.get("request"),
                       answers=state.get("answers"))
        print(dump_json(outcome) if json else render_answer(state.get("answer") or {}))
        raise Exit(0)
    if json:
        print(dump_json({**outcome, "timed_out": True}))
    eprint(printable(f"wait: no answer yet to {event_id} of batch {batch_id} after {timeout:g}s "
                     f"({why or 'not answered'}); UNKNOWN: decide without it or wait again"))
    raise Exit(p.EXIT_OPERATIONAL)
