"""mixed-cpus-hook(8): the committed page is what the generator makes from the CLI, and man renders it cleanly;
the bash completion works with the click of this environment (click 8 in .venv, RHEL 9's 7.1 in .venv-py39)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from mixed_cpus_hook.frontends.cli import manpage
from mixed_cpus_hook.frontends.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "mixed-cpus-hook.8"
COMPLETION = REPO / "completion" / "mixed-cpus-hook.bash"
CLICK_MAJOR = int(importlib.metadata.version("click").split(".")[0])


def generated() -> str:
    return manpage.compute_manpage(json.loads((REPO / "schemas" / "config.schema.json").read_text()))


@pytest.mark.skipif(CLICK_MAJOR < 8, reason="the committed page is made with the newest click (click 7.1 does not "
                                            "print option ranges in --help)")
def test_committed_page_is_up_to_date() -> None:
    assert PAGE.read_text() == generated(), "docs/mixed-cpus-hook.8 is out of date: run `make man` and commit it"


def test_page_covers_every_command_and_option() -> None:
    text = generated()
    ctx = click.Context(cli, info_name="mixed-cpus-hook")
    for path, cmd, sub in manpage._commands(cli, ctx):
        assert f".SS {manpage.escape(' '.join(path))}\n" in text, path
        for param in cmd.get_params(sub):
            if isinstance(param, click.Option) and "--help" not in param.opts:
                assert manpage.escape(param.opts[0]) in text, (path, param.opts)
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "CONFIGURATION", "FILES", "EXIT STATUS",
                    "EXAMPLES", "SEE ALSO"):
        assert f"\n.SH {section}\n" in text, section
    for key in json.loads((REPO / "schemas" / "config.schema.json").read_text())["properties"]:
        assert f"\\fB{manpage.escape(key)}\\fR" in text, key


@pytest.mark.parametrize("text,escaped", [
    ("--config", "\\-\\-config"), ("a\\b", "a\\eb"), (".starts with a dot", "\\&.starts with a dot"),
    ("'quote first", "\\&'quote first"), ("plain", "plain"),
])
def test_escape(text: str, escaped: str) -> None:
    assert manpage.escape(text) == escaped


@pytest.mark.skipif(shutil.which("man") is None, reason="man (Debian package man-db) is not installed")
def test_man_renders_without_warnings() -> None:
    proc = subprocess.run(["man", "--warnings", "-l", str(PAGE)], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="", PAGER="cat"))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "MIXED-CPUS-HOOK(8)" in proc.stdout and "EXIT STATUS" in proc.stdout


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_groff_finds_nothing_to_warn_about() -> None:
    proc = subprocess.run(["groff", "-ww", "-z", "-man", str(PAGE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_main_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "page.8"
    assert manpage.main(["--schema", str(REPO / "schemas" / "config.schema.json"), "-o", str(out)]) == 0
    assert out.read_text() == generated()


# -- bash completion ------------------------------------------------------------------------------------

def complete(words: list) -> list:
    """COMPREPLY for the command line ``words`` (the last one being completed), in a clean bash."""
    exe_dir = os.path.dirname(sys.executable)
    if not os.access(os.path.join(exe_dir, "mixed-cpus-hook"), os.X_OK):
        pytest.skip(f"no mixed-cpus-hook console script next to {sys.executable} (pip install -e .)")
    script = (f"source {COMPLETION}\n"
              'fn=$(complete -p mixed-cpus-hook | sed "s/.*-F \\([^ ]*\\).*/\\1/")\n'
              f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
              f'COMP_LINE="{" ".join(words)}"; COMP_POINT=${{#COMP_LINE}}\n'
              f'"$fn" mixed-cpus-hook "{words[-1]}" "{words[-2]}"\n'
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    env = {"PATH": f"{exe_dir}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return sorted(line.split(",")[-1] for line in proc.stdout.split())


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_commands() -> None:
    assert complete(["mixed-cpus-hook", "re"]) == ["reconcile", "release"]
    assert "machineconfig" in complete(["mixed-cpus-hook", "m"])


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_options() -> None:
    assert "--sync-watches" in complete(["mixed-cpus-hook", "reconcile", "--s"])
