"""The rating, engine, state and event packages import each other without circles.

Read from the sources (``ast``): every ``import`` of a ``stream`` module, at module level or
inside a function, is an edge. A circle among modules, or between two of these packages,
fails with the modules involved.
"""

from __future__ import annotations

import ast
from pathlib import Path

import stream

ROOT = Path(stream.__file__).parent
LAYERS = ("stream.ratings", "stream.engine", "stream.state", "stream.events")


def _modules() -> dict[str, Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = list(f.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        pkg = m if f.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for name in names:
                target = resolve(name) if name.startswith("stream") else None
                if target is not None and target != m:
                    graph[m].add(target)
    return graph


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m == goal:
            return True
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return False


def _in_layers(m: str) -> bool:
    return any(m == p or m.startswith(p + ".") for p in LAYERS)


def test_no_module_circle() -> None:
    graph = _graph()
    circles = sorted((m, t) for m in graph if _in_layers(m) for t in graph[m] if _reaches(graph, t, m))
    assert not circles, circles


def test_no_package_circle() -> None:
    graph = _graph()
    package = {m: next((p for p in LAYERS if m == p or m.startswith(p + ".")), m) for m in graph}
    edges = {(package[m], package[t]) for m in graph for t in graph[m] if package[m] != package[t]}
    both = sorted((a, b) for a, b in edges if (b, a) in edges and a in LAYERS and b in LAYERS)
    assert not both, both
