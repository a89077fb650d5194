"""The existing tool's captured doctor outputs (tests/fixtures/spec-outputs/doctor-*.txt,
copied from ../shared/spec/outputs)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Capture:
    command: str
    exit: int
    stdout: str
    stderr: str

    def json(self, tmp: Path) -> Any:
        return json.loads(self.stdout.replace("<TMP>", str(tmp)))

    def text(self, tmp: Path) -> str:
        return self.stdout.replace("<TMP>", str(tmp))


def load(fixtures: Path, name: str) -> Capture:
    raw = (fixtures / "spec-outputs" / f"doctor-{name}.txt").read_text()
    head, _, rest = raw.partition("# stdout:\n")
    stdout, _, stderr = rest.partition("# stderr:\n")
    fields = dict(line[2:].split(": ", 1) for line in head.splitlines() if ": " in line)
    return Capture(fields["command"], int(fields["exit"]), stdout, stderr)
