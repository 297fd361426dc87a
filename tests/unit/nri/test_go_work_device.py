"""benchmarks/nri_go_work.py measures the interpreter's floor for the Go reference plugin's work: its
handlers must do that work (and only that) through the product's framework, or its ratios mean
nothing. Run in a child process: the device patches the handlers' class for the whole process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
POD_UID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"

CHILD = r"""
import io, json, os, sys
sys.path[:0] = [os.path.join(REPO, "benchmarks"), os.path.join(REPO, "tests", "unit")]
import nri_go_work
tracked = nri_go_work.install()
from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.node.log import Reporter
from nri.peer import pod_and_container
h = Handlers(load_config(CONFIG), Reporter(stream=io.StringIO(), sink=None))
READ = api.READ
def wire(name, msg):  # as the plugin decodes a request: into the READ class
    return READ[name].FromString(msg.SerializeToString())
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
out["tracked"] = sorted(tracked)
h.stop_container(wire("StopContainerRequest", api.StopContainerRequest(pod=pod, container=ctr)))
out["pod_quota_after_stop"] = quota()
h.remove_container(wire("RemoveContainerRequest", api.RemoveContainerRequest(pod=pod, container=ctr)))
out["pod_quota_after_remove"] = quota()
out["state_dir_entries"] = sorted(os.listdir(STATE)) if os.path.isdir(STATE) else []
print(json.dumps(out))
"""


def test_the_device_does_the_go_plugins_work_and_no_more(fake_node: Any) -> None:
    node = fake_node(version=1)
    app = "a1" * 32
    node.add_container(app, cpus="2-3", quota=200000, pod_quota=200000)
    head = (f"REPO = {REPO!r}\nCONFIG = {node.config_path!r}\nAPP = {app!r}\nSTATE = {node.state_dir!r}\n"
            f"POD_QUOTA = {node.path('kubepods/pod' + POD_UID, 'cpu.cfs_quota_us')!r}\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "hook"))
    done = subprocess.run([sys.executable, "-c", head + CHILD], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "create": ["0-3", 400000, [["OPENSHIFT_ISOLATED_CPUS", "2-3"], ["OPENSHIFT_SHARED_CPUS", "0-1"]]],
        "pod_quota_raised": 400000,  # + 2 shared CPUs x 100000
        "update": [[app, "0-1,3", 300000]],
        "not_asking": False,
        "tracked": [app],
        "pod_quota_after_stop": 200000,
        "pod_quota_after_remove": 200000,  # given back once
        "state_dir_entries": [],  # no record, no lock
    }
