"""`version` and `config show`: the stable machine contract for workflow docs.

Key sets match the existing tool (../shared/spec/outputs/version-json.txt,
config-show-json.txt). `version` is the protocol *contract* version every
`status --json` payload also carries, not this package's release number.
The exit-code table lists 1–3 plus the stack doctor's usage code; the
reserved 4 (RESERVATION_REFUSED) is not listed until something emits it.
"""

from __future__ import annotations

from typing import Any

from agentcoordd.model.errors import (
    EXIT_CLAIM_REFUSED,
    EXIT_OPERATIONAL,
    EXIT_RESERVATION_REFUSED,
    EXIT_USAGE,
)
from agentcoordd.model.liveness import DEAD_AFTER_TTL_MULTIPLIER
from agentcoordd.model.records import ARCHIVE_SCHEMA_VERSION, LANE_CLOSED_SCHEMA_VERSION, SCHEMA_VERSION
from agentcoordd.model.status import (
    DEPENDENCY_TERMINAL_STATUSES,
    STATUS_ALIASES,
    TERMINAL_STATUSES,
    WORKING_STATUSES,
)

CONTRACT_VERSION = "0.1.0"
DEFAULT_REF = "state"
EXIT_STACK_USAGE = 64


def version_info() -> dict[str, Any]:
    return {
        "version": CONTRACT_VERSION,
        "schema_version": SCHEMA_VERSION,
        "lane_closed_schema_version": LANE_CLOSED_SCHEMA_VERSION,
        "archive_schema_version": ARCHIVE_SCHEMA_VERSION,
        # The legacy GitHub backend is refused; there is never a default one.
        "default_backend": None,
        "default_ref": DEFAULT_REF,
    }


def config_info() -> dict[str, Any]:
    # Imported here: the defaults live with the use cases that apply them.
    from agentcoordd.coord.claims import DEFAULT_CLAIM_TTL
    from agentcoordd.coord.gc import DEFAULT_ARCHIVE_DAYS, DEFAULT_HOT_DAYS, DEFAULT_SYNTHETIC_HOT_DAYS
    from agentcoordd.coord.heartbeats import DEFAULT_HEARTBEAT_TTL

    return {
        **version_info(),
        "default_claim_ttl_seconds": DEFAULT_CLAIM_TTL,
        "default_heartbeat_ttl_seconds": DEFAULT_HEARTBEAT_TTL,
        "heartbeat_dead_after_ttl_multiplier": DEAD_AFTER_TTL_MULTIPLIER,
        "retention_policy": {
            "hot_days": DEFAULT_HOT_DAYS,
            "archive_days": DEFAULT_ARCHIVE_DAYS,
            "synthetic_hot_days": DEFAULT_SYNTHETIC_HOT_DAYS,
        },
        "dependency_terminal_statuses": list(DEPENDENCY_TERMINAL_STATUSES),
        "heartbeat_status_vocabulary": {
            "working": list(WORKING_STATUSES),
            "terminal": list(TERMINAL_STATUSES),
            "aliases": dict(STATUS_ALIASES),
        },
        "exit_codes": {
            "usage": EXIT_USAGE,
            "stack_usage": EXIT_STACK_USAGE,
            "operational": EXIT_OPERATIONAL,
            "claim_refused": EXIT_CLAIM_REFUSED,
            "reservation_refused": EXIT_RESERVATION_REFUSED,
        },
    }
