"""The machine's lease policy (coord.context.LeasePolicy): the longest TTL a claim or
heartbeat may ask for, and how far this clock may be from a backend's before a
liveness decision is refused (docs/keepalive.md#bounds, docs/backends.md#clocks).

Per setting, the first that gives it: the daemon's environment, a consumer env
file, `[leases]` in agentcoordd.toml, the default. A bad value is one line in the
log and in `config show`; that setting keeps its default. Re-read when one of
those files changes (looked at at most once a second), like the notification settings.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentcoordd.coord.context import LeasePolicy
from agentcoordd.daemon import config as config_file

ENV_NAMES = {"max_ttl": "AGENT_COORD_MAX_CLAIM_TTL",
             "max_clock_offset": "AGENT_COORD_MAX_CLOCK_OFFSET"}
TOML_NAMES = {"max_ttl": "max_claim_ttl", "max_clock_offset": "max_clock_offset"}
# Every request asks for the policy; the files are looked at (a few stats) at most this often.
RECHECK_SECONDS = 1.0
# Far enough for any real lease, near enough that every stamp stays a valid RFC 3339 time.
TTL_CEILING = 10 * 365 * 86400


@dataclass(frozen=True)
class LeaseSettings:
    policy: LeasePolicy = LeasePolicy()
    sources: dict[str, str] = field(default_factory=dict)
    errors: tuple[str, ...] = ()

    def describe(self) -> dict[str, Any]:
        return {"max_claim_ttl_seconds": self.policy.max_ttl,
                "max_clock_offset_seconds": self.policy.max_clock_offset,
                "sources": dict(self.sources), "errors": list(self.errors)}


def _ttl(value: Any) -> tuple[int | None, str | None]:
    try:
        number = int(str(value).strip(), 10) if not isinstance(value, (bool, float)) else None
    except ValueError:
        number = None
    if number is None or not 0 < number <= TTL_CEILING:
        return None, (f"must be a whole number of seconds from 1 to {TTL_CEILING}, not "
                      f"{value!r} (using the default)")
    return number, None


def _offset(value: Any) -> tuple[float | None, str | None]:
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not 0 < number <= 86400:
        return None, f"must be a positive number of seconds, not {value!r} (using the default)"
    return number, None


PARSERS = {"max_ttl": _ttl, "max_clock_offset": _offset}


def load(env: Mapping[str, str], config_flag: str | None = None) -> LeaseSettings:
    found = config_file.layered(env, config_flag, "leases", ENV_NAMES, TOML_NAMES)
    values, sources, errors = config_file.parsed(found, PARSERS)
    return LeaseSettings(LeasePolicy(**values), sources, tuple(errors))


class Leases:
    """The current lease settings of this daemon, re-read when their files change."""

    def __init__(self, env: Mapping[str, str], config_flag: str | None = None,
                 log: Any = None) -> None:
        self.env = dict(env)
        self.config_flag = config_flag
        self.log = log
        self._signature: tuple[Any, ...] | None = None
        self._checked_at = -RECHECK_SECONDS
        self.settings = LeaseSettings()
        self.current()

    def current(self) -> LeaseSettings:
        now = time.monotonic()
        if now - self._checked_at < RECHECK_SECONDS:
            return self.settings
        self._checked_at = now
        paths = config_file.layered_paths(self.env, self.config_flag)
        signature = config_file.signature(paths)
        if signature != self._signature:
            self._signature = signature
            self.settings = load(self.env, self.config_flag)
            for error in self.settings.errors:
                if self.log is not None:
                    self.log.error(f"lease configuration: {error}")
        return self.settings

    @property
    def policy(self) -> LeasePolicy:
        return self.current().policy
