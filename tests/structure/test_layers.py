"""The structure docs/architecture.md describes, checked: one handler per request,
no import circle, and each layer importing only what it may."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentcoordd import protocol as p
from agentcoordd.daemon import dispatch

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "agentcoordd"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, at any level (lazy and TYPE_CHECKING imports too)."""
    found: set[str] = set()
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def graph(root: Path) -> dict[str, set[str]]:
    modules = {module_name(f): f for f in root.rglob("*.py")}
    return {name: {m for m in imports_of(f) if m in modules and m != name}
            for name, f in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_request_type_has_exactly_one_handler() -> None:
    assert set(dispatch.HANDLERS) == set(p.REQUEST_TYPES)
    handlers = list(dispatch.HANDLERS.values())
    assert len(set(handlers)) == len(handlers), "one function answers two request types"
    for request_type, handler in dispatch.HANDLERS.items():
        assert handler.__module__.startswith("agentcoordd.daemon.handlers."), request_type


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_in_agentcoordd() -> None:
    assert cycles(graph(PACKAGE)) == []


LAYERS = {  # a module may import these agentcoordd layers (and its own)
    "agentcoordd.model": ("agentcoordd.model",),
    "agentcoordd.store": ("agentcoordd.model", "agentcoordd.store"),
    "agentcoordd.coord": ("agentcoordd.model", "agentcoordd.store", "agentcoordd.coord"),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_each_layer_imports_only_the_layers_below_it(layer: str) -> None:
    edges = graph(PACKAGE)
    # `agentcoordd` itself holds only __version__
    wrong = {name: sorted(m for m in deps if m != "agentcoordd" and not m.startswith(LAYERS[layer]))
             for name, deps in edges.items() if name.startswith(layer)}
    assert {k: v for k, v in wrong.items() if v} == {}


# The operator's admin commands run where the daemon does not: `token` provisions
# machine tokens with wrangler and etcd users with the etcd admin API.
CTL_ADMIN_IMPORTS = {"agentcoordd.tokens", "agentcoordd.store.etcd_admin"}


def test_agentcoordctl_imports_only_protocol_and_model() -> None:
    wrong = {}
    for path in sorted((REPO / "agentcoordctl").glob("*.py")):
        found = {m for m in imports_of(path) if m.startswith("agentcoordd")}
        allowed = {m for m in found if m in ("agentcoordd", "agentcoordd.protocol")
                   or m.startswith("agentcoordd.model")}
        if path.name == "tokens.py":
            allowed |= {m for m in found if m.startswith(tuple(CTL_ADMIN_IMPORTS))}
        if found - allowed:
            wrong[path.name] = sorted(found - allowed)
    assert wrong == {}


def _loaded_after(statement: str, baseline: str = "pass") -> list[str]:
    probe = (f"import sys; {baseline}; before = set(sys.modules); {statement}; "
             "import json; print(json.dumps(sorted(set(sys.modules) - before)))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_importing_the_cli_loads_no_daemon_coord_or_store_module() -> None:
    loaded = _loaded_after("import agentcoordctl.cli")
    assert [m for m in loaded if m.startswith(("agentcoordd.daemon", "agentcoordd.coord",
                                                "agentcoordd.store"))] == []


def test_the_protocol_imports_only_the_standard_library_msgspec_and_model() -> None:
    loaded = _loaded_after("import agentcoordd.protocol", baseline="import msgspec")
    stdlib = set(sys.stdlib_module_names)
    foreign = [m for m in loaded if m.split(".")[0] not in stdlib
               and not m.startswith(("agentcoordd.model", "_"))
               and m not in ("agentcoordd", "agentcoordd.protocol")]
    assert foreign == []


def test_agentcoordctl_never_imports_the_mcp_server() -> None:
    """agentcoordmcp is an optional extra built on ctl; ctl must not depend on it."""
    wrong = {path.name: sorted(m for m in imports_of(path) if m.startswith(("agentcoordmcp", "mcp")))
             for path in sorted((REPO / "agentcoordctl").glob("*.py"))}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_the_mcp_server_is_a_daemon_client_like_ctl() -> None:
    """agentcoordmcp talks to agentcoordd only through ctl and the protocol (never a
    second daemon: no daemon, coord or store module)."""
    wrong = {}
    for path in sorted((REPO / "agentcoordmcp").glob("*.py")):
        found = {m for m in imports_of(path) if m.startswith("agentcoordd")}
        allowed = {m for m in found if m in ("agentcoordd", "agentcoordd.protocol")
                   or m.startswith("agentcoordd.model")}
        if found - allowed:
            wrong[path.name] = sorted(found - allowed)
    assert wrong == {}


def test_importing_the_cli_loads_no_mcp_module() -> None:
    loaded = _loaded_after("import agentcoordctl.cli")
    assert [m for m in loaded if m.split(".")[0] in ("agentcoordmcp", "mcp", "pydantic")] == []
