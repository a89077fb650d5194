"""Who may act for whom (docs/security.md).

The authenticated principals are the **machine** (its token on the HTTP and
etcd backends; the daemon's machine id) and the **local uid** (the daemon
serves its own user only). An agent id is a *label* within them: any process
of that user on that machine can name any agent id, and nothing can prove it is
that agent. So the rules below do not authenticate agents; they make acting
under another agent's label deliberate and visible:

* **Ending another agent's work needs `--force`.** A claim (and a keep-alive
  lane) remembers the machine and session it was taken from. `release` and
  `lanes stop` from another machine or another session (`foreign`) are refused
  unless forced; a forced one records who did it (`forced_by`: the socket's
  uid and pid, the machine, the session, and why it was foreign) in its event.
  A record without a machine or session says nothing: it is not foreign.
* **Answers carry the daemon's stamp.** `answer` writes `written_by` (the
  daemon, the caller's machine and agent id); waiters take the first stamped
  answer written after its request (`stamped_answer`). A record without the
  stamp — written around the daemon — is shown, never taken. The stamp is a
  mark of the path a record came by, not a signature: a machine whose token
  may write a batch's events can forge it (scope tokens so that only trusted
  machines write events).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentcoordd.model.identity import Identity

STAMP_FIELD = "written_by"
STAMP_DAEMON = "agentcoordd"


def foreign(recorded: Mapping[str, Any], identity: Identity) -> str | None:
    """Why a caller with `identity` is not the one that took `recorded` (a claim or a
    lane: its machine_id and session_id); None when nothing says it is another."""
    reasons = []
    machine = recorded.get("machine_id")
    if isinstance(machine, str) and machine and machine != identity.machine_id:
        reasons.append(f"it was taken on machine {machine}, this call comes from "
                       f"{identity.machine_id or 'no machine id'}")
    session = recorded.get("session_id")
    if isinstance(session, str) and session and session != identity.session_id:
        reasons.append(f"it was taken in session {session}, this call comes from "
                       f"{identity.session_id or 'no session'}")
    return "; ".join(reasons) or None


def forced_by(actor: Mapping[str, Any], why: str) -> dict[str, Any]:
    """What a forced action records: who did it, and why it was another agent's."""
    return {**actor, "reason": why}


def stamp(identity: Identity, agent_id: str | None) -> dict[str, Any]:
    """The daemon's stamp on an answer: the path it came by, and its author."""
    return {k: v for k, v in (("daemon", STAMP_DAEMON), ("machine_id", identity.machine_id),
                              ("agent_id", agent_id)) if v is not None}


def stamped(record: Mapping[str, Any]) -> bool:
    written = record.get(STAMP_FIELD)
    return isinstance(written, dict) and written.get("daemon") == STAMP_DAEMON
