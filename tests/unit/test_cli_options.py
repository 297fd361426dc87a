"""The command line as a user types it: global options in either place, and --help that tells the exit codes."""

from __future__ import annotations

import json
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
