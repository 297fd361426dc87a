"""benchmarks/nri_sections.py cuts the plugin's request path into timed sections: it must time the
sections it names, each as often as the path runs it, and change no answer. Run in a child
process: the device patches the package's modules for the whole process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CHILD = r"""
import io, json, os, sys
sys.path[:0] = [os.path.join(REPO, "benchmarks"), os.path.join(REPO, "tests", "unit")]
out = {}
if DEVICE:
    import nri_sections
    nri_sections.install(out, go_work=GO_WORK)
from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.node.log import Reporter
from nri.peer import pod_and_container
h = Handlers(load_config(CONFIG), Reporter(stream=io.StringIO(), sink=None))
from mixed_cpus_hook.frontends.nri.plugin import METHODS
DECODE = {cls.DESCRIPTOR.name: cls for cls, _ in METHODS.values()}
def wire(name, msg):  # as the plugin decodes a request (a device may set its class)
    return DECODE[name].FromString(msg.SerializeToString())
answers = []
pod, ctr = pod_and_container(APP, quota=200000)
for _ in range(2):
    answers.append(h.create_container(wire("CreateContainerRequest", api.CreateContainerRequest(pod=pod, container=ctr))).SerializeToString().hex())
    req = api.UpdateContainerRequest(pod=pod, container=ctr)
    req.linux_resources.cpu.cpus = "3"
    req.linux_resources.cpu.quota.value = 100000
    req.linux_resources.cpu.period.value = 100000
    answers.append(h.update_container(wire("UpdateContainerRequest", req)).SerializeToString().hex())
    answers.append(h.stop_container(wire("StopContainerRequest", api.StopContainerRequest(pod=pod, container=ctr))).SerializeToString().hex())
print(json.dumps({"answers": answers,
                  "sections": {k: (v if k.endswith("(calls)") else len(v)) for k, v in out.items()},
                  "positive": all(t > 0 for k, v in out.items() if not k.endswith("(calls)") for t in v)}))
"""


def _run(node: Any, app: str, device: bool, go_work: bool = False) -> Dict[str, Any]:
    head = f"REPO = {REPO!r}\nCONFIG = {node.config_path!r}\nAPP = {app!r}\nDEVICE = {device}\nGO_WORK = {go_work}\n"
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "hook"))
    done = subprocess.run([sys.executable, "-c", head + CHILD], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# (section, what the device records for two Create + Update + Stop cycles of an asking container: a
# handler's time per event; inside a handler, per event its sum, and its calls in that event)
PRODUCT = {
    "CreateContainer handler": 2, "UpdateContainer handler": 2, "StopContainer handler": 2,
    "CreateContainer / request parsed and bounded (calls)": [1, 1],
    "CreateContainer / node facts (online CPUs, checkpoint) (calls)": [2, 1],  # the first bounds the cpulist too
    "CreateContainer / cgroup paths checked (calls)": [1, 1],
    "CreateContainer / state lock taken (calls)": [1, 1],
    "CreateContainer / records saved (calls)": [1, 1],
    "CreateContainer / pod quota written and read back (calls)": [1, 1],
    "UpdateContainer / node facts (online CPUs, checkpoint) (calls)": [1, 1],
    "UpdateContainer / records saved (calls)": [1, 1],
    "StopContainer / tracked? (one stat) (calls)": [1, 1],
    "StopContainer / release (records, pod quota back) (calls)": [1, 1],
    "StopContainer / records saved": None,  # a release saves through the store, not save_changed
}


def test_the_device_times_the_product_and_changes_no_answer(fake_node: Any) -> None:
    node = fake_node(version=1)
    app = "a1" * 32
    node.add_container(app, cpus="2-3", quota=200000, pod_quota=200000)
    plain = _run(node, app, device=False)
    timed = _run(node, app, device=True)
    assert timed["answers"] == plain["answers"] and plain["answers"]
    assert timed["positive"]
    assert {k: timed["sections"].get(k) for k in PRODUCT} == PRODUCT


@pytest.mark.parametrize("section", ["records saved", "state lock taken", "node facts (online CPUs, checkpoint)"])
def test_with_the_go_work_the_products_duties_are_not_there(fake_node: Any, section: str) -> None:
    node = fake_node(version=1)
    app = "a1" * 32
    node.add_container(app, cpus="2-3", quota=200000, pod_quota=200000)
    go = _run(node, app, device=True, go_work=True)
    assert go["sections"]["CreateContainer handler"] == 2
    assert not [key for key in go["sections"] if section in key]
    product = _run(node, app, device=True)
    assert [key for key in product["sections"] if section in key]  # the product's path has it
