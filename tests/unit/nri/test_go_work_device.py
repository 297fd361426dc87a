"""benchmarks/nri_go_work.py measures the interpreter's floor for the Go reference plugin's work: its
handlers must do that work (and only that) through the product's framework, or its ratios mean
nothing. benchmarks/nri_duties.py measures the floor of a plugin that keeps the product's duties:
its handlers must do each duty (records written before the answer and removed at stop, the lock,
the pod's quota raised, read back and given back, the checks). Run in a child process: the device patches the handlers' class for the whole process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
POD_UID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"

COMMON = r"""
import io, json, os, sys
sys.path[:0] = [os.path.join(REPO, "benchmarks"), os.path.join(REPO, "tests", "unit")]
device = __import__(DEVICE)
kept = device.install()
from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.node.log import Reporter
from nri.peer import pod_and_container
h = Handlers(load_config(CONFIG), Reporter(stream=io.StringIO(), sink=None))
from mixed_cpus_hook.frontends.nri.plugin import METHODS
DECODE = {cls.DESCRIPTOR.name: cls for cls, _ in METHODS.values()}
def wire(name, msg):  # as the plugin decodes a request: into its method table's class (a device may set it)
    return DECODE[name].FromString(msg.SerializeToString())
def quota():
    with open(POD_QUOTA) as f:
        return int(f.read())
out = {}
pod, ctr = pod_and_container(APP, quota=200000)
adj = h.create_container(wire("CreateContainerRequest", api.CreateContainerRequest(pod=pod, container=ctr))).adjust
out["create"] = [adj.linux.resources.cpu.cpus, adj.linux.resources.cpu.quota.value,
                 sorted((e.key, e.value) for e in adj.env)]
out["pod_quota_raised"] = quota()
req = api.UpdateContainerRequest(pod=pod, container=ctr)
req.linux_resources.cpu.cpus = "3"
req.linux_resources.cpu.quota.value = 100000
req.linux_resources.cpu.period.value = 100000
u = h.update_container(wire("UpdateContainerRequest", req)).update
out["update"] = [[x.container_id, x.linux.resources.cpu.cpus, x.linux.resources.cpu.quota.value] for x in u]
other, octr = pod_and_container("b2" * 32, ask=None)
out["not_asking"] = h.create_container(wire("CreateContainerRequest", api.CreateContainerRequest(pod=other, container=octr))).HasField("adjust")
"""

GO_WORK_CHILD = COMMON + r"""
out["tracked"] = sorted(kept)
h.stop_container(wire("StopContainerRequest", api.StopContainerRequest(pod=pod, container=ctr)))
out["pod_quota_after_stop"] = quota()
h.remove_container(wire("RemoveContainerRequest", api.RemoveContainerRequest(pod=pod, container=ctr)))
out["pod_quota_after_remove"] = quota()
out["state_dir_entries"] = sorted(os.listdir(STATE)) if os.path.isdir(STATE) else []
print(json.dumps(out))
"""


APP = "a1" * 32


def _run_child(fake_node: Any, device: str, child: str) -> Tuple[Dict[str, Any], str]:
    """``child`` run with ``device`` installed on a fake node holding APP: its last stdout line
    (JSON) and its stderr."""
    node = fake_node(version=1)
    app = APP
    node.add_container(app, cpus="2-3", quota=200000, pod_quota=200000)
    head = (f"REPO = {REPO!r}\nDEVICE = {device!r}\nCONFIG = {node.config_path!r}\nAPP = {app!r}\nSTATE = {node.state_dir!r}\n"
            f"POD_QUOTA = {node.path('kubepods/pod' + POD_UID, 'cpu.cfs_quota_us')!r}\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "hook"))
    done = subprocess.run([sys.executable, "-c", head + child], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _common(app: str) -> Dict[str, Any]:
    """What COMMON's events give with either device."""
    return {
        "create": ["0-3", 400000, [["OPENSHIFT_ISOLATED_CPUS", "2-3"], ["OPENSHIFT_SHARED_CPUS", "0-1"]]],
        "pod_quota_raised": 400000,  # + 2 shared CPUs x 100000
        "update": [[app, "0-1,3", 300000]],
        "not_asking": False,
    }


def test_the_device_does_the_go_plugins_work_and_no_more(fake_node: Any) -> None:
    out, _ = _run_child(fake_node, "nri_go_work", GO_WORK_CHILD)
    assert out == {
        **_common(APP),
        "tracked": [APP],
        "pod_quota_after_stop": 200000,
        "pod_quota_after_remove": 200000,  # given back once
        "state_dir_entries": [],  # no record, no lock
    }


DUTIES_CHILD = COMMON + r"""
def records():
    return {k: sorted(os.listdir(os.path.join(STATE, k))) for k in ("containers", "pods")}
def refused(msg):
    try:
        h.create_container(wire("CreateContainerRequest", msg))
    except device.Refused as exc:
        return str(exc)
    return "answered"
out["records_after_create"] = records()
with open(os.path.join(STATE, "containers", APP + ".json")) as f:
    rec = json.load(f)
out["record"] = [rec["desired"], rec["exclusive"], rec["quota"]["applied"], rec["phase"]]
out["lock"] = os.path.isfile(os.path.join(STATE, "lock"))
h.after_answer()
taken, tctr = pod_and_container("c3" * 32)
out["cpus_held"] = refused(api.CreateContainerRequest(pod=taken, container=tctr))
bad, bctr = pod_and_container("d4" * 32, cpus="2")
bad.linux.cgroup_parent = "/kubepods/../etc"
out["bad_path"] = refused(api.CreateContainerRequest(pod=bad, container=bctr))
h.stop_container(wire("StopContainerRequest", api.StopContainerRequest(pod=pod, container=ctr)))
out["pod_quota_after_stop"] = quota()
out["journal_until_the_answer"] = [records(), os.path.getsize(os.path.join(STATE, "lock")) > 0]
h.after_answer()
out["records_after_stop"] = records()
out["journal_after_the_answer"] = os.path.getsize(os.path.join(STATE, "lock"))
h.remove_container(wire("RemoveContainerRequest", api.RemoveContainerRequest(pod=pod, container=ctr)))
h.after_answer()
out["pod_quota_after_remove"] = quota()
out["kept_quota_fds"] = len(kept["quota_fds"])
print(json.dumps(out))
"""


def test_the_device_does_the_products_duties(fake_node: Any) -> None:
    out, stderr = _run_child(fake_node, "nri_duties", DUTIES_CHILD)
    assert out == {
        **_common(APP),
        "records_after_create": {"containers": [APP + ".json"], "pods": ["pod" + POD_UID + ".json"]},
        "record": ["0-3", [2, 3], 400000, "applied"],
        "lock": True,
        "cpus_held": f"CPUs held by {APP}.json",  # no checkpoint: another record's exclusive CPUs
        "bad_path": "cgroup path '/kubepods/../etc'",
        "pod_quota_after_stop": 200000,
        # the removals journaled in the lock file, done once the answer is sent, as the product's store does
        "journal_until_the_answer": [{"containers": [APP + ".json"], "pods": ["pod" + POD_UID + ".json"]}, True],
        "records_after_stop": {"containers": [], "pods": []},
        "journal_after_the_answer": 0,
        "pod_quota_after_remove": 200000,  # given back once
        "kept_quota_fds": 0,
    }
    assert f"container {APP} (ran/du-0/app): mixed CPUs 0-3 (exclusive 2-3 + shared 0-1), quota 400000/100000" \
        in stderr
