"""benchmarks/nri_memory_records.py measures what the record files cost an answer: it must leave
the answers exactly as they are and take away only the files. Run in a child process: the device
patches the store for the whole process, as it does for the plugin it wraps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CHILD = r"""
import json, os, sys
sys.path[:0] = [os.path.join(REPO, "benchmarks"), os.path.join(REPO, "tests", "unit")]
import nri_memory_records
files = nri_memory_records.install() if MEMORY else {}
from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.node.log import Reporter
import io
from nri.peer import create_request
h = Handlers(load_config(CONFIG), Reporter(stream=io.StringIO(), sink=None))
out = {}
a = h.create_container(create_request(APP, quota=200000)).adjust.linux.resources.cpu
out["create"] = [a.cpus, a.quota.value]
req = api.UpdateContainerRequest(container=api.Container(id=APP))
req.linux_resources.cpu.cpus = "2-3"
req.linux_resources.cpu.quota.value = 200000
req.linux_resources.cpu.period.value = 100000
u = h.update_container(req).update
out["update"] = [[x.container_id, x.linux.resources.cpu.cpus, x.linux.resources.cpu.quota.value] for x in u]
out["tracked"] = h.tracked(APP)
out["files_in_memory"] = sorted(os.path.basename(p) for p in files)
h.stop_container(api.StopContainerRequest(container=api.Container(id=APP)))
out["tracked_after_stop"] = h.tracked(APP)
out["files_after_stop"] = sorted(os.path.basename(p) for p in files)
print(json.dumps(out))
"""


def run_child(node: Any, memory: bool) -> Any:
    app = "a1" * 32
    head = f"REPO = {REPO!r}\nCONFIG = {node.config_path!r}\nAPP = {app!r}\nMEMORY = {memory!r}\n"
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "hook"))
    done = subprocess.run([sys.executable, "-c", head + CHILD], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_device_changes_the_files_not_the_answers(node: Any) -> None:
    node.add_container("a1" * 32, cpus="2-3", quota=200000, pod_quota=200000)
    with_files = run_child(node, memory=False)
    containers = os.path.join(node.state_dir, "containers")
    assert not [n for n in os.listdir(containers) if n.endswith(".json")]  # stopped: the record went
    in_memory = run_child(node, memory=True)
    assert {k: in_memory[k] for k in ("create", "update", "tracked", "tracked_after_stop")} == \
        {k: with_files[k] for k in ("create", "update", "tracked", "tracked_after_stop")}
    assert in_memory["create"] == ["0-3", 400000] and in_memory["tracked"] and not in_memory["tracked_after_stop"]
    assert in_memory["files_in_memory"] == ["a1" * 32 + ".json", "pod0f1e2d3c-aaaa-bbbb-cccc-123456789abc.json"]
    assert in_memory["files_after_stop"] == []
    assert not [n for n in os.listdir(containers) if n.endswith(".json")]  # nothing written by the device

