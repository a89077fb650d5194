"""The daemon's stop check: batch id from request or record, the notice, the short cache."""

from __future__ import annotations

from agentcoordd.store.base import Capabilities

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


async def test_a_local_answer_is_reused_until_the_batch_changes(tmp_path: Path, clock) -> None:  # noqa: ANN001
    ctx = ctx_for(tmp_path, clock)
    notices = StopNotices(clock=Ticks())
    assert not (await notices.state(ctx, "k", "b1"))["stop_requested"]
    await telemetry.request_stop(ctx, batch_id="b1")  # written by someone else
    assert (await notices.state(ctx, "k", "b1"))["stop_requested"]  # the directory changed
    assert (await notices.state(ctx, "k", "b1"))["stop_requested"]
    assert notices.cache_hits == 1


async def test_a_dashboard_jsonl_stop_invalidates_a_cached_local_answer(tmp_path: Path, clock) -> None:  # noqa: ANN001
    ctx = ctx_for(tmp_path, clock)
    notices = StopNotices(clock=Ticks())
    assert not (await notices.state(ctx, "k", "b1"))["stop_requested"]
    history = tmp_path / "events" / "batches"
    history.mkdir(parents=True)
    (history / "b1.jsonl").write_text(
        '{"type": "batch.stop_requested", "batch_id": "b1", "event_id": "x", '
        '"timestamp": "2026-06-19T20:05:00Z"}\n')
    assert (await notices.state(ctx, "k", "b1"))["stop_requested"]


class _Remote:
    """A store without a local root (the HTTP/etcd case) over a local one."""
    capabilities = Capabilities()  # a plain Store: every read goes through it


    def __init__(self, inner: LocalStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.inner, name)


async def test_remote_answers_are_cached_for_a_few_seconds_and_forgotten_on_a_local_stop(
        tmp_path: Path, clock) -> None:  # noqa: ANN001
    ctx = Ctx(store=_Remote(LocalStore(tmp_path)), clock=clock, identity=Identity(machine_id="m"))
    ticks = Ticks()
    notices = StopNotices(cache_seconds=5.0, clock=ticks)
    assert not (await notices.state(ctx, "k", "b1"))["stop_requested"]
    await telemetry.request_stop(ctx_for(tmp_path, clock), batch_id="b1")  # another writer
    assert not (await notices.state(ctx, "k", "b1"))["stop_requested"]  # cached
    ticks.now += 5.1
    assert (await notices.state(ctx, "k", "b1"))["stop_requested"]  # expired: re-checked
    assert notices.cache_hits == 1
    await notices.annotate(p.BatchStop(batch_id="b1"), ctx, "k", {"action": "recorded"}, [])
    assert notices.state  # forgetting never fails


async def test_concurrent_misses_for_one_batch_share_one_check(tmp_path: Path, clock) -> None:  # noqa: ANN001
    import anyio

    ctx = ctx_for(tmp_path, clock)
    await telemetry.request_stop(ctx, batch_id="b1", message="drain")
    notices = StopNotices(clock=Ticks())
    answers: list[bool] = []

    async def ask() -> None:
        answers.append((await notices.state(ctx, "k", "b1"))["stop_requested"])

    async with anyio.create_task_group() as tg:
        for _ in range(100):
            tg.start_soon(ask)
    assert answers == [True] * 100
    assert notices.checks == 1  # one listing for the 100 callers (the rest waited or hit the cache)
