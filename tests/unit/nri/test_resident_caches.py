"""A resident plugin sees a new container id for every container the node ever runs: nothing it
keeps between requests may grow with them. Found by benchmarks/nri_plugin.py (RSS 22.4 -> 24.4 MiB
over 1000 create/stop cycles): node.cgroupfs remembered each released container's cgroup paths
until its bound (4096) cleared them all, about 2 MiB later.
"""

from __future__ import annotations

from typing import Any, Callable

from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.node import cgroupfs as cg
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.store import records

from .peer import create_request
from . import test_pool_dra
from .test_pool_dra import World

CYCLES = 30
make_world = test_pool_dra.make_world  # the pool tests' fixture


def remembered(cid: str) -> list:
    """Remembered paths and records that name the container (the caches' own dicts)."""
    caches = (vars(cg)["_RESOLVED"], vars(records)["_PARSED"])
    return [k for cache in caches for k in cache if cid in k]


def test_released_containers_leave_nothing_remembered(node: Any, reporter: Any) -> None:
    h = Handlers(load_config(node.config_path), reporter.reporter)
    for n in range(CYCLES):
        cid = f"{n:064x}"
        node.add_container(cid, cpus="2-3", quota=200000, pod_quota=200000)
        resp = h.create_container(create_request(cid, quota=200000))
        assert resp.adjust.linux.resources.cpu.cpus == "0-3"
        h.update_container(api.UpdateContainerRequest(container=api.Container(id=cid)))
        h.stop_container(api.StopContainerRequest(container=api.Container(id=cid)))
        assert remembered(cid) == [], n


def test_released_pool_containers_leave_nothing_remembered(make_world: Callable[..., World]) -> None:
    world = make_world()
    for n in range(CYCLES):
        cid = f"{n:064x}"
        world.create(cid, claims=((f"c{n}", "1"),))
        world.start(cid)
        world.stop(cid)
        assert remembered(cid) == [], n
