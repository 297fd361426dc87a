"""Metrics for node_exporter's textfile collector: the pure fold and format, then real runs on fake nodes.

Every metrics file is read back with prometheus_client's own text parser (what node_exporter
and Prometheus accept), never with a regex.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mixed_cpus_hook.core.model import Outcome
from mixed_cpus_hook.frontends.systemd import watches
from mixed_cpus_hook.node.config import Config
from mixed_cpus_hook.usecases import metrics


def parse(text: str) -> Dict[str, Any]:
    """{sample name: value} and {(sample name, reason): value} for the labelled counter."""
    out: Dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("mixed_cpus_hook_"), family.name
        assert family.documentation, family.name
        for sample in family.samples:
            key = (sample.name, sample.labels["reason"]) if sample.labels else sample.name
            out[key] = sample.value
    return out


def state_with(**containers: str) -> Dict[str, Any]:
    state = metrics.empty_state()
    state["containers"] = {cid: {"state": s, "pins_maybe_lost": False} for cid, s in containers.items()}
    return state


# -- the pure fold --------------------------------------------------------------------------------

FOLDS = [
    # (id, state before, results, reason, records, full, expected containers, reapplies, errors)
    ("applied-counts-a-reapply", state_with(), [("a", Outcome("applied", ("x",)))], "watch", ["a"], False,
     {"a": "in-sync"}, {"watch": 1}, 0),
    ("in-sync-counts-nothing", state_with(a="drifted"), [("a", Outcome("in-sync"))], "periodic check", ["a"], False,
     {"a": "in-sync"}, {}, 0),
    ("error-is-drifted", state_with(a="in-sync"), [("a", Outcome("error", ("boom",)))], "watch", ["a"], False,
     {"a": "drifted"}, {}, 1),
    ("broken-record-is-an-error", state_with(), [("a", Outcome("broken", ("bad",)))], "watch", ["a"], False,
     {"a": "drifted"}, {}, 1),
    ("gone-is-forgotten", state_with(a="in-sync", b="in-sync"), [("a", Outcome("gone"))], "periodic check", ["b"],
     True, {"b": "in-sync"}, {}, 0),
    ("released-record-drops-out", state_with(a="in-sync"), [], "watch", [], False, {}, {}, 0),
    ("sync-error-line", state_with(), [("-", Outcome("error", ("systemctl failed",)))], "periodic check", [], True,
     {}, {}, 1),
    ("reasons-add-up", dict(state_with(a="in-sync"), reapplies={"watch": 4}),
     [("a", Outcome("applied")), ("b", Outcome("applied"))], "watch", ["a", "b"], False,
     {"a": "in-sync", "b": "in-sync"}, {"watch": 6}, 0),
]


@pytest.mark.parametrize("case", FOLDS, ids=[c[0] for c in FOLDS])
def test_compute_state(case: tuple) -> None:
    _id, before, results, reason, records, full, containers, reapplies, errors = case
    after = metrics.compute_state(before, results, reason, records, {}, full, now=1000.5)
    assert {cid: c["state"] for cid, c in after["containers"].items()} == containers
    assert after["reapplies"] == reapplies and after["errors"] == errors
    assert after["last_full_reconcile"] == (1000.5 if full else before.get("last_full_reconcile"))
    assert before != after or not results  # the input is not modified in place


def test_format_parses_with_the_prometheus_parser() -> None:
    state = metrics.compute_state(state_with(b="drifted"), [("a", Outcome("applied"))], 'odd "reason"\\x', ["a", "b"],
                                  {"a": True}, True, now=1700000000.25)
    got = parse(metrics.format_metrics(state, tracked=2))
    assert got == {
        "mixed_cpus_hook_containers_tracked": 2, "mixed_cpus_hook_containers_in_sync": 1,
        "mixed_cpus_hook_containers_drifted": 1, "mixed_cpus_hook_pins_possibly_lost": 1,
        ("mixed_cpus_hook_reapplies_total", 'odd "reason"\\x'): 1, "mixed_cpus_hook_errors_total": 0,
        "mixed_cpus_hook_last_full_reconcile_timestamp_seconds": 1700000000.25,
    }


def test_no_full_reconcile_yet_has_no_timestamp() -> None:
    got = parse(metrics.format_metrics(metrics.empty_state(), tracked=0))
    assert "mixed_cpus_hook_last_full_reconcile_timestamp_seconds" not in got
    assert got["mixed_cpus_hook_containers_tracked"] == 0 and got["mixed_cpus_hook_errors_total"] == 0


# -- real runs on fake nodes ---------------------------------------------------------------------------

def drifted_node(fake_node: Callable, run_hook: Callable, tmp_path: Any) -> tuple:
    """A fake node with one applied container whose cpuset kubelet then shrank to the exclusive CPUs."""
    node = fake_node(version=1)
    prom = str(tmp_path / "textfile" / "mixed_cpus_hook.prom")
    os.makedirs(os.path.dirname(prom))
    node.configure(metrics_file=prom, allowed_namespaces=["ran"])
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    result = run_hook(["--config", node.config_path, "apply", "--state", paths["state"]])
    assert result.code == 0, result.err
    node.write(paths["rel"], "cpuset.cpus", "2-3")  # kubelet's rewrite
    return node, paths, prom


def read(path: str) -> Dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return parse(f.read())


def test_reconcile_command_writes_the_metrics(fake_node: Callable, run_hook: Callable, run_cli: Callable,
                                              tmp_path: Any) -> None:
    node, paths, prom = drifted_node(fake_node, run_hook, tmp_path)
    dry = run_cli(["--config", node.config_path, "reconcile", "--dry-run"])
    assert dry.code == 0 and not os.path.exists(prom), dry.err  # a dry run changes nothing, metrics included
    result = run_cli(["--config", node.config_path, "reconcile", "--why", "periodic check"])
    assert result.code == 0 and "2-3 -> 0-3" in result.out, result.err
    got = read(prom)
    assert got["mixed_cpus_hook_containers_tracked"] == 1 and got["mixed_cpus_hook_containers_in_sync"] == 1
    assert got[("mixed_cpus_hook_reapplies_total", "periodic check")] == 1
    assert got["mixed_cpus_hook_last_full_reconcile_timestamp_seconds"] > 0
    assert sorted(os.listdir(os.path.dirname(prom))) == ["mixed_cpus_hook.prom"]  # no temporary file left
    assert oct(os.stat(prom).st_mode & 0o777) == "0o644"

    # A watch-triggered reapply (the stdlib entry of mixed-cpus-hook-reconcile@.service) changes the file.
    node.write(paths["rel"], "cpuset.cpus", "2-3")
    before = open(prom).read()
    assert watches.main(["--config", node.config_path, "reconcile", "abc", "--settle", "0"],
                        environ={"MIXED_CPUS_HOOK_CACHE_DIR": str(tmp_path / "cache")}) == 0
    after = read(prom)
    assert open(prom).read() != before
    assert after[("mixed_cpus_hook_reapplies_total", "watch")] == 1
    assert after[("mixed_cpus_hook_reapplies_total", "periodic check")] == 1  # counters survive the process
    assert after["mixed_cpus_hook_last_full_reconcile_timestamp_seconds"] == got[
        "mixed_cpus_hook_last_full_reconcile_timestamp_seconds"]  # one container is not a full reconcile

    # The container goes: it is no longer tracked.
    assert run_hook(["--config", node.config_path, "release", "--state", paths["state"]]).code == 0
    assert run_cli(["--config", node.config_path, "reconcile"]).code == 0
    final = read(prom)
    assert final["mixed_cpus_hook_containers_tracked"] == 0 and final["mixed_cpus_hook_containers_in_sync"] == 0


def test_off_when_unset(fake_node: Callable, run_hook: Callable, run_cli: Callable) -> None:
    node = fake_node(version=2)
    node.configure(allowed_namespaces=["ran"])
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    assert run_hook(["--config", node.config_path, "apply", "--state", paths["state"]]).code == 0
    assert run_cli(["--config", node.config_path, "reconcile"]).code == 0
    assert not os.path.exists(os.path.join(node.state_dir, metrics.STATE_FILE))
    assert metrics.update_metrics(Config(state_dir=node.state_dir), [("abc", Outcome("applied"))], "x") is False


def test_unwritable_metrics_file_warns_and_never_fails(tmp_path: Any, reporter: Any) -> None:
    config = Config(state_dir=str(tmp_path / "state"), metrics_file=str(tmp_path / "missing-dir" / "m.prom"))
    assert metrics.update_metrics(config, [], "x", reporter=reporter.reporter) is False
    assert "metrics not written" in reporter.stream.getvalue()


def test_a_corrupt_state_file_starts_from_zero(tmp_path: Any) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / metrics.STATE_FILE).write_text("{not json")
    config = Config(state_dir=str(state_dir), metrics_file=str(tmp_path / "m.prom"))
    assert metrics.update_metrics(config, [("-", Outcome("error"))], "x", now=5.0) is True
    assert read(str(tmp_path / "m.prom"))["mixed_cpus_hook_errors_total"] == 1
