"""`status` and `--container`: id prefixes, one line per container at 100 columns, problems, exit codes."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List

import pytest

from mixed_cpus_hook.core.errors import UnknownContainerError
from mixed_cpus_hook.frontends.cli.main import (EXIT_DRIFT,
                                                compute_match_id,
                                                compute_row_state,
                                                compute_status_exit,
                                                format_status_table)

IDS = ["3f2a9c1e7b6d5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a09",
       "3f2a9c1e7b6d00000000000000000000000000000000000000000000000000aa", "abc", "abcdef"]

MATCHES = [
    pytest.param("3f2a9c1e7b6d5", IDS[0], id="status-short-id-plus-one"),
    pytest.param(IDS[1], IDS[1], id="whole-id"),
    pytest.param("abc", "abc", id="an-id-that-is-also-a-prefix-wins"),
    pytest.param("abcd", "abcdef", id="unique-prefix"),
]


@pytest.mark.parametrize("prefix,expected", MATCHES)
def test_compute_match_id(prefix: str, expected: str) -> None:
    assert compute_match_id(prefix, IDS) == expected


NO_MATCH = [
    pytest.param("3f2a9c1e7b6d", "'3f2a9c1e7b6d' is ambiguous: 2 tracked containers start with it "
                 "(3f2a9c1e7b6d0000, 3f2a9c1e7b6d5a4f); give more of the id", id="ambiguous-13-chars"),
    pytest.param("zzz", "no tracked container has an id starting with 'zzz'", id="unknown"),
    pytest.param("", "no tracked container has an id starting with ''", id="empty"),
]


@pytest.mark.parametrize("prefix,message", NO_MATCH)
def test_compute_match_id_refuses(prefix: str, message: str) -> None:
    with pytest.raises(UnknownContainerError) as info:
        compute_match_id(prefix, IDS)
    assert str(info.value) == f"--container: {message}"
    assert info.value.exit_code == 1


def row(**changes: Any) -> Dict[str, Any]:
    base: Dict[str, Any] = {
        "id": IDS[0], "mode": "hook", "namespace": "ran-production-east", "pod": "du-high-phy-0123456789",
        "container": "l1-app-with-a-long-name", "cgroup": "/sys/fs/cgroup/cpuset/kubepods.slice/" + "x" * 90,
        "exclusive": "4-7,36-39", "exclusive_source": "kubelet-checkpoint", "shared": "0-1", "desired": "0-1,4-7",
        "actual": "0-1,4-7", "quota": {"desired": "1000000", "actual": "1000000"},
        "pod_quota": {"desired": "max", "actual": "max"}, "in_sync": True, "broken": False, "problem": "",
        "drift": [], "last_reapply": "2026-12-02T18:34:11Z", "pins_maybe_lost": False}
    base.update(changes)
    return base


STATES = [
    pytest.param(row(), "ok", id="in-sync"),
    pytest.param(row(in_sync=False, drift=[{"field": "cpuset", "desired": "0-3", "actual": "2-3"}],
                     problem="cpuset is 2-3, should be 0-3"), "drift", id="drift"),
    pytest.param(row(in_sync=False, problem="cgroup gone (reconcile will forget it)"), "drift", id="cgroup-gone"),
    pytest.param(row(in_sync=False, broken=True, problem="record is broken"), "error", id="broken"),
    pytest.param(row(in_sync=False, problem="cannot read: Permission denied"), "error", id="unreadable-cgroup"),
    pytest.param({"id": "x"}, "error", id="a-row-with-nothing-in-it"),
]


@pytest.mark.parametrize("r,state", STATES)
def test_row_state(r: Dict[str, Any], state: str) -> None:
    assert compute_row_state(r) == state


@pytest.mark.parametrize("rows,problems,code", [
    pytest.param([row(), row(id="b")], [], 0, id="all-in-sync"),
    pytest.param([], [], 0, id="nothing-tracked"),
    pytest.param([row(), row(in_sync=False, drift=[{"field": "quota"}])], [], EXIT_DRIFT, id="drift-is-3"),
    pytest.param([row(in_sync=False, drift=[{"field": "quota"}]), row(broken=True, in_sync=False)], [], 1,
                 id="error-beats-drift"),
    pytest.param([row()], ["kubelet checkpoint refused"], 1, id="node-problem-is-an-error"),
])
def test_exit_codes(rows: List[Dict[str, Any]], problems: List[str], code: int) -> None:
    assert compute_status_exit(rows, problems) == code


def test_table_is_one_line_per_container_within_100_columns() -> None:
    rows = [row(), row(id=IDS[1], in_sync=False, actual="4-7", quota={"desired": "1000000", "actual": "800000"},
                       drift=[{"field": "cpuset", "desired": "0-1,4-7", "actual": "4-7"}],
                       problem="cpuset is 4-7, should be 0-1,4-7", pins_maybe_lost=True),
            row(id="c0ffee", mode=None, namespace=None, exclusive=None, actual=None, quota=None, pod_quota={},
                in_sync=False, broken=True, problem="record c0ffee: not JSON", last_reapply=None)]
    text = format_status_table(rows, ["kubelet checkpoint refused: checksum"])
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, text
    assert "None" not in text
    table = lines[:4]
    assert table[0].split()[:3] == ["ID", "NAMESPACE/POD/CONTAINER", "MODE"]
    assert [line.split()[0] for line in table[1:]] == ["3f2a9c1e7b6d", "3f2a9c1e7b6d", "c0ffee"]
    assert [line.split()[-1] for line in table[1:]] == ["ok", "DRIFT", "ERROR"]
    assert "800000!" in table[2]
    assert lines[4] == "shared CPUs: 0-1"
    assert lines[5] == "problems:"
    assert lines[6].startswith("  3f2a9c1e7b6d: cpuset is 4-7, should be 0-1,4-7; thread pins may have been lost")
    assert lines[7].startswith("      ") and "18:34 on a kernel that widens them" in lines[7]  # wrapped, indented
    assert lines[8] == "  c0ffee: record c0ffee: not JSON"
    assert lines[9:] == ["node problems:", "  kubelet checkpoint refused: checksum"]


def test_drift_without_a_problem_text_names_fields() -> None:
    text = format_status_table([row(in_sync=False, drift=[{"field": "pod_quota", "desired": "400000",
                                                           "actual": "200000"}])])
    assert "  3f2a9c1e7b6d: pod_quota is 200000, should be 400000" in text.splitlines()


def test_wide_has_every_column_whole() -> None:
    r = row()
    text = format_status_table([r], wide=True)
    head, line = text.splitlines()[:2]
    assert head.split()[:3] == ["ID", "MODE", "NAMESPACE"]
    for value in (r["id"], r["cgroup"], r["pod"], r["container"], "kubelet-checkpoint", "1000000/1000000",
                  "2026-12-02T18:34:11Z"):
        assert value in line


# -- through the command line on a fake node --------------------------------------------------------

def _apply(run_hook: Callable, node: Any, cid: str, **kw: Any) -> Dict[str, str]:
    paths = node.add_container(cid, quota=200000, pod_quota=200000, **kw)
    result = run_hook(["--config", node.config_path, "apply", "--state", paths["state"]])
    assert result.code == 0, result.err
    return paths


def test_status_and_reconcile_take_a_prefix(node: Any, run_hook: Callable, run_cli: Callable) -> None:
    a = _apply(run_hook, node, "aaaa1111bbbb2222")
    _apply(run_hook, node, "aaaa1111cccc3333", name="b")
    cfg = ["--config", node.config_path]
    res = run_cli(cfg + ["status"])
    assert res.code == 0, res.out + res.err
    assert len(res.out.splitlines()) == 1 + 2 + 1  # head, two containers, shared CPUs
    node.write(a["rel"], "cpuset.cpus", "2-3")  # kubelet's rewrite
    res = run_cli(cfg + ["status", "--container", "aaaa1111b", "--json"])
    assert res.code == EXIT_DRIFT
    assert [r["id"] for r in json.loads(res.out)["rows"]] == ["aaaa1111bbbb2222"]
    for argv in (["status", "--container", "aaaa1111"], ["reconcile", "--container", "aaaa1111"]):
        res = run_cli(cfg + argv)
        assert res.code == 1
        assert res.err.strip() == ("mixed-cpus-hook: error: unknown container: --container: 'aaaa1111' is ambiguous: "
                                   "2 tracked containers start with it (aaaa1111bbbb2222, aaaa1111cccc3333); give "
                                   "more of the id")
    for argv in (["status", "--container", "nope"], ["reconcile", "--container", "nope"]):
        res = run_cli(cfg + argv)
        assert (res.code, res.out) == (1, "")
        assert "no tracked container has an id starting with 'nope'" in res.err
    res = run_cli(cfg + ["reconcile", "--container", "aaaa1111b"])
    assert res.code == 0, res.err
    assert res.out.startswith("container aaaa1111bbbb2222: ") and "2-3 -> 0-3" in res.out
    assert run_cli(cfg + ["status"]).code == 0


def test_status_lists_every_container_when_one_record_is_broken(node: Any, run_hook: Callable,
                                                                 run_cli: Callable) -> None:
    _apply(run_hook, node, "good")
    _apply(run_hook, node, "bad", name="b")
    with open(os.path.join(node.state_dir, "containers", "bad.json"), "w", encoding="utf-8") as f:
        f.write("{")
    res = run_cli(["--config", node.config_path, "status"])
    assert res.code == 1
    lines = res.out.splitlines()
    assert {line.split()[0] for line in lines[1:3]} == {"good", "bad"}
    assert "None" not in res.out
    assert any(line.startswith("  bad:") for line in lines)


def test_help_documents_the_exit_codes(run_cli: Callable) -> None:
    res = run_cli(["status", "--help"])
    assert res.code == 0
    assert "0  every container is in sync" in res.out and "3  drift" in res.out and "1  error" in res.out


def test_status_json_is_an_object_with_rows_and_problems(node: Any, run_hook: Callable, run_cli: Callable) -> None:
    """A node-wide problem (no shared-CPU file) is in the JSON, on stderr too, and exits 1."""
    cfg = ["--config", node.config_path]
    res = run_cli(cfg + ["status", "--json"])
    assert (res.code, json.loads(res.out), res.err) == (0, {"rows": [], "problems": []}, "")
    _apply(run_hook, node, "aaaa1111bbbb2222")
    os.unlink(node.shared_file)
    res = run_cli(cfg + ["status", "--json"])
    assert res.code == 1
    doc = json.loads(res.out)
    assert sorted(doc) == ["problems", "rows"] and [r["id"] for r in doc["rows"]] == ["aaaa1111bbbb2222"]
    assert len(doc["problems"]) == 1 and node.shared_file in doc["problems"][0], doc
    assert f"mixed-cpus-hook: error: {doc['problems'][0]}" in res.err_lines, res.err
