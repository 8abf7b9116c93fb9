"""The layout holds together: no import cycles (a function's deferred import counts), no
module over 500 lines, and ``app/`` holds packages named for what they hold. The layers
themselves are import-linter contracts (pyproject.toml, ``lint-imports`` in make test)."""

from __future__ import annotations

from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "providers", "tool_registry")
MAX_LINES = 500


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(
                        graph.find_modules_directly_imported_by(child)))))
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


def test_no_import_cycles() -> None:
    graph = grimp.build_graph(*PACKAGES)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_one() -> None:
    graph = grimp.ImportGraph()
    for module in ("x.a", "x.b", "x.c"):
        graph.add_module(module)
    graph.add_import(importer="x.a", imported="x.b")
    graph.add_import(importer="x.b", imported="x.a")
    graph.add_import(importer="x.b", imported="x.c")
    assert _cycles(graph) == [["x.a", "x.b"]]


def test_no_module_is_over_500_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for package in PACKAGES
            for p in (ROOT / package).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_app_is_packages() -> None:
    modules = sorted(p.name for p in (ROOT / "app").glob("*.py"))
    assert modules == ["__init__.py", "config.py"]  # the one reader of the environment
