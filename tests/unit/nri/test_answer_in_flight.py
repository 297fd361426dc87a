"""An NRI answer is in flight until the runtime writes it: the plugin's own reconcile must not take
the value the runtime is about to replace for kubelet's.

Seen on containerd 1.7 in the v2 VM (test_nri_v2_vm.py, under load): kubelet resized a mixed
container back (quota 300000 -> 200000); the plugin answered 400000 and saved it, and its periodic
reconcile ran before runc wrote the answer. The file still held the previous answer, 500000, which
the new record no longer listed as ours: taken for kubelet's new base, the share went on top
(700000), then runc wrote 400000, and the next Synchronize (the plugin restarted) took that for a
new base too: 600000 for a container whose base is 200000. The value being replaced stays ours
until the file is seen to hold the new one (as for the pod's quota, nri.py's module docstring).
"""

from __future__ import annotations

from typing import Any

import pytest

from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.usecases.status import read_status

from .peer import create_request, pod_and_container

APP = "a1" * 32


def update(cid: str, cpus: str, quota: int, period: int = 100000) -> Any:
    req = api.UpdateContainerRequest(container=api.Container(id=cid))
    req.linux_resources.cpu.cpus = cpus
    req.linux_resources.cpu.quota.value = quota
    req.linux_resources.cpu.period.value = period
    return req


@pytest.mark.parametrize("late", ["resize-down", "resize-up"])
def test_reconcile_before_the_runtime_writes_the_answer_adds_nothing(node: Any, reporter: Any, late: str) -> None:
    h = Handlers(load_config(node.config_path), reporter.reporter)
    paths = node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    rel = paths["rel"]
    resp = h.create_container(create_request(APP, quota=200000))
    assert resp.adjust.linux.resources.cpu.quota.value == 400000
    node.set_quota(rel, 400000)  # the runtime wrote the answer
    first, second = (300000, 200000) if late == "resize-down" else (200000, 300000)
    for base in (first, second):
        resp = h.update_container(update(APP, "2-3", base))
        assert [(u.container_id, u.linux.resources.cpu.quota.value) for u in resp.update] == [(APP, base + 200000)]
        if base == second:
            break
        node.set_quota(rel, base + 200000)
    # the last answer is not written yet when the plugin's periodic reconcile runs
    h.reconcile()
    node.set_quota(rel, second + 200000)  # now the runtime writes it
    h.reconcile()
    assert node.quota(rel) == str(second + 200000)
    rec = node.records("containers")[APP]["quota"]
    assert (rec["base"], rec["applied"]) == (second, second + 200000), rec
    # the plugin restarts: Synchronize reports what the runtime holds
    pod, ctr = pod_and_container(APP, cpus="0-3", quota=second + 200000)
    resp = h.synchronize(api.SynchronizeRequest(pods=[pod], containers=[ctr]))
    assert [(u.container_id, u.linux.resources.cpu.quota.value) for u in resp.update] == [(APP, second + 200000)]
    assert node.records("containers")[APP]["quota"]["base"] == second


def test_reconcile_while_the_runtime_makes_the_cgroup_adopts_nothing(node: Any, reporter: Any) -> None:
    """A creation's answer is in flight until the runtime has made the cgroup *and* written it.

    Seen on containerd 1.7 in the v2 VM (test_nri_v2_vm.py): runc makes the container's cgroup
    (cpuset empty, quota unlimited) and only then writes the resources. The plugin's periodic
    reconcile ran in between: it took the unlimited quota for kubelet's and saved it, so when
    kubelet's cpuset-only update came (the runtime filling in the quota we answered, 400000) that
    value was nobody's, became the base, and the answer was 600000 for a base of 200000.
    """
    h = Handlers(load_config(node.config_path), reporter.reporter)
    paths = node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    rel = paths["rel"]
    node.remove_cgroup(rel)  # CreateContainer comes before the runtime makes the cgroup
    resp = h.create_container(create_request(APP, quota=200000))
    assert resp.adjust.linux.resources.cpu.quota.value == 400000
    assert node.records("containers")[APP]["phase"] == "creating"
    node.mkdir(rel)  # runc: the cgroup is made, its values not written yet
    node.write(rel, "cpuset.cpus", "")
    node.set_quota(rel, None)
    before = node.freeze()
    h.reconcile()
    assert node.changes(before) == [], "the reconcile wrote into a cgroup the runtime is still making"
    rec = node.records("containers")[APP]
    assert (rec["phase"], rec["quota"]["base"], rec["quota"]["applied"]) == ("creating", 200000, 400000), rec
    [row] = read_status(load_config(node.config_path))
    assert (row["in_sync"], row["problem"]) == (True, "being created (the runtime has not written its answer yet)")
    node.write(rel, "cpuset.cpus", "0-3")  # runc writes the answer
    node.set_quota(rel, 400000)
    h.reconcile()
    rec = node.records("containers")[APP]
    assert (rec["phase"], rec["quota"]["base"], rec["quota"]["applied"]) == ("applied", 200000, 400000), rec
    # kubelet's cpuset-only update: the runtime fills in the quota it holds, ours
    resp = h.update_container(update(APP, "2-3", 400000))
    assert [(u.container_id, u.linux.resources.cpu.cpus, u.linux.resources.cpu.quota.value)
            for u in resp.update] == [(APP, "0-3", 400000)]


@pytest.mark.parametrize("cpus, quota, period, written", [
    ("0-3", 400000, 100000, True),     # the answer landed
    ("0-3", 300000, 100000, True),     # an earlier answer still in flight (listed as ours)
    ("", None, 100000, False),         # runc made the cgroup, wrote nothing yet
    ("0-3", None, 100000, False),      # the cpuset landed, the quota not yet
    ("2-3", 400000, 100000, False),    # kubelet's exclusive set, not the answer
    ("0-3", 400000, 50000, False),     # another period: not a value of ours
], ids=["landed", "in-flight", "made-not-written", "cpuset-only", "exclusive-only", "other-period"])
def test_is_answer_written(cpus: str, quota: Any, period: int, written: bool) -> None:
    from mixed_cpus_hook.core.cgroup import Quota
    from mixed_cpus_hook.core.cpuset import parse_cpulist
    from mixed_cpus_hook.core.quota import QuotaState
    from mixed_cpus_hook.store.records import parse_container_record
    from mixed_cpus_hook.usecases.common import is_answer_written

    doc = {"schema": 2, "id": APP, "namespace": "ran", "pod": "du-0", "container": "app",
           "pod_uid": "0f1e2d3c-aaaa-bbbb-cccc-123456789abc", "mode": "nri", "phase": "creating",
           "cgroup_version": 1, "cgroup": {"cpuset": "/x", "cpu": "/y"}, "pod_cgroup": None, "pod_key": None,
           "exclusive": "2-3", "shared": "0-1", "desired": "0-3",
           "quota": {"base": 200000, "applied": 400000, "period": 100000, "ours": [300000, 400000]},
           "created": "2026-12-03T00:00:00Z", "updated": "2026-12-03T00:00:00Z", "last_reapply": None,
           "reapplies": 0, "pins_maybe_lost": False}
    rec = parse_container_record(doc, APP, "test")
    assert rec.quota == QuotaState(200000, 400000, 100000, (300000, 400000))
    assert is_answer_written(rec, parse_cpulist(cpus), Quota(quota, period)) is written
