"""No module of the package uses another module's private names (a leading underscore).

A private name is the module's own business: ``from .engine import _dirs`` or ``cg._inside(...)``
ties the caller to a detail its owner may change without looking further than the module. The
owner makes the name public (and documents it) when another module needs it.

Read by AST over ``hook/mixed_cpus_hook``: an import of a private name from a module of the
package, and an attribute ``m._name`` where ``m`` is bound to a module of the package. Dunder
names (``__version__``) are public. ALLOWED lists the uses waiting for a public name, with why.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

PACKAGE = "mixed_cpus_hook"
ROOT = Path(__file__).resolve().parents[2] / "hook" / PACKAGE

# (file under hook/mixed_cpus_hook, "module.name") -> why it is still there
ALLOWED: Dict[Tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package_module(name: str) -> bool:
    """Whether ``name`` (dotted) is a module or package of the package tree."""
    rel = Path(*name.split("."))
    return (ROOT.parent / rel).with_suffix(".py").is_file() or (ROOT.parent / rel / "__init__.py").is_file()


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def resolve_from(node: ast.ImportFrom, current: str, is_init: bool) -> Optional[str]:
    """The absolute module of a ``from X import ...`` (None: outside the package)."""
    if node.level == 0:
        target = node.module or ""
    else:
        base = current.split(".") if is_init else current.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    return target if target == PACKAGE or target.startswith(PACKAGE + ".") else None


def compute_private_uses(source: str, current: str, is_init: bool = False) -> List[str]:
    """``module.name`` for each private name of another package module that ``source`` uses (pure)."""
    tree = ast.parse(source)
    modules: Dict[str, str] = {}  # local name -> the package module it is bound to
    uses: List[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = resolve_from(node, current, is_init)
            if target is None:
                continue
            for alias in node.names:
                if is_package_module(f"{target}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{target}.{alias.name}"
                if is_private(alias.name) or any(is_private(p) for p in target.split(".")):
                    uses.append(f"{target}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    if alias.asname:
                        modules[alias.asname] = alias.name
                    if any(is_private(p) for p in alias.name.split(".")):
                        uses.append(alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            if is_private(node.attr) and modules[node.value.id] != current:
                uses.append(f"{modules[node.value.id]}.{node.attr}")
    return uses


def package_files() -> Iterator[Path]:
    return iter(sorted(ROOT.rglob("*.py")))


def test_no_module_uses_another_modules_private_names() -> None:
    found = []
    for path in package_files():
        rel = str(path.relative_to(ROOT))
        for use in compute_private_uses(path.read_text(encoding="utf-8"), module_name(path),
                                        path.name == "__init__.py"):
            if (rel, use) not in ALLOWED:
                found.append(f"{rel}: {use}")
    assert found == [], "private names used across modules (make them public, or list them in ALLOWED with why)"


def test_allowed_uses_still_exist() -> None:
    """An entry of ALLOWED that is no longer needed goes (the allow-list only shrinks)."""
    stale = [key for key in ALLOWED
             if key[1] not in compute_private_uses((ROOT / key[0]).read_text(encoding="utf-8"),
                                                   module_name(ROOT / key[0]))]
    assert stale == []


CURRENT = "mixed_cpus_hook.frontends.systemd.watches"


@pytest.mark.parametrize("source,expected", [
    pytest.param("from ...usecases.engine import _dirs\n", ["mixed_cpus_hook.usecases.engine._dirs"],
                 id="relative-from-import"),
    pytest.param("from mixed_cpus_hook.node.cgroupfs import _readlink\n",
                 ["mixed_cpus_hook.node.cgroupfs._readlink"], id="absolute-from-import"),
    pytest.param("from ...node import cgroupfs as cg\ncg._inside('a', 'b')\n",
                 ["mixed_cpus_hook.node.cgroupfs._inside"], id="attribute-of-a-from-imported-module"),
    pytest.param("import mixed_cpus_hook.core.cgroup as cgroup\ncgroup._join\n",
                 ["mixed_cpus_hook.core.cgroup._join"], id="attribute-of-an-imported-module"),
    pytest.param("def f():\n    from ...usecases import reconcile\n    return reconcile._settle\n",
                 ["mixed_cpus_hook.usecases.reconcile._settle"], id="inside-a-function"),
    pytest.param("from ... import __version__\n", [], id="dunder-is-public"),
    pytest.param("from ...node import cgroupfs as cg\ncg.read_layout\n", [], id="public-attribute"),
    pytest.param("from ...node.cgroupfs import read_layout\nread_layout._cache\n", [],
                 id="attribute-of-a-function-is-not-a-module"),
    pytest.param("from collections import _chain\nimport os\nos._exit\n", [], id="outside-the-package"),
    pytest.param("class A:\n    def f(self):\n        return self._x\n", [], id="own-attribute"),
])
def test_compute_private_uses(source: str, expected: List[str]) -> None:
    assert compute_private_uses(source, CURRENT) == expected
