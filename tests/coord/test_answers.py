"""coord.answers and coord.open_requests: answering a request, finding its answer
cheaply, and the requests nobody answered yet."""

from __future__ import annotations

import anyio
import pytest

from agentcoordd.coord import answers
from agentcoordd.coord.context import Ctx
from agentcoordd.coord.events import record_event
from agentcoordd.coord.open_requests import open_requests
from agentcoordd.daemon.recent import SharedReads
from agentcoordd.model import ids
from agentcoordd.model.errors import UsageError
from agentcoordd.model.identity import resolve_identity

BATCH = "b1"


@pytest.fixture(autouse=True)
def registered(root) -> None:
    (root / "batches").mkdir()
    (root / "batches" / f"{BATCH}.json").write_text('{"batch_id": "b1", "lanes": []}\n')


async def ask(ctx: Ctx, type: str = "help_requested") -> str:
    typed = ({"reason": "question"} if type == "help_requested"
             else {"from_route": "a/low", "to_route": "a/high", "evidence": "stuck"})
    written = await record_event(ctx, batch_id=BATCH, type=type, lane="api", agent_id="worker",
                                 message="which db?", typed=typed)
    return written["event"]["event_id"]


async def test_an_answer_is_typed_by_its_request_and_points_back_to_it(ctx, clock) -> None:
    help_id = await ask(ctx)
    escalation_id = await ask(ctx, "escalation_requested")
    clock.advance(minutes=3)
    ctx.identity = resolve_identity({"AGENT_COORD_MACHINE_ID": "m2", "AGENT_COORD_SESSION_ID": "s2"})
    first = await answers.answer(ctx, batch_id=BATCH, to_event=help_id, message="staging",
                                 decision="proceed", agent_id="lead")
    second = await answers.answer(ctx, batch_id=BATCH, to_event=escalation_id, message="granted")
    assert first["event"]["type"] == "help_answered"
    assert first["event"]["reply_to"] == help_id
    assert (first["event"]["decision"], first["event"]["agent_id"]) == ("proceed", "lead")
    assert (first["event"]["machine_id"], first["event"]["session_id"]) == ("m2", "s2")
    assert first["request"]["event_id"] == help_id and first["request"]["reason"] == "question"
    assert second["event"]["type"] == "escalation_answered" and "decision" not in second["event"]
    assert ctx.warnings == []  # the first answer of each


@pytest.mark.parametrize("case", ["unknown", "not-a-request", "wrong-batch", "bad-id", "blank"])
async def test_what_cannot_be_answered_is_a_usage_error(ctx, store, case: str) -> None:
    help_id = await ask(ctx)
    note = (await record_event(ctx, batch_id=BATCH, type="note", message="x"))["event"]["event_id"]
    batch, event, message, words = {
        "unknown": (BATCH, "20260101T000000.000000Z-deadbeef", "m", "no event"),
        "not-a-request": (BATCH, note, "m", "not a help_requested or escalation_requested"),
        "wrong-batch": ("b2", help_id, "m", "no event"),
        "bad-id": (BATCH, "../x", "m", "invalid event-id"),
        "blank": (BATCH, help_id, "", "missing required --message"),
    }[case]
    with pytest.raises(UsageError, match=words):
        await answers.answer(ctx, batch_id=batch, to_event=event, message=message)
    assert [p for p in (await store.list(ids.events_prefix(BATCH))).entries
            if p.data.get("type", "").endswith("_answered")] == []


async def test_a_second_answer_is_recorded_with_a_warning_and_waiters_take_the_earliest(ctx, clock) -> None:
    help_id = await ask(ctx)
    clock.advance(seconds=5)
    first = await answers.answer(ctx, batch_id=BATCH, to_event=help_id, message="first")
    clock.advance(seconds=5)
    await answers.answer(ctx, batch_id=BATCH, to_event=help_id, message="second")
    assert ctx.warnings == [f"help_requested {help_id} already has 1 answer(s); this one is "
                            "recorded too (waiters take the earliest)"]
    request = await answers.read_request(ctx, BATCH, help_id)
    met, state = await answers.answered_state(ctx, BATCH, request)
    assert met and state["answers"] == 2
    assert state["answer"]["event_id"] == first["event"]["event_id"]


async def test_an_answer_from_a_machine_whose_clock_runs_behind_is_still_found(ctx, clock) -> None:
    help_id = await ask(ctx)
    clock.advance(minutes=-4)  # inside CLOCK_SKEW: the answer's id sorts before the request's
    await answers.answer(ctx, batch_id=BATCH, to_event=help_id, message="behind")
    met, state = await answers.answered_state(ctx, BATCH, await answers.read_request(ctx, BATCH, help_id))
    assert met and state["answer"]["message"] == "behind"


async def test_the_search_lists_only_from_shortly_before_the_request(ctx, store, clock) -> None:
    await store.create(ids.event_path(BATCH, "20200101T000000.000000Z-00000001"),
                       {"type": "note", "at": "2020-01-01T00:00:00Z"})
    help_id = await ask(ctx)
    request = await answers.read_request(ctx, BATCH, help_id)
    cursor = answers.listing_cursor(BATCH, request)
    assert cursor == ids.event_path(BATCH, "20260613T000000.000000Z-00000000")  # 00:30 - 5 min, hour
    listed = (await store.list(ids.events_prefix(BATCH), None, cursor)).entries
    assert [e.path for e in listed] == [ids.event_path(BATCH, help_id)]


async def test_wait_until_answered_polls_then_times_out_or_returns_the_answer(ctx, clock) -> None:
    help_id = await ask(ctx)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    timed_out = await answers.wait_until_answered(ctx, batch_id=BATCH, event_id=help_id,
                                                  poll_seconds=1.0, timeout=2.0, sleep=sleep)
    assert timed_out["exit_code"] == 2 and timed_out["timed_out"]
    assert timed_out["detail"] == f"no answer yet to help_requested {help_id} of batch {BATCH}"

    async def answer_on_second_sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 4:
            await answers.answer(ctx, batch_id=BATCH, to_event=help_id, message="now", agent_id="lead")

    done = await answers.wait_until_answered(ctx, batch_id=BATCH, event_id=help_id,
                                             poll_seconds=1.0, timeout=60, sleep=answer_on_second_sleep)
    assert done["exit_code"] == 0 and done["answer"]["message"] == "now", (done, slept)
    assert done["detail"] == f"help_requested {help_id} of batch {BATCH} answered by lead: now"
    with pytest.raises(UsageError):
        await answers.wait_until_answered(ctx, batch_id=BATCH, event_id="20260101T000000.000000Z-deadbeef")


async def test_hundred_concurrent_waiters_of_one_batch_share_one_listing(ctx, store, clock) -> None:
    asked = [await ask(ctx) for _ in range(100)]
    shared = SharedReads(store, max_age=60.0)
    view = Ctx(shared, clock)
    requests = [await answers.read_request(view, BATCH, event_id) for event_id in asked]
    before = shared.reads
    async with anyio.create_task_group() as tg:
        for request in requests:
            tg.start_soon(answers.answered_state, view, BATCH, request)
    assert shared.reads - before == 1  # one listing for 100 waiters (same hour: one cursor)


STAMPED = {"written_by": {"daemon": "agentcoordd", "agent_id": "lead"}}


def test_open_requests_are_the_unanswered_ones_oldest_first(clock) -> None:
    events = [
        {"batch_id": "b1", "type": "help_requested", "event_id": "e1", "at": "2026-06-13T00:00:00Z"},
        {"batch_id": "b1", "type": "escalation_requested", "event_id": "e2", "at": "2026-06-13T00:10:00Z"},
        {"batch_id": "b1", "type": "help_requested", "event_id": "e3", "at": "2026-06-13T00:20:00Z"},
        {"batch_id": "b1", "type": "help_answered", "reply_to": "e3", "event_id": "e4", **STAMPED},
        # a wrongly typed answer answers nothing; another batch's answer neither
        {"batch_id": "b1", "type": "help_answered", "reply_to": "e2", "event_id": "e5", **STAMPED},
        {"batch_id": "b2", "type": "help_answered", "reply_to": "e1", "event_id": "e6", **STAMPED},
        {"batch_id": "b1", "type": "note", "event_id": "e7"},
        # nor one written around the daemon (no stamp: coord.trust)
        {"batch_id": "b1", "type": "help_answered", "reply_to": "e1", "event_id": "e8"},
    ]
    found = open_requests(events, clock.now())
    assert [(r["event_id"], r["age_seconds"]) for r in found] == [("e1", 1800.0), ("e2", 1200.0)]


async def test_batch_status_shows_open_requests_only_while_there_are_some(ctx, clock) -> None:
    from agentcoordd.coord.status import status

    assert "open_requests" not in await status(ctx, batch_id=BATCH)  # agent-coord's key set
    asked = await ask(ctx)
    clock.advance(minutes=2)
    for events in (None, 0):  # every event shown, or none (then a digest scan)
        shown = await status(ctx, batch_id=BATCH, events=events)
        assert [(r["event_id"], r["age_seconds"]) for r in shown["open_requests"]] == [(asked, 120.0)]
    await answers.answer(ctx, batch_id=BATCH, to_event=asked, message="done")
    assert "open_requests" not in await status(ctx, batch_id=BATCH, events=0)
