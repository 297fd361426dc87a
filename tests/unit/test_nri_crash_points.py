"""Crash points of NRI mode: the plugin killed right before each of its state changes.

The hook's commands are killed for real (strace) in tests/integration/test_crash_points.py;
the plugin is a long-running process whose requests run in-process, so here each NRI engine
event (NriEngine.create for CreateContainer, .update for UpdateContainer, .stop for
StopContainer) runs on a fake node with the N-th
state-changing system call (os.write to a file, os.open creating or truncating, os.replace,
os.rename, os.unlink, os.mkdir) replaced by a BaseException that nothing catches: the
process image as a SIGKILL would leave it. Then what the real world does next:

* the runtime goes on without the plugin: the container gets kubelet's values unadjusted
  (a create), kubelet's update lands as sent (an update), or the container and its cgroup go
  (a stop);
* the plugin restarts and the runtime's Synchronize (NriEngine.synchronize: tracked containers
  decided again, untracked asking ones admitted, records whose container and cgroup are gone
  released) answers updates, which the runtime writes;
* the periodic reconcile runs.

Then every tracked container is mixed with its quota at its base plus one share, the pod's
quota is its base plus one share per tracked container, no temporary file is left, and after
releasing everything the pod's quota is back at its base and no record is left.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from mixed_cpus_hook.core.cgroup import Quota
from mixed_cpus_hook.core.cpuset import format_cpulist, parse_cpulist
from mixed_cpus_hook.core.model import Adjustment, Resources
from mixed_cpus_hook.frontends.nri.plugin import defer_writes
from mixed_cpus_hook.node.config import load_config
import mixed_cpus_hook.store.records as records_store
from mixed_cpus_hook.store.records import list_records
from mixed_cpus_hook.usecases.nri import ContainerFacts, NriEngine
from mixed_cpus_hook.usecases.status import read_status_report

POD_UID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"
POD_BASE = 1000000
BASE = 100000  # each container: 1 exclusive CPU
PERIOD = 100000
SHARE = 2 * PERIOD  # shared 0-1
EXCLUSIVE = {"c1": "2", "c2": "3"}


class Killed(BaseException):
    """SIGKILL, in-process: nothing catches a BaseException that is not an Exception."""


class KillAt:
    """Count state-changing system calls; raise Killed right before the ``at``-th (0: never)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: int, cgroup_root: str) -> None:
        self.at, self.count, self.calls = at, 0, []  # type: Tuple[int, int, List[str]]
        self.active = True  # off while the test plays the runtime or kubelet
        real = {name: getattr(os, name) for name in ("write", "open", "replace", "rename", "unlink", "mkdir", "pwrite",
                                                     "ftruncate")}

        def point(what: str) -> None:
            if not self.active:
                return
            self.count += 1
            self.calls.append(what)
            if self.count == self.at:
                raise Killed(what)

        cgroup_fds = set()

        def write(fd: int, data: bytes) -> int:
            if fd > 2:
                point(f"write {fd}")
            if fd in cgroup_fds:  # cgroupfs takes the value at write(2): replace it only now
                real["ftruncate"](fd, 0)
            return real["write"](fd, data)

        def pwrite(fd: int, data: bytes, offset: int) -> int:
            point(f"pwrite {fd}")  # the plugin's journal (the state lock's file), a kept cgroup file
            if fd in cgroup_fds:
                real["ftruncate"](fd, 0)
            return real["pwrite"](fd, data, offset)

        def ftruncate(fd: int, length: int) -> None:
            point(f"ftruncate {fd}")  # the journal emptied once done
            real["ftruncate"](fd, length)

        def open_(path: Any, flags: int, *args: Any, **kw: Any) -> int:
            if str(path).startswith(cgroup_root + "/"):
                # On cgroupfs, opening with O_TRUNC changes nothing (the kill point is the write);
                # on the fake node's plain files it would empty the file.
                fd = real["open"](path, flags & ~os.O_TRUNC, *args, **kw)
                if flags & (os.O_WRONLY | os.O_RDWR):
                    cgroup_fds.add(fd)
                return fd
            if flags & (os.O_CREAT | os.O_TRUNC) and flags & (os.O_WRONLY | os.O_RDWR):
                point(f"open {path}")
            return real["open"](path, flags, *args, **kw)

        def wrap(name: str) -> Callable[..., Any]:
            def call(*args: Any, **kw: Any) -> Any:
                point(f"{name} {args[0]}")
                return real[name](*args, **kw)
            return call

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(os, "ftruncate", ftruncate)
        monkeypatch.setattr(os, "open", open_)
        for name in ("replace", "rename", "unlink", "mkdir"):
            monkeypatch.setattr(os, name, wrap(name))


class World:
    """A fake node with one pod (base 1000000) and two asking containers, driven as NRI would."""

    def __init__(self, node: Any, reporter: Any, journaling: bool = True) -> None:
        self.node, self.reporter, self.journaling = node, reporter, journaling
        self.paths = {cid: node.add_container(cid, name=cid, cpus=EXCLUSIVE[cid], quota=BASE, pod_quota=POD_BASE,
                                              pod_uid=POD_UID)
                      for cid in EXCLUSIVE}
        self.pod_rel = self.paths["c1"]["pod_rel"]
        node.set_quota(self.pod_rel, POD_BASE)
        self.config = load_config(node.config_path)
        self.kill: Optional[KillAt] = None

    def _as_others(self, write: Callable[[], None]) -> None:
        """A write by the runtime or kubelet: never a crash point of the plugin's."""
        if self.kill is not None:
            self.kill.active = False
        try:
            write()
        finally:
            if self.kill is not None:
                self.kill.active = True

    def engine(self) -> NriEngine:
        """A plugin process: a fresh engine per request (a restarted plugin knows nothing); as the
        plugin runs it (its records journaled until the answer is sent: after_answer), or not."""
        engine = NriEngine(self.config, self.reporter)
        if self.journaling:
            defer_writes(engine)
        return engine

    def facts(self, cid: str) -> ContainerFacts:
        """What the runtime says of the container: its cgroup's current values (kubelet's at a create)."""
        rel = self.paths[cid]["rel"]
        quota = self.node.quota(rel)
        ann = {"io.kubernetes.pod.namespace": "ran", "io.kubernetes.pod.name": "du-0",
               "io.kubernetes.pod.uid": POD_UID, "io.kubernetes.container.name": cid,
               f"mixed-cpus.openshift.io/{cid}": "enable"}
        return ContainerFacts(cid, ann, parse_cpulist(self.node.read(rel, "cpuset.cpus")),
                              Quota(None if quota in ("-1", "max") else int(quota), PERIOD), "/" + rel,
                              "/" + self.pod_rel)

    def runtime_writes(self, cid: str, res: Optional[Resources]) -> None:
        """runc writes what the plugin answered (or kubelet's values when it answered nothing)."""
        if res is not None:
            rel = self.paths[cid]["rel"]
            self._as_others(lambda: (self.node.write(rel, "cpuset.cpus", format_cpulist(res.cpus)),
                                     self.node.set_quota(rel, res.quota)))

    @staticmethod
    def resources(adj: Optional[Adjustment]) -> Optional[Resources]:
        return None if adj is None else adj.resources

    def kubelet_values(self, cid: str, cpus: str, quota: Optional[int] = None) -> None:
        rel = self.paths[cid]["rel"]
        self._as_others(lambda: (self.node.write(rel, "cpuset.cpus", cpus),
                                 None if quota is None else self.node.set_quota(rel, quota)))

    # the requests ---------------------------------------------------------------------
    # Each answered, then what the plugin does once its answer is sent (while the runtime writes it).
    def create(self, cid: str) -> None:
        engine = self.engine()
        self.runtime_writes(cid, self.resources(engine.create(self.facts(cid)).adjust))
        engine.after_answer()

    def update(self, cid: str, cpus: str, quota: Optional[int] = None) -> None:
        engine = self.engine()
        adj = engine.update(cid, parse_cpulist(cpus), None if quota is None else Quota(quota, PERIOD)).adjust
        if adj is None:
            self.kubelet_values(cid, cpus, quota)
        else:
            self.runtime_writes(cid, adj.resources)
        engine.after_answer()

    def stop(self, cid: str) -> None:
        engine = self.engine()
        engine.stop(cid)
        engine.after_answer()

    def container_goes(self, cid: str) -> None:
        """The runtime removes a stopped container: its cgroup goes."""
        rel = self.paths[cid]["rel"]
        self._as_others(lambda: [shutil.rmtree(os.path.dirname(self.node.path(rel, name)), ignore_errors=True)
                                 for name in ("cpuset.cpus", self.node.quota_name())])

    def synchronize(self, running: List[str]) -> None:
        """The runtime's Synchronize (the running containers with their current values), its updates applied."""
        engine = self.engine()
        answer = engine.synchronize([self.facts(cid) for cid in running])
        for update in answer.updates:
            self.runtime_writes(update.container_id, update.resources)
        engine.after_answer()

    def reconcile(self) -> None:
        self.engine().reconcile()

    # the checks -----------------------------------------------------------------------
    def problems(self, tracked: List[str], bases: Dict[str, int]) -> List[str]:
        out = []
        records = list_records(self.config.state_dir, "containers")
        if records != sorted(tracked):
            out.append(f"records {records}, not {sorted(tracked)}")
        for cid in tracked:
            rel = self.paths[cid]["rel"]
            cpus, quota = self.node.read(rel, "cpuset.cpus"), self.node.quota(rel)
            want = format_cpulist(parse_cpulist(EXCLUSIVE[cid]) | parse_cpulist("0-1"))
            if cpus != want:
                out.append(f"{cid}: cpuset {cpus}, not {want}")
            if quota != str(bases[cid] + SHARE):
                out.append(f"{cid}: quota {quota}, not {bases[cid]} + {SHARE}")
        pod = self.node.quota(self.pod_rel)
        if pod != str(POD_BASE + SHARE * len(tracked)):
            out.append(f"pod quota {pod}, not {POD_BASE} + {len(tracked)} x {SHARE}")
        left = [f for d, _s, fs in os.walk(self.config.state_dir) for f in fs if f.endswith(".tmp")]
        if left:
            out.append(f"temporary files left: {left}")
        rows, _problems = read_status_report(self.config)
        out += [f"status {r['id']}: {r['problem'] or 'not in sync'}" for r in rows if not r["in_sync"]]
        return out

    def release_all(self) -> List[str]:
        for cid in list_records(self.config.state_dir, "containers"):
            self.stop(cid)
        out = []
        if self.node.quota(self.pod_rel) != str(POD_BASE):
            out.append(f"after releasing everything the pod quota is {self.node.quota(self.pod_rel)}")
        left = list_records(self.config.state_dir, "containers") + list_records(self.config.state_dir, "pods")
        if left:
            out.append(f"records left after releasing everything: {left}")
        return out


# Each scenario: what comes before (not killed), the request that is killed, what the runtime does
# without the plugin, the containers running afterwards, and each one's kubelet base afterwards.
Scenario = Tuple[Callable[[World], None], Callable[[World], None], Callable[[World], None], List[str], Dict[str, int]]
SCENARIOS: Dict[str, Scenario] = {
    "create-first": (lambda w: None, lambda w: w.create("c1"), lambda w: None, ["c1"], {"c1": BASE}),
    "create-second": (lambda w: w.create("c1"), lambda w: w.create("c2"), lambda w: None, ["c1", "c2"],
                      {"c1": BASE, "c2": BASE}),
    # kubelet's CPU manager after its restart: cpuset only; the update lands unadjusted without the plugin.
    "update-cpuset": (lambda w: (w.create("c1"), w.create("c2")), lambda w: w.update("c1", "2"),
                      lambda w: w.kubelet_values("c1", "2"), ["c1", "c2"], {"c1": BASE, "c2": BASE}),
    # an in-place resize of c1's quota (kubelet's new base 150000)
    "update-resize": (lambda w: (w.create("c1"), w.create("c2")), lambda w: w.update("c1", "2", 150000),
                      lambda w: w.kubelet_values("c1", "2", 150000), ["c1", "c2"], {"c1": 150000, "c2": BASE}),
    "stop": (lambda w: (w.create("c1"), w.create("c2")), lambda w: w.stop("c1"), lambda w: w.container_goes("c1"),
             ["c2"], {"c2": BASE}),
}


@pytest.mark.parametrize("journaling", [pytest.param(True, id="journal"), pytest.param(False, id="direct")])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_crash_point_of_the_plugin(node: Any, reporter: Any, monkeypatch: pytest.MonkeyPatch,
                                         scenario: str, journaling: bool) -> None:
    before, request, without_plugin, running, bases = SCENARIOS[scenario]
    if journaling:  # as the plugin runs on a node with many records: its record folders watched too
        monkeypatch.setattr(records_store, "WATCH_FROM", 0)
    w = World(node, reporter.reporter, journaling)
    before(w)
    pristine = os.path.join(os.path.dirname(node.root), "pristine")
    shutil.copytree(node.root, pristine, symlinks=True)
    failures: List[str] = []
    point = 0
    while True:
        point += 1
        shutil.rmtree(node.root)
        shutil.copytree(pristine, node.root, symlinks=True)
        with monkeypatch.context() as m:
            kill = w.kill = KillAt(m, point, os.path.realpath(node.cgroup_root))
            try:
                request(w)
                killed = None
            except Killed as exc:
                killed = str(exc)
            w.kill = None
        if killed is None:
            problems = w.problems(running, bases)
            assert problems == [], f"{scenario}: without a kill: {problems}"
            break
        without_plugin(w)
        w.synchronize(running)
        w.reconcile()
        problems = w.problems(running, bases) + w.release_all()
        if problems:
            failures.append(f"point {point} (before {killed}): {'; '.join(problems)}")
        assert point < 200, kill.calls
    print(f"\nNRI crash points {scenario}: {point - 1} tried, {len(failures)} wrong")
    assert point > 2, f"{scenario}: only {point - 1} state changes: the kill points are not being counted"
    assert failures == [], f"{scenario}: {len(failures)} of {point - 1} crash points end wrong:\n" + "\n".join(failures)
