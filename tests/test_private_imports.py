"""No bayestrees module uses another module's private (underscore) names.

A module's underscore names are its own: another module that imports one (``from .kernel import
_route``) or reaches it through a module alias (``from . import dp as P`` then ``P._bucket``)
depends on something its owner may change without notice.  What two modules share is made
public where it lives (or moved to the shared layer).  The package is read with :mod:`ast`;
nothing is imported.  Dunder names (``__version__``) are public.
"""
from __future__ import annotations

import ast
from pathlib import Path

from test_imports import PACKAGE, module_names


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(package: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    return ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))


def private_uses(root: Path) -> list[str]:
    """``"importer: owner.name"`` for every underscore name used across modules under ``root``.

    Parameters
    ----------
    root : Path
        The package folder.

    Returns
    -------
    list of str
        Sorted; empty when no module uses another's private names.
    """
    mods = module_names(root)
    found = set()
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases = {}  # local name -> module of the package
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(package, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if sub in mods:
                        aliases[alias.asname or alias.name] = sub
                        if _private(alias.name):
                            found.add(f"{name}: {sub}")
                    elif base in mods and base != name and _private(alias.name):
                        found.add(f"{name}: {base}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and _private(node.attr) and aliases[node.value.id] != name):
                found.add(f"{name}: {aliases[node.value.id]}.{node.attr}")
    return sorted(found)


def test_no_module_uses_another_modules_private_names():
    uses = private_uses(PACKAGE)
    assert not uses, "private names used across modules (make them public where they live):\n" + "\n".join(uses)


def test_the_check_finds_private_uses(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def _hidden():\n    pass\n\ndef shown():\n    pass\n\n__version__ = 1\n")
    (pkg / "sub" / "b.py").write_text("from ..a import _hidden, shown, __version__\n")
    (pkg / "sub" / "c.py").write_text("from .. import a as A\n\nx = A._hidden\ny = A.shown\n")
    (pkg / "d.py").write_text("import pkg.a as A\n\ndef _own():\n    pass\n\nz = A._hidden\n")
    assert private_uses(pkg) == ["pkg.d: pkg.a._hidden", "pkg.sub.b: pkg.a._hidden", "pkg.sub.c: pkg.a._hidden"]
