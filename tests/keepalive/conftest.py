"""Keep-alive suite: the integration suite's real-daemon fixtures, plus lane helpers."""

from __future__ import annotations

from integration.conftest import daemon, daemon_factory, short_dir  # noqa: F401 - fixtures
