"""docs/dashboard.md's State table names every lane_state the overview gives
(coord/holders.py) with the words the page's badge shows (app.js STATE_WORDS)."""

from __future__ import annotations

import re
from pathlib import Path

from agentcoordd.coord.holders import LANE_STATES

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "dashboard.md"
SCRIPT = ROOT / "agentcoordd" / "daemon" / "dashboard_static" / "app.js"


def test_the_documented_lane_states_are_the_ones_the_page_shows() -> None:
    table = DOC.read_text(encoding="utf-8").split("| `lane_state` | State shows |", 1)[1].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^  \| `([a-z_]+)` \| (.+) \|$", table, re.M))
    body = re.search(r"const STATE_WORDS = \{(.*?)\};", SCRIPT.read_text(encoding="utf-8"), re.S)
    assert body is not None
    words = dict(re.findall(r'(\w+): "([^"]+)"', body.group(1)))

    assert set(rows) == set(words) == set(LANE_STATES)
    for state, shown in rows.items():
        assert shown.startswith(words[state]), (state, shown, words[state])
