"""No import cycles among the bayestrees modules.

Every module's imports are read with :mod:`ast` (absolute and relative, at module level and
inside functions or ``if`` blocks), without importing anything, and the resulting graph is
checked twice:

- between modules: no module may depend on itself through other modules;
- between the parts of the package (``bayestrees.data``, ``bayestrees.inference``,
  ``bayestrees.estimators``, ...; every module of a sub-package counts as the sub-package): the
  layers must go in one direction, so two parts may not import each other even through
  different modules.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bayestrees"

# Known edges in files being changed by another engineer, allowed until they are removed there
# (none left: the estimators import make_key from bayestrees.keys, and no model module imports the
# estimators). Any edge that closes a cycle fails the test.
KNOWN_EDGES: set[tuple[str, str]] = set()


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name of every module under ``root`` (a package folder) and its file.

    Parameters
    ----------
    root : Path
        The package folder; its name is the top-level package name.

    Returns
    -------
    dict
        ``{"pkg.sub.mod": path}``; a package's ``__init__.py`` is named after the package.
    """
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def import_graph(root: Path) -> set[tuple[str, str]]:
    """Edges ``(importer, imported)`` between the modules under ``root``.

    Parameters
    ----------
    root : Path
        The package folder.

    Returns
    -------
    set of (str, str)
        One edge per module that imports another module of the package, wherever the import
        statement stands. ``from pkg import name`` points at ``pkg.name`` when that is a module,
        otherwise at ``pkg``; imports from outside the package are left out.
    """
    mods = module_names(root)
    edges = set()
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    if node.level - 1 >= len(parts):
                        raise ValueError(f"{path}: relative import beyond the top-level package")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in mods else base)
            for target in targets:
                while target not in mods and "." in target:  # pkg.mod.attr -> pkg.mod
                    target = target.rpartition(".")[0]
                if target in mods and target != name:
                    edges.add((name, target))
    return edges


def find_cycles(edges) -> list[list[str]]:
    """One cycle through every strongly connected component of more than one node.

    Parameters
    ----------
    edges : iterable of (str, str)

    Returns
    -------
    list of list of str
        Each cycle as ``[a, b, ..., a]``, sorted; empty when the graph has no cycle.
    """
    graph: dict[str, list[str]] = {}
    for a, b in sorted(set(edges)):
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    # Tarjan's strongly connected components, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1 or node in graph[node]:
                    components.append(set(comp))
    cycles = []
    for comp in components:
        # the shortest way back to the component's first node (breadth first, inside the component)
        first = min(comp)
        prev: dict[str, str | None] = {first: None}
        frontier, last = [first], None
        while last is None:
            nxt = []
            for node in frontier:
                if first in graph[node]:
                    last = node
                    break
                for child in graph[node]:
                    if child in comp and child not in prev:
                        prev[child] = node
                        nxt.append(child)
            frontier = nxt
        path = [last]
        while prev[path[-1]] is not None:
            path.append(prev[path[-1]])
        cycles.append(path[::-1] + [first])
    return sorted(cycles)


def part_of(name: str, top: str = "bayestrees") -> str:
    """The part of the package a module belongs to: ``top.x.y.z`` -> ``top.x``."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == top else name


def format_cycles(cycles) -> str:
    return "\n".join(" -> ".join(c) for c in cycles)


def test_no_import_cycle_between_modules():
    edges = import_graph(PACKAGE) - KNOWN_EDGES
    cycles = find_cycles(edges)
    assert not cycles, "import cycles between modules:\n" + format_cycles(cycles)


def test_no_import_cycle_between_parts_of_the_package():
    edges = import_graph(PACKAGE) - KNOWN_EDGES
    parts = {(part_of(a), part_of(b)) for a, b in edges if part_of(a) != part_of(b)}
    cycles = find_cycles(parts)
    detail = {(pa, pb): sorted((a, b) for a, b in edges if (part_of(a), part_of(b)) == (pa, pb)) for pa, pb in parts}
    lines = []
    for c in cycles:
        lines.append(" -> ".join(c))
        for pa, pb in zip(c, c[1:]):
            lines += [f"    {a} -> {b}" for a, b in detail[(pa, pb)]]
    assert not cycles, "import cycles between parts of the package:\n" + "\n".join(lines)


def test_forest_workers_import_in_one_direction():
    """bootstrap plans forest fits and uses the workers; the workers never import bootstrap."""
    edges = import_graph(PACKAGE)
    assert ("bayestrees.inference.forest.bootstrap", "bayestrees.inference.forest.workers") in edges
    assert not any(a == "bayestrees.inference.forest.workers" and b == "bayestrees.inference.forest.bootstrap" for a, b in edges)


def test_graph_reads_every_kind_of_import(tmp_path):
    """The parser sees absolute, relative, package-level and in-function imports."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("import os\n\ndef f():\n    from .sub import b\n    return b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from .. import c\nfrom ..sub import d as dd\n")
    (pkg / "sub" / "d.py").write_text("import pkg.c\nfrom pkg.a import f\n")
    (pkg / "c.py").write_text("from . import sub\nfrom .sub.b import g\n")
    edges = import_graph(pkg)
    assert edges == {
        ("pkg", "pkg.a"),
        ("pkg.a", "pkg.sub.b"),
        ("pkg.sub.b", "pkg.c"),
        ("pkg.sub.b", "pkg.sub.d"),
        ("pkg.sub.d", "pkg.c"),
        ("pkg.sub.d", "pkg.a"),
        ("pkg.c", "pkg.sub"),
        ("pkg.c", "pkg.sub.b"),
    }
    cycles = find_cycles(edges)
    # a -> sub.b -> sub.d -> a and sub.b -> c -> sub.b are one strongly connected component
    assert len(cycles) == 1 and cycles[0][0] == cycles[0][-1] == "pkg.a"
    assert all((x, y) in edges for x, y in zip(cycles[0], cycles[0][1:]))


@pytest.mark.parametrize("edges, n", [([("a", "b"), ("b", "c")], 0), ([("a", "b"), ("b", "a"), ("c", "d")], 1),
                                      ([("a", "b"), ("b", "a"), ("c", "d"), ("d", "c")], 2)])
def test_find_cycles(edges, n):
    assert len(find_cycles(edges)) == n


#: the family rooms under bayestrees.inference: each may import the shared layer, never another room
ROOMS = ("forest", "pcfg", "safebayes", "bcart", "bet")


def test_family_rooms_import_the_shared_layer_not_each_other():
    """A room (``bayestrees.inference.<family>``) uses the shared pieces beside it (loop, heap, moves,
    tempering, resample, ...) and the layers below, never another family's room, so that a family
    can be added, changed or removed without touching the others."""
    prefix = "bayestrees.inference."

    def room(mod):
        rest = mod[len(prefix):].split(".") if mod.startswith(prefix) else []
        return rest[0] if rest and rest[0] in ROOMS else None

    crossing = sorted((a, b) for a, b in import_graph(PACKAGE)
                      if room(a) and room(b) and room(a) != room(b))
    assert not crossing, f"family rooms importing each other: {crossing}"
