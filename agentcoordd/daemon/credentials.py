"""Backend credentials callers brought, kept in memory only (never written to disk).

The outbox and the keep-alive lanes persist a backend *descriptor* (kind and
location), never its token. After a restart the daemon's own environment is
clean of tokens (by design), so work for a backend whose token only callers
carry waits until one of them calls: every dispatched request `learn`s its
selection, and the outbox and the lanes take their token from here.

Several tokens may be in use for one backend (scoped machine tokens): the most
recent few are kept, newest first, so a delivery refused for one scope can try
the next.
"""

from __future__ import annotations

from collections.abc import Callable

from agentcoordd.daemon.backends import Resolved
from agentcoordd.daemon.descriptors import descriptor_key

KEEP_PER_BACKEND = 4


class Credentials:
    def __init__(self) -> None:
        self._by_key: dict[str, list[Resolved]] = {}
        self.on_new: list[Callable[[str], None]] = []  # called with the descriptor key

    def learn(self, resolved: Resolved) -> None:
        """Remember a selection that carries a token; tell listeners when it is new."""
        if not resolved.token:
            return
        key = descriptor_key(resolved)
        known = self._by_key.setdefault(key, [])
        new = all(r.token != resolved.token for r in known)
        known[:] = [resolved, *(r for r in known if r.token != resolved.token)][:KEEP_PER_BACKEND]
        if new:
            for listener in self.on_new:
                listener(key)

    def candidates(self, key: str) -> list[Resolved]:
        """Selections with a token for this backend, newest first."""
        return list(self._by_key.get(key, ()))

    def count(self) -> int:
        return sum(len(v) for v in self._by_key.values())
