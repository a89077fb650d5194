"""Helpers for the keep-alive suite: lane listings, heartbeat liveness, polling."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

from agentcoordd import protocol as p
from agentcoordd.model.liveness import liveness
from integration.helpers import Daemon, wait_until  # noqa: F401 - the tests import it from here

# Never let --watch-pid auto find the agent host that may be running this suite.
NO_HOSTS = {"AGENT_COORD_AGENT_HOSTS": "no-such-agent-host"}


def ctl(d: Daemon, *args: str, **env: str):
    return d.ctl(*args, env={**NO_HOSTS, **env})


def lanes(d: Daemon, agent_id: str | None = None) -> list[dict[str, Any]]:
    with d.raw() as raw:
        raw.hello()
        response = raw.call(p.Lanes(agent_id=agent_id))
    assert response.exit_code == 0, response.error
    return response.payload["lanes"]


def lane(d: Daemon, agent_id: str) -> dict[str, Any] | None:
    rows = lanes(d, agent_id)
    return rows[0] if rows else None


def heartbeat(d: Daemon, agent_id: str) -> dict[str, Any]:
    return json.loads((d.root / "heartbeats" / f"{agent_id}.json").read_text())


def heartbeat_raw(d: Daemon, agent_id: str) -> bytes:
    return (d.root / "heartbeats" / f"{agent_id}.json").read_bytes()


def state_of(record: dict[str, Any], at: float | None = None) -> str:
    now = dt.datetime.fromtimestamp(time.time() if at is None else at, dt.timezone.utc)
    return liveness(record.get("updated_at"), record.get("expires_at"), now)


def events(d: Daemon, batch_id: str) -> list[dict[str, Any]]:
    folder = d.root / "events" / batch_id
    if not folder.is_dir():
        return []
    return [json.loads(f.read_text()) for f in sorted(Path(folder).glob("*.json"))]
