"""What a user reads names only what a user has (issue 42): the docs, the README and
every message string of the three programs; the design notes and the peer tool's
checkout (DESIGN.md, STYLE.md, ../shared) live outside the clone and the wheel."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"DESIGN\.md|STYLE\.md|\.\./shared|/work/shared")


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
