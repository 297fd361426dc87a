"""NRI mode: the long-running plugin for containerd and CRI-O (``mixed-cpus-hook nri``).

The second front end over the engine (hook mode's is ``fastpath``): ``mux`` and ``ttrpc``
are the wire, ``api`` the NRI messages, ``handlers`` turns them into engine calls, ``plugin``
is the connection loop. Nothing on the hook's createRuntime path imports this package (it
needs protobuf).

Importing this package imports protobuf first, without pkg_resources (import_protobuf).
"""

from __future__ import annotations

import sys


def import_protobuf() -> None:
    """Import ``google.protobuf`` and its descriptors so that they do not import pkg_resources.

    protobuf 3.x's ``google/protobuf/__init__.py`` and, where its C++ implementation is the one in
    use, ``google/protobuf/pyext/__init__.py`` (RHEL 9's python3-protobuf 3.14, Debian bullseye's
    3.12: descriptor.py imports it) each declare their package a namespace with
    ``pkg_resources.declare_namespace`` when pkg_resources can be imported, and with
    ``pkgutil.extend_path`` when it cannot. Importing pkg_resources (setuptools: it scans every
    installed distribution) cost the plugin 50 ms at start and 4.2 MiB of resident memory for as
    long as it runs: 27.9 against 23.7 MiB in the NRI benchmark on Debian bullseye's Python 3.9
    (docs/DEVNOTES.md, 2026-12-06). While pkg_resources is not imported yet, its import is refused
    for that moment (a None entry in sys.modules raises ImportError), so protobuf takes its own
    fallback, which gives an installed protobuf the same package path; anything imported later gets
    pkg_resources as usual. protobuf 4 and later (4.21 on Debian 12,
    the newest from PyPI) never import it: nothing changes there.
    """
    if "google.protobuf" in sys.modules or "pkg_resources" in sys.modules:
        return
    sys.modules["pkg_resources"] = None  # type: ignore[assignment]
    try:
        import google.protobuf.descriptor  # noqa: F401
    finally:
        left = sys.modules.pop("pkg_resources", None)  # the None put there
        if left is not None:  # a module someone put there meanwhile: kept
            sys.modules["pkg_resources"] = left


import_protobuf()
