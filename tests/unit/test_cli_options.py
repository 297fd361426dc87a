"""The command line as a user types it: global options in either place, and --help that tells the exit codes."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, List

import pytest

# Each subcommand takes the global options after its name too ("status --config c.yaml").
AFTER_THE_COMMAND = [
    pytest.param(["status", "--json", "--config", "{cfg}"], 0, id="status"),
    pytest.param(["reconcile", "--config={cfg}", "--dry-run"], 0, id="reconcile"),
    pytest.param(["watches", "sync", "--config", "{cfg}"], 0, id="watches-sync"),
    pytest.param(["-v", "status", "--config", "{cfg}", "-v"], 0, id="verbose-twice"),
]


@pytest.mark.parametrize("argv,code", AFTER_THE_COMMAND)
def test_global_options_after_the_command(node: Any, run_cli: Callable, argv: List[str], code: int) -> None:
    res = run_cli([a.replace("{cfg}", node.config_path) for a in argv])
    assert res.code == code, res.err
    assert "Did you mean" not in res.err and "no such option" not in res.err
    if "--json" in argv:
        assert json.loads(res.out) == {"rows": [], "problems": []}


def test_the_command_s_config_wins(node: Any, run_cli: Callable, tmp_path: Any) -> None:
    res = run_cli(["--config", str(tmp_path / "missing.yaml"), "status", "--config", node.config_path])
    assert res.code == 0, res.err


def test_apply_takes_config_after_the_command(node: Any, run_cli: Callable) -> None:
    paths = node.add_container("c1", quota=200000, pod_quota=200000)
    res = run_cli(["apply", "--config", node.config_path, "--state", paths["state"]])
    assert res.code == 0, res.err
    assert node.read(paths["rel"], "cpuset.cpus") == "0-3"


HELP = [
    pytest.param([], ["0 ", "1 ", "2 ", "3 ", "drift"], id="top-level-lists-every-exit-code"),
    pytest.param(["status"], ["3  drift", '{"rows"', '"problems"'], id="status"),
    pytest.param(["reconcile"], ["1  some container could not be fixed"], id="reconcile"),
    pytest.param(["check"], ["--containerd-config", "--nri-socket", "--no-probe", "scratch cgroup",
                             "thread-affinity"], id="check"),
]


@pytest.mark.parametrize("argv,needles", HELP)
def test_help_says(run_cli: Callable, argv: List[str], needles: List[str]) -> None:
    res = run_cli(argv + ["--help"])
    assert res.code == 0, res.err
    text = " ".join(res.out.split())
    missing = [n for n in needles if " ".join(n.split()) not in text]
    assert not missing, res.out


# `nri` on a python3 that cannot import protobuf (a node with the hook-mode RPM only): one line
# naming what to install, exit 1, no traceback. A fresh interpreter with a finder that refuses it.
NO_PROTOBUF = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == {blocked!r} or name.startswith({blocked!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Refuse())
sys.path.insert(0, {source!r})
from mixed_cpus_hook.frontends.entry import entry
sys.argv = ["mixed-cpus-hook", "--config", {config!r}, "nri", "--socket", {socket!r}]
entry()
"""


@pytest.mark.parametrize("blocked", [
    pytest.param("google", id="no-google-namespace-at-all"),
    pytest.param("google.protobuf", id="no-protobuf"),
])
def test_nri_without_protobuf_says_what_to_install(node: Any, tmp_path: Any, blocked: str) -> None:
    import os
    import subprocess
    import sys

    source = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "hook")
    code = NO_PROTOBUF.format(blocked=blocked, source=source, config=node.config_path,
                              socket=str(tmp_path / "nri.sock"))
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    # A protobuf 3 installed by pip makes the google namespace at start-up (its -nspkg.pth): then the
    # refusal is of google.protobuf whatever was blocked.
    assert re.fullmatch(r"mixed-cpus-hook: error: missing dependency: nri: NRI mode needs protobuf, which this "
                        r"python3 cannot import \(No module named '(google|google\.protobuf)'\): install python3-protobuf "
                        r"\(the mixed-cpus-hook-nri-mode RPM requires it\) or protobuf from PyPI", line), line
    assert not os.path.exists(tmp_path / "nri.sock")
