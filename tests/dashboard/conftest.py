"""A real dashboard server on a free loopback port, over a LocalStore in a temp dir;
where the browser tests keep their screenshots."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentcoordd.daemon.dashboard import Dashboard
from agentcoordd.model.identity import Identity
from agentcoordd.store.cache import CachingStore
from agentcoordd.store.local import LocalStore

ARTIFACTS_ENV = "AGENT_COORD_ARTIFACTS"
_SCREENSHOTS = pytest.StashKey[list[str]]()


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


class Screenshots:
    """Saves a browser's screenshots into the run's artifacts and names each one in
    the run's summary (and on stdout, for `-s`)."""

    def __init__(self, directory: Path, request: pytest.FixtureRequest) -> None:
        self.directory = directory
        self.request = request

    def save(self, driver: Any, name: str) -> Path:
        path = self.directory / name
        assert driver.save_screenshot(str(path)), path
        self.request.config.stash.setdefault(_SCREENSHOTS, []).append(str(path))
        self.request.node.user_properties.append(("screenshot", str(path)))
        print(f"\nscreenshot: {path}")
        return path


@pytest.fixture
def screenshots(request: pytest.FixtureRequest, tmp_path: Path) -> Screenshots:
    """The test run's artifacts directory: $AGENT_COORD_ARTIFACTS when set, else the
    test's tmp_path."""
    chosen = os.environ.get(ARTIFACTS_ENV)
    path = Path(chosen) if chosen else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return Screenshots(path, request)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    shots = config.stash.get(_SCREENSHOTS, [])
    if shots:
        terminalreporter.section("dashboard screenshots")
        for shot in shots:
            terminalreporter.write_line(shot)
