"""A creation keeps its pod's quota descriptors (cgroupfs.open_pod_quota) only for a pod it placed.

On this machine's real cgroup v1 (the descriptors are kept only on a cgroup file system): a pod
cgroup under /sys/fs/cgroup/{cpuset,cpu} (benchmarks/nri_request_cost.py's Pod), removed after; the
engine as the plugin builds it.
"""

from __future__ import annotations

import io
import os
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import pytest

from mixed_cpus_hook.core.cgroup import Quota
from mixed_cpus_hook.core.cpuset import parse_cpulist
from mixed_cpus_hook.core.errors import HookError, PolicyError
from mixed_cpus_hook.node import cgroupfs as cg
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.node.log import Reporter
from mixed_cpus_hook.usecases.nri import ContainerFacts, NriEngine

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))), "benchmarks"))
import nri_request_cost as bench  # noqa: E402 - its Pod: a real pod cgroup, removed by .remove()

CG = bench.CG
PREFIX = bench.PREFIX


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[Tuple[NriEngine, str, str]]:
    """(engine, the pod's cgroup path relative to the hierarchies, its uid): a kubelet-like pod
    cgroup with a quota, as the NRI benchmarks make it."""
    layout = cg.read_layout(CG, mounts=cg.read_mounts())
    if os.geteuid() != 0 or layout.version != 1 or not {layout.cpu_root, layout.cpuset_root} <= set(layout.lexical):
        pytest.skip("needs root and cgroup v1 cpuset and cpu mounted as cgroup file systems")
    made = bench.Pod()
    rel = f"/{made.top}/pod{made.uid}"
    try:
        config = tmp_path / "config.yaml"
        config.write_text(f'shared_cpus: "0"\nstate_dir: {tmp_path}/state\ncgroup_root: {CG}\n'
                          f'failure_policy: fail\nallowed_namespaces: ["perf"]\n'
                          f'kubelet_state_file: {tmp_path}/none/cpu_manager_state\n', encoding="utf-8")
        engine = NriEngine(load_config(str(config), cache_dir=str(tmp_path / "cache")),
                           Reporter(stream=io.StringIO(), sink=None))
        yield engine, rel, made.uid
    finally:
        for d in made.made:
            cg.forget_kept(d)
        made.remove()


def facts(rel: str, uid: str, cpus: str, quota: Optional[int]) -> ContainerFacts:
    cid = uuid.uuid4().hex * 2
    ann: Dict[str, str] = {f"{PREFIX}/app": "enable", "io.kubernetes.pod.namespace": "perf",
                           "io.kubernetes.pod.name": "perf", "io.kubernetes.pod.uid": uid,
                           "io.kubernetes.container.name": "app"}
    return ContainerFacts(cid, ann, parse_cpulist(cpus) if cpus else frozenset(),
                          Quota(quota, 100000) if quota else None, f"{rel}/{cid}", rel, period=100000)


def kept(rel: str) -> bool:
    return f"{CG}/cpu{rel}/cpu.cfs_quota_us" in cg._KEPT


def test_a_placed_pod_keeps_its_quota_descriptors(pod: Tuple[NriEngine, str, str]) -> None:
    engine, rel, uid = pod
    answer = engine.create(facts(rel, uid, "1", 100000))
    assert answer.outcome.status == "applied" and kept(rel)


def test_a_pod_placed_nothing_keeps_none(pod: Tuple[NriEngine, str, str]) -> None:
    engine, rel, uid = pod
    answer = engine.create(facts(rel, uid, "", None))  # asks, but has no exclusive CPUs: not mixed
    assert answer.outcome.status != "applied" and not kept(rel)


def test_a_refused_creation_keeps_none(pod: Tuple[NriEngine, str, str], monkeypatch: Any) -> None:
    engine, rel, uid = pod

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise PolicyError("refused here", "test")

    monkeypatch.setattr(engine, "_place", refuse)
    with pytest.raises(HookError, match="refused here"):
        engine.create(facts(rel, uid, "1", 100000))
    assert not kept(rel)


def test_a_pod_with_a_record_keeps_them_when_another_container_is_not_placed(
        pod: Tuple[NriEngine, str, str]) -> None:
    engine, rel, uid = pod
    engine.create(facts(rel, uid, "1", 100000))
    engine.create(facts(rel, uid, "", None))
    assert kept(rel)
