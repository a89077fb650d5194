"""What a user reads names only what a user has (issue 42): the docs, the README and
every message string of the three programs; the design notes and the peer tool's
checkout (DESIGN.md, STYLE.md, ../shared) live outside the clone and the wheel, and a
wheel has no docs/ folder: messages name a guide as `agentcoordctl docs TOPIC`."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"DESIGN\.md|STYLE\.md|\.\./shared|/work/shared")
DOCS_PATH = re.compile(r"docs/[\w-]+\.md")
GUIDE = re.compile(r"agentcoordctl docs ([a-z][\w-]*)")


def _message_strings(path: Path) -> list[str]:
    """String literals of a module other than docstrings (messages, help, templates)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def test_docs_and_readme_name_nothing_outside_the_clone() -> None:
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}"
             for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
             for number, line in enumerate(path.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert found == []


def test_messages_name_nothing_outside_the_clone() -> None:
    found = [f"{path.relative_to(REPO)}: {text[:120]!r}"
             for package in ("agentcoordd", "agentcoordctl", "agentcoordmcp")
             for path in sorted((REPO / package).rglob("*.py"))
             for text in _message_strings(path) if OUTSIDE.search(text)]
    assert found == []


def _all_message_strings() -> list[tuple[Path, str]]:
    return [(path, text) for package in ("agentcoordd", "agentcoordctl", "agentcoordmcp")
            for path in sorted((REPO / package).rglob("*.py")) for text in _message_strings(path)]


def test_messages_name_a_guide_by_the_docs_command_not_a_path() -> None:
    """A wheel user has `agentcoordctl docs fencing`, not docs/fencing.md."""
    assert [f"{path.relative_to(REPO)}: {text[:120]!r}" for path, text in _all_message_strings()
            if DOCS_PATH.search(text)] == []
    named = {topic for _path, text in _all_message_strings() for topic in GUIDE.findall(text)}
    assert named and named <= {p.stem for p in (REPO / "docs").glob("*.md")}, named


def _docs(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentcoordctl.cli", "docs", *args],
                          capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)})


def test_the_docs_command_lists_the_guides_and_prints_one(tmp_path: Path) -> None:
    listed = _docs("--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    topics = json.loads(listed.stdout)["topics"]
    assert set(topics) == {p.stem for p in (REPO / "docs").glob("*.md")}
    assert topics["fencing"].startswith("Fencing tokens")
    shown = _docs("fencing", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout == (REPO / "docs" / "fencing.md").read_text()
    assert _docs("docs/fencing.md#x", cwd=tmp_path).stdout == shown.stdout  # a path as printed before


@pytest.mark.parametrize("topic", ["fencng", "../README", ""])
def test_an_unknown_guide_is_one_line_naming_the_topics(topic: str, tmp_path: Path) -> None:
    refused = _docs(topic, cwd=tmp_path)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("unknown docs topic: ")
    assert "fencing" in refused.stderr
