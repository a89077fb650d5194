"""Tasks that outlive one request: services started on demand, and read-only waits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.abc

from agentcoordd.model.errors import OperationalError

T = TypeVar("T")


class Background:
    """Long-lived tasks started on demand (the dashboard's HTTP server)."""

    def __init__(self) -> None:
        self._tasks: anyio.abc.TaskGroup | None = None

    def attach(self, tasks: anyio.abc.TaskGroup | None) -> None:
        self._tasks = tasks

    async def start(self, function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        if self._tasks is None:
            raise OperationalError("agentcoordd is not serving yet; try again")
        return await self._tasks.start(function, *args)


class Pollers:
    """Read-only waits: at shutdown every running one answers at once (exit 2)."""

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()

    async def run(self, waiting: Awaitable[T]) -> T:
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                return await waiting
            finally:
                self._scopes.discard(scope)
        raise OperationalError("agentcoordd is stopping; wait again (the next daemon answers)")

    def interrupt(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()
