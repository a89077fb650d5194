"""The `changes` capability (the event feed's source), on every real backend: a first
notice once watching began, then one after a record lands below the prefix."""

from __future__ import annotations

import uuid
from typing import Any

import anyio

from etcd_cluster import etcd_server, etcd_store  # noqa: F401 - fixtures are used by name

MECHANISM = {"LocalStore": "inotify", "HttpStore": "poll", "EtcdStore": "watch"}  # Linux


async def _notices_after_a_write(backend: Any) -> tuple[str, bool]:
    changes = backend.capabilities.changes
    assert changes is not None
    batch = f"b{uuid.uuid4().hex[:8]}"
    notices = changes.changes(f"events/{batch}")
    first = await notices.__anext__()
    await backend.create(f"events/{batch}/e1.json", {"type": "note", "at": "2026-01-01T00:00:00Z"})
    with anyio.fail_after(5):
        await notices.__anext__()
    await notices.aclose()
    return first, True


async def test_a_write_below_the_prefix_is_noticed_local_and_http(store: Any) -> None:
    first, noticed = await _notices_after_a_write(store)
    assert noticed and first == MECHANISM[type(store).__name__]


async def test_a_write_below_the_prefix_is_noticed_by_an_etcd_watch(etcd_store: Any) -> None:
    first, noticed = await _notices_after_a_write(etcd_store)
    assert noticed and first == "watch"


async def test_local_changes_ignore_writes_elsewhere(tmp_path: Any) -> None:
    from agentcoordd.store.local import LocalStore

    backend = LocalStore(tmp_path / "state")
    notices = backend.capabilities.changes.changes("events/b1")
    await notices.__anext__()
    await backend.create("events/b2/e1.json", {"type": "note"})
    with anyio.move_on_after(0.5) as quiet:
        await notices.__anext__()
    await notices.aclose()
    assert quiet.cancelled_caught


async def test_without_inotify_the_local_store_polls_its_stamp(tmp_path: Any, monkeypatch: Any) -> None:
    from agentcoordd.store import inotify
    from agentcoordd.store.local import LocalStore

    monkeypatch.setattr(inotify, "open_inotify", lambda: None)  # as on macOS
    first, noticed = await _notices_after_a_write(LocalStore(tmp_path / "state"))
    assert noticed and first == "stat"


async def test_a_batch_directory_created_later_is_noticed(tmp_path: Any) -> None:
    from agentcoordd.store.local import LocalStore

    backend = LocalStore(tmp_path / "state")
    notices = backend.capabilities.changes.changes("events/late")
    await notices.__anext__()
    await backend.create("events/late/e1.json", {"type": "note"})
    with anyio.fail_after(3):
        await notices.__anext__()
    await notices.aclose()
