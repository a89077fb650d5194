"""The daemon's stop check: batch id from request or record, the notice, the short cache."""

from __future__ import annotations

from pathlib import Path

from agentcoordd import protocol as p
from agentcoordd.coord import telemetry
from agentcoordd.coord.context import Ctx
from agentcoordd.daemon.stopnotice import StopNotices, batch_of
from agentcoordd.model.identity import Identity
from agentcoordd.store.cache import CachingStore
from agentcoordd.store.local import LocalStore


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ctx_for(root: Path, clock) -> Ctx:  # noqa: ANN001
    return Ctx(store=CachingStore(LocalStore(root)), clock=clock, identity=Identity(machine_id="m"))


def test_the_batch_comes_from_the_request_else_from_the_stored_record() -> None:
    beat = p.Heartbeat(agent_id="a")
    assert batch_of(p.Heartbeat(agent_id="a", batch_id="b1"), {"heartbeat": {"batch_id": "b2"}}) == "b1"
    assert batch_of(beat, {"heartbeat": {"batch_id": "b2"}}) == "b2"
    assert batch_of(p.Release(agent_id="a", repo="o/r", target="1"), {"claim": {"batch_id": "b3"}}) == "b3"
    assert batch_of(beat, {"heartbeat": {}}) is None


async def test_a_stop_request_adds_the_notice_and_stop_requested(tmp_path: Path, clock) -> None:  # noqa: ANN001
    ctx = ctx_for(tmp_path, clock)
    await telemetry.request_stop(ctx, batch_id="b1", message="why")
    payload: dict = {"heartbeat": {"batch_id": "b1"}}
    notices: list[str] = []
    await StopNotices().annotate(p.Heartbeat(agent_id="a"), ctx, "k", payload, notices)
    assert payload["stop_requested"] is True and payload["stop"]["message"] == "why"
    assert notices == [telemetry.stop_notice(payload["stop"])]


async def test_an_unsafe_batch_id_is_not_a_stop_and_never_fails(tmp_path: Path, clock) -> None:  # noqa: ANN001
    payload: dict = {"heartbeat": {"batch_id": "../x"}}
    await StopNotices().annotate(p.Heartbeat(agent_id="a"), ctx_for(tmp_path, clock), "k", payload, [])
    assert "stop_requested" not in payload


async def test_fast_local_checks_are_not_cached(tmp_path: Path, clock) -> None:  # noqa: ANN001
    ctx = ctx_for(tmp_path, clock)
    notices = StopNotices(slow_check=60.0)
    assert not (await notices.state(ctx, "k", "b1"))["stop_requested"]
    await telemetry.request_stop(ctx, batch_id="b1")  # written by someone else
    assert (await notices.state(ctx, "k", "b1"))["stop_requested"]


async def test_slow_checks_are_cached_for_a_few_seconds_and_forgotten_on_a_local_stop(
        tmp_path: Path, clock) -> None:  # noqa: ANN001
    ctx = ctx_for(tmp_path, clock)
    ticks = Ticks()
    notices = StopNotices(slow_check=0.0, cache_seconds=5.0, clock=ticks)
    assert not (await notices.state(ctx, "k", "b1"))["stop_requested"]
    await telemetry.request_stop(ctx, batch_id="b1")  # another writer
    assert not (await notices.state(ctx, "k", "b1"))["stop_requested"]  # cached
    ticks.now += 5.1
    assert (await notices.state(ctx, "k", "b1"))["stop_requested"]  # expired: re-checked
    assert notices.cache_hits == 1


async def test_a_batch_stop_through_the_daemon_drops_the_cached_answer(tmp_path: Path, clock) -> None:  # noqa: ANN001
    ctx = ctx_for(tmp_path, clock)
    notices = StopNotices(slow_check=0.0, clock=Ticks())
    await notices.state(ctx, "k", "b1")
    await telemetry.request_stop(ctx, batch_id="b1")
    await notices.annotate(p.BatchStop(batch_id="b1"), ctx, "k", {"action": "recorded"}, [])
    assert (await notices.state(ctx, "k", "b1"))["stop_requested"]
