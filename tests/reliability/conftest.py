"""Fixtures: real daemons in short temp dirs (tests/integration helpers), the
unprivileged daemon of tests/doctor (storage faults as root), and one Worker
under `wrangler dev` for the HTTP scenarios (tests/worker_fixture.py).

Sizes are CI sizes; bench/reliability.py runs the same scenarios full size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from doctor.conftest import unprivileged_daemon  # noqa: F401 - fixture
from integration.conftest import daemon, daemon_factory, short_dir  # noqa: F401 - fixtures


@pytest.fixture(scope="session")
def reliability_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Our Worker (default machines: `ref-all` has every scope); only this suite uses it."""
    from worker_fixture import launch_worker

    with launch_worker(tmp_path_factory.mktemp("reliability-worker")) as server:
        yield server


