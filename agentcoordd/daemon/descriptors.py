"""Backend descriptors: a selection written down without its secret.

The outbox and the keep-alive lanes persist the backend of each entry as a
descriptor (kind, location, source, etcd user and options, never a token).
After a restart `from_descriptor` rebuilds the selection, with the token of
the machine's configuration when it names the same backend; tokens callers
brought come from `daemon.credentials`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

from agentcoordd.daemon import backends
from agentcoordd.protocol import Selection


def descriptor_key(resolved: backends.Resolved) -> str:
    """The selection without any credential: kind and location (+ options)."""
    kind, location, _credential = resolved.key
    return f"{kind}:{location}"


def needs_token(kind: str, user: str | None = None) -> bool:
    """The Worker always wants a bearer token; etcd only with RBAC (a user)."""
    return kind == "http" or (kind == "etcd" and bool(user))


def persisted_backend(resolved: backends.Resolved) -> dict[str, Any]:
    out: dict[str, Any] = {"key": descriptor_key(resolved), "kind": resolved.kind,
                           "location": resolved.location, "source": resolved.source}
    if resolved.user:
        out["user"] = resolved.user
    if resolved.options:
        out["options"] = [list(pair) for pair in resolved.options]
    if resolved.implicit:
        out["implicit"] = True
    return out


def resolve_persisted(backend: Mapping[str, Any],
                      daemon_env: Mapping[str, str] | None = None) -> backends.Resolved:
    """A persisted backend after a restart: the selection, with the token (and
    options) taken from the machine's configuration when it names the same
    backend. Nothing secret was ever persisted."""
    env = dict(os.environ if daemon_env is None else daemon_env)
    kind = backend.get("kind", "local")
    location = backend.get("location", "")
    if kind != "local":
        with contextlib.suppress(Exception):
            machine = backends.resolve(Selection(), env, "/", env)
            if descriptor_key(machine) == backend.get("key"):
                return machine
    options = tuple(tuple(pair) for pair in backend.get("options") or ())
    return backends.Resolved(kind, location, "lane registration", None, user=backend.get("user"),
                             implicit=bool(backend.get("implicit")), options=options)
