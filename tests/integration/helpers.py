"""Small helpers shared by the integration tests (plain functions, no fixtures)."""

from __future__ import annotations

import os
import shutil
import sys


def read_file(path: str) -> str:
    """A cgroupfs (or any small text) file, stripped."""
    with open(path, encoding="ascii") as f:
        return f.read().strip()


def write_file(path: str, text: str) -> None:
    """One write(2), as kubelet's runtime or a person with echo would."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def hook_executable() -> str:
    """The console script of the environment running the tests (the venv's, in development)."""
    candidate = os.path.join(os.path.dirname(sys.executable), "mixed-cpus-hook")
    if os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("mixed-cpus-hook")
    if not found:
        raise RuntimeError("the mixed-cpus-hook console script is not installed next to "
                           f"{sys.executable} nor on PATH (pip install -e .)")
    return found
