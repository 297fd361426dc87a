"""The zsh completion (completion/_mixed-cpus-hook) with the click of this environment.

click 8 (.venv) answers ``_MIXED_CPUS_HOOK_COMPLETE=zsh_source``, RHEL 9's click 7.1 (.venv-py39)
``source_zsh``; the file asks for both. The completion runs for real: an interactive ``zsh -f``
in a pseudo-terminal (zsh/zpty), compinit with the file on fpath, a <Tab> typed after a command
line, and the listing zsh prints read back.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPLETION = REPO / "completion" / "_mixed-cpus-hook"
EXE_DIR = os.path.dirname(sys.executable)
needs_zsh = pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (scripts/install-deps.sh)")

# Types LINE and a <Tab> in an interactive zsh whose fpath has the completion, prints what the
# terminal showed until the listing settles (at most about 10 s).
HARNESS = r"""
zmodload zsh/zpty
zpty z env -i PATH="$2" HOME="$4" TERM=dumb zsh -f -i
zpty -w z "PS1='%% '; fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -D; setopt autolist nobeep; LISTMAX=0"
zpty -w z "print READY"
zpty -r z line '*READY*'
zpty -r z line '*READY*'
zpty -w -n z "$3"$'\t'
out= idle=0
for i in {1..100}; do
    if zpty -r -t z chunk; then out+=$chunk; idle=0; else (( idle++ )); [[ -n $out && $idle -ge 10 ]] && break; fi
    sleep 0.1
done
print -r -- "$out"
zpty -d z
"""


def click_script(spelling: str) -> str:
    env = dict(os.environ, _MIXED_CPUS_HOOK_COMPLETE=spelling)
    return subprocess.run([os.path.join(EXE_DIR, "mixed-cpus-hook")], capture_output=True, text=True, env=env,
                          timeout=60).stdout


@pytest.fixture
def exe() -> str:
    path = os.path.join(EXE_DIR, "mixed-cpus-hook")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no mixed-cpus-hook console script next to {sys.executable} (pip install -e .)")
    return path


def test_click_gives_a_zsh_script_under_one_spelling(exe: str) -> None:
    """Exactly one of the two spellings the file tries gives click's script (which one: the click version)."""
    answers = {s: "compdef _mixed_cpus_hook_completion" in click_script(s) for s in ("zsh_source", "source_zsh")}
    major = int(importlib.metadata.version("click").split(".")[0])
    assert answers == {"zsh_source": major >= 8, "source_zsh": major < 8}, answers


def tab(tmp_path: Path, line: str) -> List[str]:
    harness = tmp_path / "harness.zsh"
    harness.write_text(HARNESS)
    proc = subprocess.run(["zsh", "-f", str(harness), str(COMPLETION.parent), f"{EXE_DIR}:/usr/bin:/bin", line,
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [w for w in proc.stdout.replace("\r", "\n").split() if w.startswith(("-", "r", "m", "s", "c"))]


@needs_zsh
def test_zsh_completes_commands(exe: str, tmp_path: Path) -> None:
    words = tab(tmp_path, "mixed-cpus-hook re")
    assert "reconcile" in words and "release" in words, words


@needs_zsh
def test_zsh_completes_options(exe: str, tmp_path: Path) -> None:
    words = tab(tmp_path, "mixed-cpus-hook reconcile --s")
    assert "--settle" in words and "--sync-watches" in words, words


@needs_zsh
def test_file_is_valid_zsh() -> None:
    proc = subprocess.run(["zsh", "-n", str(COMPLETION)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert COMPLETION.read_text().startswith("#compdef mixed-cpus-hook\n")
