"""``mixed-cpus-hook nri`` started without click (frontends/nri_entry.py): the command lines it
reads itself, each read as click reads it, and the ones it leaves to click."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Dict, List, Optional

import pytest

from mixed_cpus_hook.frontends import nri_entry
from mixed_cpus_hook.frontends.nri_entry import NriArgs, parse_nri_args

# (id, argv, environment, what parse_nri_args gives: an NriArgs or None for click's to read)
PARSED = [
    ("bare", ["nri"], {}, NriArgs()),
    ("socket", ["nri", "--socket", "/run/nri.sock"], {}, NriArgs(socket_path="/run/nri.sock")),
    ("socket-equals", ["nri", "--socket=/run/nri.sock"], {}, NriArgs(socket_path="/run/nri.sock")),
    ("global-config-and-verbose", ["--config", "/etc/c.yaml", "-v", "nri"], {},
     NriArgs(config="/etc/c.yaml", verbose=True)),
    ("config-after-the-command-wins", ["--config=/a.yaml", "nri", "--config", "/b.yaml"], {},
     NriArgs(config="/b.yaml")),
    ("verbose-after-the-command", ["nri", "--verbose"], {}, NriArgs(verbose=True)),
    ("every-option", ["nri", "--socket", "s", "--name", "mixed", "--index", "33", "--reconcile-interval", "2.5",
                      "--write-timeout=0.1", "--metrics-address", ":9470"], {},
     NriArgs(socket_path="s", plugin_name="mixed", plugin_index="33", reconcile_interval=2.5, write_timeout=0.1,
             metrics_address=":9470")),
    ("interval-zero-and-max", ["nri", "--reconcile-interval", "0", "--write-timeout", "3600"], {},
     NriArgs(reconcile_interval=0.0, write_timeout=3600.0)),
    ("interval-fraction-only", ["nri", "--reconcile-interval", ".5"], {}, NriArgs(reconcile_interval=0.5)),
    ("started-by-the-runtime", [], {"NRI_PLUGIN_SOCKET": "3"}, NriArgs()),
    # click's to read: it takes or refuses them itself
    ("no-arguments-no-runtime", [], {}, None),
    ("help", ["nri", "--help"], {}, None),
    ("version", ["--version"], {}, None),
    ("another-command", ["status"], {}, None),
    ("option-before-the-command", ["--socket", "s", "nri"], {}, None),
    ("socket-twice", ["nri", "--socket", "a", "--socket", "b"], {}, None),
    ("value-missing", ["nri", "--socket"], {}, None),
    ("value-empty", ["nri", "--socket="], {}, None),
    ("value-looks-like-an-option", ["nri", "--name", "-x"], {}, None),
    ("interval-exponent", ["nri", "--reconcile-interval", "1e1"], {}, None),
    ("interval-negative", ["nri", "--reconcile-interval=-1"], {}, None),
    ("interval-too-long", ["nri", "--reconcile-interval", "86401"], {}, None),
    ("write-timeout-too-short", ["nri", "--write-timeout", "0.05"], {}, None),
    ("interval-not-a-number", ["nri", "--reconcile-interval", "soon"], {}, None),
    ("interval-other-digits", ["nri", "--reconcile-interval", "\u0661"], {}, None),
    ("a-word-after", ["nri", "extra"], {}, None),
    ("nri-twice", ["nri", "nri"], {}, None),
    ("unknown-option", ["nri", "--sokcet", "s"], {}, None),
]


@pytest.mark.parametrize("argv,env,expected", [c[1:] for c in PARSED], ids=[c[0] for c in PARSED])
def test_parse_nri_args(argv: List[str], env: Dict[str, str], expected: Optional[NriArgs]) -> None:
    assert parse_nri_args(argv, env) == expected


def _click_reads(argv: List[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """What click's ``nri`` command hands run_nri for ``argv`` (run_nri replaced), or its exit code."""
    from mixed_cpus_hook.frontends.cli.main import main as cli_main

    got: List[NriArgs] = []
    monkeypatch.setattr(nri_entry, "run_nri", lambda args, reporter, environ=None: got.append(args) or 0)
    code = cli_main(argv)
    return got[0] if got else code


@pytest.mark.parametrize("argv,env,expected", [c[1:] for c in PARSED if c[3] is not None and c[1]],
                         ids=[c[0] for c in PARSED if c[3] is not None and c[1]])
def test_each_command_line_read_here_is_what_click_reads(argv: List[str], env: Dict[str, str],
                                                         expected: NriArgs, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _click_reads(argv, monkeypatch) == expected


# What is left to click gets click's answer: its value, or its usage error (exit 2).
LEFT_TO_CLICK = [
    ("exponent-taken", ["nri", "--reconcile-interval", "1e1"], NriArgs(reconcile_interval=10.0)),
    ("the-last-of-two", ["nri", "--socket", "a", "--socket", "b"], NriArgs(socket_path="b")),
    ("negative-refused", ["nri", "--reconcile-interval=-1"], 2),
    ("out-of-range-refused", ["nri", "--write-timeout", "0.05"], 2),
    ("unknown-option-refused", ["nri", "--sokcet", "s"], 2),
]


@pytest.mark.parametrize("argv,expected", [c[1:] for c in LEFT_TO_CLICK], ids=[c[0] for c in LEFT_TO_CLICK])
def test_what_is_left_to_click_gets_clicks_answer(argv: List[str], expected: Any,
                                                  monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    assert parse_nri_args(argv, {}) is None
    assert _click_reads(argv, monkeypatch) == expected


def test_the_entry_starts_the_plugin_without_click(monkeypatch: pytest.MonkeyPatch) -> None:
    from mixed_cpus_hook.frontends import entry

    got: List[Any] = []
    monkeypatch.setattr(nri_entry, "run_nri", lambda args, reporter, environ=None: got.append((args, reporter)) or 7)
    assert entry.main(["-v", "nri", "--socket", "s"]) == 7
    ((args, reporter),) = got
    assert args == NriArgs(verbose=True, socket_path="s") and reporter.verbose
    assert entry.main(["nri", "--help"]) == 0 and len(got) == 1  # click's help


# A real start through the executable's entry, in a fresh interpreter: what is imported once the
# plugin runs (it waits for a runtime that is not there).
RESIDENT = """
import os, sys, threading, time
sys.path.insert(0, {source!r})
def look():
    deadline = time.monotonic() + 30
    while "mixed_cpus_hook.frontends.nri.plugin" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the plugin running: what it imports as it starts is in
    print(" ".join(m for m in ("click", "mixed_cpus_hook.frontends.nri.plugin") if m in sys.modules), flush=True)
    os._exit(0)
threading.Thread(target=look, daemon=True).start()
from mixed_cpus_hook.frontends.entry import entry
sys.argv = ["mixed-cpus-hook", "--config", {config!r}, "nri", "--socket", {socket!r}]
entry()
"""


@pytest.mark.parametrize("node", [1], indirect=True)
def test_the_resident_plugin_has_no_click(node: Any, tmp_path: Any, config_cache_dir: str) -> None:
    source = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "hook")
    code = RESIDENT.format(source=source, config=node.config_path, socket=str(tmp_path / "nri.sock"))
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=config_cache_dir))
    assert done.stdout.split() == ["mixed_cpus_hook.frontends.nri.plugin"], done.stdout + done.stderr
