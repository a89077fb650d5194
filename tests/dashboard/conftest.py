"""A real dashboard server on a free loopback port, over a LocalStore in a temp dir."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from agentcoordd.daemon.dashboard import Dashboard
from agentcoordd.model.identity import Identity
from agentcoordd.store.cache import CachingStore
from agentcoordd.store.local import LocalStore


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
async def dashboard(root: Path, clock) -> AsyncIterator[Dashboard]:  # noqa: ANN001
    store = CachingStore(LocalStore(root))
    board = Dashboard(lambda: store, clock, Identity(machine_id="ws-1"), refresh_seconds=1)
    async with anyio.create_task_group() as tg:
        await tg.start(board.serve)
        yield board
        tg.cancel_scope.cancel()
