"""Machine and session identity: a pure function of an environment mapping."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from agentcoordd.model import ids

SESSION_SOURCES = {
    "AGENT_COORD_SESSION_ID": "agent_coord_session_id",
    "CODEX_THREAD_ID": "codex_thread_id",
}


class Identity(msgspec.Struct, frozen=True, omit_defaults=True):
    machine_id: str | None = None
    session_id: str | None = None
    session_source: str | None = None


def _value(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value.strip() or None if isinstance(value, str) else None


def resolve_identity(env: Mapping[str, str], fallback_machine: str | None = None) -> Identity:
    """Machine from AGENT_COORD_MACHINE_ID (else `fallback_machine`, the daemon's
    own); session from AGENT_COORD_SESSION_ID, else CODEX_THREAD_ID. Blank is unset."""
    machine = _value(env, "AGENT_COORD_MACHINE_ID") or fallback_machine
    if machine is not None:
        ids.attribution("AGENT_COORD_MACHINE_ID", machine)
    for name, source in SESSION_SOURCES.items():
        session = _value(env, name)
        if session is not None:
            return Identity(machine, ids.attribution(name, session), source)
    return Identity(machine)


def stamp_attribution(record: dict[str, Any], identity: Identity) -> dict[str, Any]:
    """Apply the attribution tuple to a record being rewritten (atomic per write).

    Without identity the last recorded attribution is preserved; a new machine
    without a session clears the stale session, a new session without a machine
    clears the stale machine.
    """
    out = dict(record)
    machine, session = identity.machine_id, identity.session_id
    if machine is not None:
        if session is None and out.get("machine_id") != machine:
            out.pop("session_id", None)
            out.pop("session_source", None)
        out["machine_id"] = machine
    if session is not None:
        if machine is None and out.get("session_id") != session:
            out.pop("machine_id", None)
        out["session_id"] = session
        out["session_source"] = identity.session_source
    return out
