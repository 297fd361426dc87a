"""The executables that are written by hand (not pip's console-script wrapper) start the same entry
as setup.cfg's console script: the image's /opt/mixed-cpus-hook/bin/mixed-cpus-hook (Containerfile)
and `make install`'s BINDIR/mixed-cpus-hook (Makefile). A module path there is only text: when the
code moves, nothing but this test (and the image's test on containerd) notices.
"""

from __future__ import annotations

import configparser
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMPORT = re.compile(r"'from ([\w.]+) import (\w+)' '(\w+)\(\)'")


def console_script() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = [x.strip() for x in cfg["options.entry_points"]["console_scripts"].splitlines() if x.strip()]
    (line,) = [x for x in lines if x.startswith("mixed-cpus-hook ")]
    return line.split("=", 1)[1].strip()


@pytest.mark.parametrize("source", ["Containerfile", "Makefile"])
def test_hand_written_executable_calls_the_console_scripts_entry(source: str) -> None:
    found = IMPORT.findall((REPO / source).read_text(encoding="utf-8"))
    assert len(found) == 1, found
    module, name, called = found[0]
    assert called == name
    assert f"{module}:{name}" == console_script()
    assert callable(getattr(importlib.import_module(module), name))
