"""`fence check`: is a fencing token the target's current grant? (docs/fencing.md)

    fence check --repo OWNER/REPO --target N --token TOKEN [--json]

exit 0: TOKEN holds the target; 3: superseded (the claim moved on, was released,
or is gone); 2: UNKNOWN (the backend could not say). One line on stdout (or the
JSON verdict), cheap enough for a git pre-push hook; and `--fencing-token N` on
heartbeat, release and record-event, which refuse a superseded token the same way.
"""

from __future__ import annotations

from typing import Any

from agentcoordctl import spec
from agentcoordctl.options import BACKEND, JSON, REPO, TARGET, run
from agentcoordctl.render import printable
from agentcoordctl.spec import REQUIRED, Opt
from agentcoordd import protocol as p

FENCING_TOKEN = Opt("--fencing-token", "fencing_token", "int", metavar="TOKEN",
                    help="Write only while this grant (claim's fencing_token) holds the target; "
                    "superseded: exit 3, nothing written.")


def render(payload: dict[str, Any]) -> str:
    return printable(payload.get("detail") or "")


def check(*, repo: str, target: str, token: int, json: bool, selection: p.Selection) -> None:
    run(p.FenceCheck(repo=repo, target=target, token=token, selection=selection), as_json=json,
        text=render)


COMMANDS = (spec.Command(
    ("fence", "check"), "Is TOKEN the current grant of ISSUE_OR_PR? exit 0 yes, 3 superseded, "
    "2 unknown (a guard for pushes, deploys and CI jobs: agentcoordctl docs fencing).",
    (REPO, TARGET,
     Opt("--token", "token", "int", default=REQUIRED, metavar="TOKEN",
         help="The fencing token your claim was granted (claim --json: claim.fencing_token)."),
     JSON, BACKEND),
    check),)
