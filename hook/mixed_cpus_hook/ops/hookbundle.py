"""Write and read the hook path's bundle: its compiled modules in one file (see the package's docstring).

``python3 -m mixed_cpus_hook.ops.hookbundle PACKAGE_DIR [--ddir DIR]`` writes
``PACKAGE_DIR/__pycache__/hookpath.<cache tag>.bundle`` for the interpreter that runs it, so
run it with the python3 that will run the hook (``make install`` and the image build do).
``--ddir`` is the directory the package will have on the node when it is built elsewhere
(an RPM's buildroot), as ``compileall -d``: tracebacks name the installed files.

The bundle holds only the modules a container start can import (``HOOK_PATH_MODULES``;
``tests/unit/test_hookbundle.py`` checks the list against what ``apply`` and ``release``
really import): every module in it is unmarshalled once per hook run, needed or not, so
the NRI plugin's and the CLI's modules stay out.
"""

from __future__ import annotations

import marshal
import os
import sys
from types import CodeType
from typing import Dict, List, Optional, Tuple

from .. import BUNDLE_FORMAT

# The package's modules that `mixed-cpus-hook apply` and `release` may import, in any
# configuration (cgroup v1 or v2, either driver, either exclusive source) and on any
# outcome (a write, a failure reported to the journal).
HOOK_PATH_MODULES = (
    "mixed_cpus_hook.core",
    "mixed_cpus_hook.core.bounds",
    "mixed_cpus_hook.core.cgroup",
    "mixed_cpus_hook.core.compat",
    "mixed_cpus_hook.core.cpuset",
    "mixed_cpus_hook.core.desired",
    "mixed_cpus_hook.core.errors",
    "mixed_cpus_hook.core.model",
    "mixed_cpus_hook.core.plan",
    "mixed_cpus_hook.core.quota",
    "mixed_cpus_hook.core.request",
    "mixed_cpus_hook.core.validate",
    "mixed_cpus_hook.frontends",
    "mixed_cpus_hook.frontends.entry",
    "mixed_cpus_hook.frontends.hook",
    "mixed_cpus_hook.frontends.hook.fastpath",
    "mixed_cpus_hook.node",
    "mixed_cpus_hook.node.cgroupfs",
    "mixed_cpus_hook.node.config",
    "mixed_cpus_hook.node.facts",
    "mixed_cpus_hook.node.files",
    "mixed_cpus_hook.node.kubelet",
    "mixed_cpus_hook.node.log",
    "mixed_cpus_hook.node.oci",
    "mixed_cpus_hook.store",
    "mixed_cpus_hook.store.records",
    "mixed_cpus_hook.usecases",
    "mixed_cpus_hook.usecases.apply",
    "mixed_cpus_hook.usecases.common",
    "mixed_cpus_hook.usecases.converge",
    "mixed_cpus_hook.usecases.release",
)

PACKAGE = "mixed_cpus_hook"


class BundleError(Exception):
    """The bundle cannot be written: a module of the list is missing or does not compile."""


def format_bundle_name(cache_tag: Optional[str] = None) -> str:
    """The bundle's file name for an interpreter (``hookpath.cpython-39.bundle``)."""
    return f"hookpath.{cache_tag or sys.implementation.cache_tag}.bundle"


def write_bundle(package_dir: str, ddir: Optional[str] = None, modules: Tuple[str, ...] = HOOK_PATH_MODULES) -> str:
    """Compile ``modules`` from ``package_dir`` into its bundle; the bundle's path.

    Each entry keeps the source's size and modification time, which the finder compares
    with the file on the node before serving it. Written to a temporary file and renamed:
    a hook starting meanwhile reads the old bundle or the new one, never half of one.
    """
    from importlib.util import MAGIC_NUMBER, cache_from_source

    table: Dict[str, Tuple[str, bool, int, int, CodeType, str]] = {}
    for name in modules:
        rel, is_package = _locate(package_dir, name)
        source = os.path.join(package_dir, rel)
        st = os.stat(source)
        with open(source, "rb") as f:
            text = f.read()
        shown = os.path.join(ddir or os.path.realpath(package_dir), rel)
        try:
            code = compile_module(text, shown)
        except SyntaxError as exc:
            raise BundleError(f"{source}: does not compile: {exc}") from None
        table[name] = (rel, is_package, st.st_size, st.st_mtime_ns, code, cache_from_source(rel))
    cache = os.path.join(package_dir, "__pycache__")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, format_bundle_name())
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(MAGIC_NUMBER + marshal.dumps((BUNDLE_FORMAT, table)))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def compile_module(text: bytes, filename: str) -> CodeType:
    """A module's code, its ``from __future__`` statements turned into compiler flags.

    The statement is a compiler directive, and also an import that binds the feature's name:
    the first module that runs it loads the standard library's ``__future__`` module, ~0.15 ms
    of every container start. Compiled with the flags instead, the code is the same but for
    that binding (no module of the package uses it).
    """
    import __future__
    import ast

    tree = ast.parse(text, filename)
    flags = 0
    body = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                flags |= getattr(__future__, alias.name).compiler_flag
        else:
            body.append(node)
    tree.body = body
    return compile(tree, filename, "exec", flags=flags, dont_inherit=True)


def _locate(package_dir: str, name: str) -> Tuple[str, bool]:
    if not name.startswith(PACKAGE + "."):
        raise BundleError(f"{name}: not a module of {PACKAGE}")
    parts = name.split(".")[1:]
    for rel, is_package in ((os.path.join(*parts, "__init__.py"), True), (os.path.join(*parts) + ".py", False)):
        if os.path.isfile(os.path.join(package_dir, rel)):
            return rel, is_package
    raise BundleError(f"{name}: no source under {package_dir}")


def read_bundle_status(package_dir: str, cache_tag: Optional[str] = None) -> Tuple[str, List[str]]:
    """What a hook run would get from this install's bundle: (state, stale module names).

    state is "absent", "unreadable", "other-python" (built by an interpreter with another
    magic number), "current" or "stale" (the names whose source changed: those load the
    ordinary way, a little slower).
    """
    from importlib.util import MAGIC_NUMBER

    path = os.path.join(package_dir, "__pycache__", format_bundle_name(cache_tag))
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return "absent", []
    except OSError:
        return "unreadable", []
    if data[:4] != MAGIC_NUMBER:
        return "other-python", []
    try:
        fmt, table = marshal.loads(data[4:])
    except (ValueError, EOFError, TypeError):
        return "unreadable", []
    if fmt != BUNDLE_FORMAT or not isinstance(table, dict):
        return "unreadable", []
    stale = []
    for name, (rel, _pkg, size, mtime_ns, _code, _cached) in sorted(table.items()):
        try:
            st = os.stat(os.path.join(package_dir, rel))
        except OSError:
            stale.append(name)
            continue
        if (st.st_size, st.st_mtime_ns) != (size, mtime_ns):
            stale.append(name)
    return ("stale" if stale else "current"), stale


def main(argv: Optional[List[str]] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python3 -m mixed_cpus_hook.ops.hookbundle",
                                description="Write the hook path's bundle into an installed package directory.")
    p.add_argument("package_dir", help="the installed mixed_cpus_hook directory (in a buildroot: there)")
    p.add_argument("--ddir", help="the package directory's path on the node, if it differs (as compileall -d)")
    args = p.parse_args(argv)
    try:
        path = write_bundle(args.package_dir, args.ddir)
    except (BundleError, OSError) as exc:
        print(f"hookbundle: {exc}", file=sys.stderr)
        return 1
    print(f"hookbundle: wrote {path} ({len(HOOK_PATH_MODULES)} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
