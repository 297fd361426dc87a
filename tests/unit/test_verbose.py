"""`-v` says why a container was skipped; without it a container that does not ask logs nothing."""

from __future__ import annotations

from typing import Any, Callable, Dict

import pytest

PREFIX = "mixed-cpus.openshift.io"


def _no_annotation(a: Dict[str, str]) -> None:
    del a[f"{PREFIX}/app"]


def _other_container(a: Dict[str, str]) -> None:
    del a[f"{PREFIX}/app"]
    a[f"{PREFIX}/sidecar"] = "enable"


def _other_prefix(a: Dict[str, str]) -> None:
    del a[f"{PREFIX}/app"]
    a["other.example/app"] = "enable"


def _no_name(a: Dict[str, str]) -> None:
    del a["io.kubernetes.container.name"]


SKIPPED = [
    pytest.param(_no_annotation, "container abc: skipped: no annotation <prefix>/app for it", id="no-annotation"),
    pytest.param(_other_container, "container abc: skipped: no annotation <prefix>/app for it",
                 id="another-container-asks"),
    pytest.param(_other_prefix, f"container abc: skipped: no annotation {PREFIX}/app for it",
                 id="another-prefix-passes-the-precheck"),
    pytest.param(_no_name, "container abc: skipped: no io.kubernetes.container.name annotation", id="not-kubernetes"),
]


@pytest.mark.parametrize("edit,line", SKIPPED)
def test_verbose_says_why_skipped(fake_node: Callable, run_hook: Callable, edit: Callable, line: str) -> None:
    import json

    node = fake_node()
    paths = node.add_container("abc")
    state = node.load_json(paths["state"])
    edit(state["annotations"])
    with open(paths["state"], "w", encoding="utf-8") as f:
        json.dump(state, f)
    quiet = run_hook(["--config", node.config_path, "apply", "--state", paths["state"]])
    assert (quiet.code, quiet.out, quiet.err, quiet.syslog) == (0, "", "", [])
    loud = run_hook(["--config", node.config_path, "-v", "apply", "--state", paths["state"]], verbose=True)
    assert loud.code == 0
    assert len(loud.err_lines) == 1 and loud.err_lines[0].startswith(f"mixed-cpus-hook: {line}"), loud.err


def test_refused_namespace_is_one_error_naming_the_setting(fake_node: Callable, run_hook: Callable) -> None:
    node = fake_node()
    node.configure(allowed_namespaces=["du-*"])
    paths = node.add_container("abc")
    res = run_hook(["--config", node.config_path, "-v", "apply", "--state", paths["state"]], verbose=True)
    assert res.code == 1
    assert res.err_lines == [f"mixed-cpus-hook: error: container abc: refused: pod ran/du-0: namespace 'ran' may not "
                             f"ask for mixed CPUs: setting 'allowed_namespaces' in {node.config_path} lists only "
                             "du-*; an admin must list it there"]


def test_not_guaranteed_is_one_warning(fake_node: Callable, run_hook: Callable) -> None:
    node = fake_node()
    paths = node.add_container("abc", cpus="0-3")  # kubelet's shared pool: not exclusive CPUs
    res: Any = run_hook(["--config", node.config_path, "-v", "apply", "--state", paths["state"]], verbose=True)
    assert res.code == 0
    warnings = [line for line in res.err_lines if ": warning: " in line]
    assert len(warnings) == 1, res.err
    assert len(set(res.err_lines)) == len(res.err_lines)  # each thing said once
