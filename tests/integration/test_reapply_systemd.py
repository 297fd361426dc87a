"""Reapply for real: the units of rpm/units/ under a real systemd 252 undo kubelet's rewrites.

Each test boots systemd in private PID, mount and cgroup namespaces (systemd_ns.py) with the
unit files installed in /etc/systemd/system as the RPM would install them (only the
ExecStart= programs point at this checkout: the venv's ``mixed-cpus-hook`` and ``python``),
every non-template unit with an [Install] section enabled and started (``systemctl enable
--now``), the default paths (/etc/mixed-cpus-hook/, /run/mixed-cpus-hook/; shared CPU "0"),
and runs runc *inside* the namespaces with the shipped hooks.d entries in config.json, so the
cgroup paths the hook records are the ones systemd's path units see.

Kubelet's rewrite is ``runc update --cpuset-cpus 1 --cpu-quota 100000 ID`` (what CRI-O runs
for UpdateContainerResources); with the systemd driver, ``systemctl daemon-reload`` puts the
scope's and the pod slice's CPUQuota back too. Files are read from the host side
(SystemdNamespace.host_cgroup_dir), state through /proc/<pid 1>/root.

ReapplyNode is also what benchmarks/reapply_latency.py uses.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

try:
    from .helpers import read_file, write_file
except ImportError:  # collected as top-level modules (rootdir-relative)
    from helpers import read_file, write_file  # type: ignore[no-redef]

try:  # tests/integration as a package
    from . import systemd_ns
except ImportError:  # rootdir-relative import (no __init__.py)
    import systemd_ns  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[2]
UNITS_DIR = REPO / "rpm" / "units"
INSTALLED_EXE = "/usr/bin/mixed-cpus-hook"
INSTALLED_PYTHON = "/usr/bin/python3"
STATE_DIR = "/run/mixed-cpus-hook"
PREFIX = "mixed-cpus.openshift.io"
SHARED, EXCLUSIVE, MIXED = "0", "1", "0-1"
PERIOD = 100000
WATCHES = ("mixed-cpus-hook-watch@{}.path", "mixed-cpus-hook-watch-quota@{}.path", "mixed-cpus-hook-watch-pod@{}.path")
RESTORE_TIMEOUT = 5.0  # poll this long for a restore ...
RESTORE_BAR = 1.0  # ... and require it within this

_SKIP = systemd_ns.skip_reason()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(_SKIP is not None, reason="systemd harness: %s" % (_SKIP,)),
]


# ---------------------------------------------------------------------------------------
# the units, as installed


def unit_files() -> Dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(UNITS_DIR.iterdir())
            if p.suffix in (".service", ".path", ".timer")}


def render_unit(text: str, exe: str, python: str) -> str:
    """The unit with the program of each ExecStart= line pointing at this checkout; nothing else changes."""
    out = []
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            cmd = line[len("ExecStart="):]
            for installed, here in ((INSTALLED_EXE, exe), (INSTALLED_PYTHON, python)):
                if cmd.startswith(installed + " "):
                    cmd = here + cmd[len(installed):]
                    break
            else:
                raise AssertionError(f"unexpected ExecStart= program: {line!r}")
            line = "ExecStart=" + cmd
        out.append(line)
    return "\n".join(out) + "\n"


def enabled_units(units: Dict[str, str]) -> List[str]:
    """What the RPM's preset (rpm/90-mixed-cpus-hook.preset) enables among ``units``: NRI mode is opt-in."""
    from mixed_cpus_hook.ops.machineconfig import parse_preset

    preset = parse_preset((REPO / "rpm" / "90-mixed-cpus-hook.preset").read_text(encoding="utf-8"))
    return sorted(n for n in units if n in preset)


def procs_in_pidns(ns_inode: str) -> List[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == ns_inode:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def wait_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.002) -> float:
    """Poll ``pred`` until true; the seconds it took. Fails after ``timeout``."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - t0


def annotations(container: str = "app", uid: str = "0c6f6f7e-3f57-4a2e-9d0e-8f5b0e1a2b3c") -> Dict[str, str]:
    return {
        "io.kubernetes.container.name": container,
        "io.kubernetes.pod.namespace": "it-ns",
        "io.kubernetes.pod.name": "it-pod",
        "io.kubernetes.pod.uid": uid,
        f"{PREFIX}/{container}": "enable",
    }


def ns_runc_class(base: type) -> type:
    """conftest's Runc, run inside the namespaces (``--systemd-cgroup`` optional).

    The hooks are the shipped hooks.d entries with only the program pointing at this checkout
    and the default configuration (no --config, no cache directory).
    """

    class NsRunc(base):  # type: ignore[misc, valid-type]
        def __init__(self, node: Any, sd: Any, systemd_cgroup: bool = False) -> None:
            super().__init__(node)
            self.sd = sd
            self.global_args = ["--systemd-cgroup"] if systemd_cgroup else []
            for hook in self.hooks.values():
                args = list(hook["args"])
                if "--config" in args:
                    i = args.index("--config")
                    del args[i:i + 2]
                hook["args"] = args
                hook["env"] = [e for e in hook.get("env", []) if not e.startswith("MIXED_CPUS_HOOK_")]

        def argv(self, *args: str) -> List[str]:
            return self.sd.command(["runc", *self.global_args, *args])

    return NsRunc


# ---------------------------------------------------------------------------------------
# one node: systemd with the units, runc inside, kubelet-like pods


class Container:
    def __init__(self, cid: str, cpuset_dir: str, cpu_dir: str, pod_cpu_dir: Optional[str]) -> None:
        self.id = cid
        self.cpus = os.path.join(cpuset_dir, "cpuset.cpus")
        self.quota = os.path.join(cpu_dir, "cpu.cfs_quota_us")
        self.pod_quota = os.path.join(pod_cpu_dir, "cpu.cfs_quota_us") if pod_cpu_dir else None
        self.watches = [w.format(cid) for w in (WATCHES if pod_cpu_dir else WATCHES[:2])]
        self.watch, self.quota_watch = self.watches[:2]
        self.pod_watch = self.watches[2] if pod_cpu_dir else None

    def values(self) -> Tuple[str, str, Optional[str]]:
        return (read_file(self.cpus), read_file(self.quota), read_file(self.pod_quota) if self.pod_quota else None)


class ReapplyNode:
    """A SystemdNamespace with the RPM's units enabled, and runc containers the hook applied.

    ``node`` is conftest's Node (a temporary directory, removed by its own cleanup) and
    ``runc_class`` conftest's Runc; ``close()`` deletes the containers inside, then stops systemd
    and checks that no process and no cgroup is left.
    """

    def __init__(self, node: Any, runc_class: type, systemd_cgroup: bool = False) -> None:
        self.node = node
        exe = node.exe
        python = sys.executable
        self.units = unit_files()
        etc = {f"/etc/systemd/system/{name}": render_unit(text, exe, python) for name, text in self.units.items()}
        etc["/etc/mixed-cpus-hook/config.yaml"] = ("# tests/integration/test_reapply_systemd.py: defaults, and the pods' namespace\n"
                                                  "allowed_namespaces: [it-ns]\n")
        etc["/etc/mixed-cpus-hook/shared-cpus"] = f"# the node's shared CPUs\n{SHARED}\n"
        self.sd = systemd_ns.SystemdNamespace(node.tmp, etc_files=etc, poweroff_timeout=5)
        self.runc: Any = None
        self.runc_class = ns_runc_class(runc_class)
        self.systemd_cgroup = systemd_cgroup
        self._ns = ""
        self._roots: List[str] = []

    # lifecycle ---------------------------------------------------------------------------
    def start(self) -> "ReapplyNode":
        self.sd.start()
        self._ns = os.readlink(f"/proc/{self.sd.pid}/ns/pid")
        self._roots = [self.sd.inner_root_on_host(h) for h in self.sd.hierarchies]
        self.runc = self.runc_class(self.node, self.sd, self.systemd_cgroup)
        self.sd.systemctl("enable", "--now", *enabled_units(self.units))
        return self

    def close(self) -> List[str]:
        """Delete our containers inside, stop systemd; the problems found (empty when clean)."""
        problems: List[str] = []
        try:
            if self.runc is not None and self.sd.is_alive():
                problems += self.runc.cleanup()
                left = [i for i in self.runc.listed() if i in self.runc.ids]
                if left:
                    problems.append(f"runc containers left inside: {left}")
        finally:
            try:
                self.sd.stop()
            except RuntimeError as exc:
                problems.append(str(exc))
        if self._ns and procs_in_pidns(self._ns):
            problems.append(f"processes left in the namespace: {procs_in_pidns(self._ns)}")
        problems += [f"cgroup left: {d}" for d in self._roots if os.path.exists(d)]
        return problems

    # paths -------------------------------------------------------------------------------
    def host(self, hierarchy: str, inner: str) -> str:
        return self.sd.host_cgroup_dir(hierarchy, inner)

    def state(self, *parts: str) -> str:
        """A path of the namespace's /run/mixed-cpus-hook, as the host reaches it."""
        return os.path.join(f"/proc/{self.sd.pid}/root", STATE_DIR.lstrip("/"), *parts)

    def records(self) -> List[str]:
        try:
            return sorted(e[:-5] for e in os.listdir(self.state("containers")) if e.endswith(".json"))
        except FileNotFoundError:
            return []

    def record(self, cid: str) -> Dict[str, Any]:
        with open(self.state("containers", cid + ".json"), encoding="utf-8") as f:
            return json.load(f)

    # systemd -----------------------------------------------------------------------------
    def active(self, unit: str) -> str:
        return self.sd.systemctl("is-active", unit, check=False).stdout.strip()

    def watch_units(self) -> List[str]:
        """Watch units systemctl list-units shows (active, failed or with a job)."""
        out = self.sd.systemctl("list-units", "--plain", "--no-legend", "--full", "mixed-cpus-hook-watch*").stdout
        return [line.split()[0] for line in out.splitlines() if line.split()]

    def watching(self, c: "Container") -> bool:
        return all(self.active(unit) == "active" for unit in c.watches)

    def journal(self) -> str:
        return self.sd.journal("-t", "mixed-cpus-hook", "-o", "cat", check=False).stdout

    def wait_watch(self, c: Container, timeout: float = 10.0) -> float:
        return wait_until(lambda: self.watching(c), timeout, f"{c.watches} active", 0.01)

    # pods and containers -----------------------------------------------------------------
    def make_pod_cgroupfs(self, quota: int = 200000) -> Tuple[str, str]:
        """``/kubepods/pod<uid>`` (cgroupfs driver) with a CFS quota; made after boot (systemd prunes)."""
        uid = str(uuid.uuid4())
        rel = f"/kubepods/pod{uid}"
        for hierarchy in ("cpuset", "cpu"):
            cur = self.host(hierarchy, "/")
            for part in rel.strip("/").split("/"):
                parent, cur = cur, os.path.join(cur, part)
                os.makedirs(cur, exist_ok=True)
                if hierarchy == "cpuset":
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        if not read_file(os.path.join(cur, f)):
                            write_file(os.path.join(cur, f), read_file(os.path.join(parent, f)))
        write_file(self.host("cpu", rel + "/cpu.cfs_period_us"), str(PERIOD))
        write_file(self.host("cpu", rel + "/cpu.cfs_quota_us"), str(quota))
        return rel, uid

    def make_pod_systemd(self, quota_percent: int = 200) -> Tuple[str, str]:
        """``kubepods-pod<uid>.slice`` with CPUQuota= (what kubelet asks systemd for)."""
        uid = str(uuid.uuid4())
        name = f"kubepods-pod{uid.replace('-', '_')}.slice"
        self.sd.install_file(f"/run/systemd/system/{name}",
                             f"[Unit]\nDescription=test pod {uid}\n[Slice]\nCPUQuota={quota_percent}%\n")
        self.sd.systemctl("daemon-reload")
        self.sd.systemctl("start", name)
        return name, uid

    def run_container(self, what: str, cgroups_path: str, pod_uid: str, hooks: Optional[Dict[str, list]] = None,
                      container: str = "app") -> Container:
        """A container of the pod (``cgroups_path`` with ``{id}`` for the id) that asks for mixed CPUs."""
        cid = self.runc.new_id(what)
        bundle = self.runc.bundle(cid, cgroups_path.format(id=cid), annotations(container, pod_uid), cpus=EXCLUSIVE,
                                  quota=PERIOD, period=PERIOD, hooks=hooks)
        proc = self.runc.run(bundle, cid)
        assert proc.returncode == 0, proc.stdout
        return self.container(cid)

    def container(self, cid: str) -> Container:
        rec = self.record(cid)

        def inner(d: str) -> str:  # the record holds paths as seen inside
            return d[len("/sys/fs/cgroup/"):]

        pod = rec.get("pod_cgroup")
        cpuset_h, _, cpuset_rel = inner(rec["cgroup"]["cpuset"]).partition("/")
        cpu_h, _, cpu_rel = inner(rec["cgroup"]["cpu"]).partition("/")
        pod_cpu = None
        if pod:
            pod_h, _, pod_rel = inner(pod["cpu"]).partition("/")
            pod_cpu = self.host(pod_h, pod_rel)
        return Container(cid, self.host(cpuset_h, cpuset_rel), self.host(cpu_h, cpu_rel), pod_cpu)

    def rewrite(self, c: Container, cpus: Optional[str] = EXCLUSIVE, quota: Optional[int] = PERIOD) -> None:
        """kubelet's UpdateContainerResources, as CRI-O runs it."""
        args = ["update"]
        if cpus is not None:
            args += ["--cpuset-cpus", cpus]
        if quota is not None:
            args += ["--cpu-quota", str(quota)]
        self.runc.cmd(*args, c.id, check=True)


@pytest.fixture
def reapply_node(mch_node: Any, mch_runc: Any):
    """A booted ReapplyNode (cgroupfs driver); closed and checked after the test."""
    rn = ReapplyNode(mch_node, type(mch_runc))
    try:
        rn.start()
        yield rn
    finally:
        problems = rn.close()
        assert not problems, problems


@pytest.fixture
def reapply_node_systemd(mch_node: Any, mch_runc: Any):
    """The same with runc --systemd-cgroup (scopes made through systemd's D-Bus API inside)."""
    rn = ReapplyNode(mch_node, type(mch_runc), systemd_cgroup=True)
    try:
        rn.start()
        yield rn
    finally:
        problems = rn.close()
        assert not problems, problems


def restored(c: Container, want: Tuple[str, str, Optional[str]]) -> Callable[[], bool]:
    return lambda: c.values() == want


MIXED_VALUES = (MIXED, str(2 * PERIOD), str(3 * PERIOD))  # cpuset, quota 1+1 CPUs, pod 2+1 CPUs


def started_cgroupfs(rn: ReapplyNode, what: str = "c", hooks: Optional[Dict[str, list]] = None) -> Container:
    pod_rel, uid = rn.make_pod_cgroupfs()
    t0 = time.monotonic()
    c = rn.run_container(what, pod_rel + "/crio-{id}", uid, hooks=hooks)
    took = time.monotonic() - t0
    assert c.values() == MIXED_VALUES
    watch_delay = rn.wait_watch(c)
    print(f"runc run {took:.3f} s; its watch unit active {watch_delay:.3f} s after runc run returned")
    return c


# ---------------------------------------------------------------------------------------
# the tests: cgroupfs driver


def test_units_installed_as_the_rpm_would(reapply_node: ReapplyNode) -> None:
    rn = reapply_node
    enabled = enabled_units(rn.units)
    assert enabled == ["mixed-cpus-hook-config.path", "mixed-cpus-hook-reconcile.timer",
                       "mixed-cpus-hook-sync.path", "mixed-cpus-hook.service"]
    assert rn.sd.systemctl("is-enabled", "mixed-cpus-hook-nri.service", check=False).stdout.strip() == "disabled"
    for unit in enabled:
        assert rn.sd.systemctl("is-enabled", unit).stdout.strip() == "enabled"
        assert rn.active(unit) == "active", unit
    assert rn.sd.failed_units() == []
    # The backstop fires within 30 s of the last run.
    show = rn.sd.systemctl("show", "-p", "TimersMonotonic", "mixed-cpus-hook-reconcile.timer").stdout
    assert "OnUnitInactiveUSec" in show and "30s" in show, show
    # After a reboot /run is empty: the start-up run found nothing and left no unit behind.
    assert rn.records() == [] and rn.watch_units() == []


def test_rewrite_undone_and_a_second_cycle_writes_nothing_more(reapply_node: ReapplyNode) -> None:
    rn = reapply_node
    c = started_cgroupfs(rn)
    rec = rn.record(c.id)
    assert os.readlink(rn.state("watch", c.id, "cpus")) == rec["cgroup"]["cpuset"] + "/cpuset.cpus"
    assert os.readlink(rn.state("watch", c.id, "quota")) == rec["cgroup"]["cpu"] + "/cpu.cfs_quota_us"
    assert os.readlink(rn.state("watch", c.id, "pod-quota")) == rec["pod_cgroup"]["cpu"] + "/cpu.cfs_quota_us"

    counts = []
    for cycle in range(2):
        with rn.node.watch([c.cpus, c.quota, c.pod_quota]) as ino:
            t0 = time.monotonic()
            rn.rewrite(c)
            took = wait_until(restored(c, MIXED_VALUES), RESTORE_TIMEOUT, "the mixed set back")
            assert took <= RESTORE_BAR, f"restored after {took:.3f} s"
            during = ino.modified()
            time.sleep(2.0)
            after = ino.modified()
        print(f"cycle {cycle}: restored {time.monotonic() - t0 - 2.0:.3f} s after runc update started;"
              f" IN_MODIFY during {len(during)}, in the next 2 s {len(after)}")
        counts.append({p: during.count(p) for p in (c.cpus, c.quota, c.pod_quota)})
        # runc's write and ours, on each file: no loop, nothing after.
        assert counts[-1] == {c.cpus: 2, c.quota: 2, c.pod_quota: 0}, during
        assert after == [], after
    assert counts[0] == counts[1]
    assert rn.watching(c)

    log = rn.journal()
    assert f"container {c.id}: reapplied (its cgroup was written, seen by its watch units): /sys/fs/cgroup/cpuset" in log, log
    assert f"cpuset.cpus: {EXCLUSIVE} -> {MIXED} (cpuset: exclusive {EXCLUSIVE} + shared {SHARED})" in log, log
    assert f"cpu.cfs_quota_us: {PERIOD} -> {2 * PERIOD} (quota: base {PERIOD} + 1 shared CPU(s)" in log, log
    assert f"container {c.id}: watching its cgroup ({', '.join(c.watches)})" in log, log


def test_two_rewrites_in_quick_succession_are_both_undone(reapply_node: ReapplyNode) -> None:
    rn = reapply_node
    c = started_cgroupfs(rn)
    # Two runc updates back to back: the cpuset, then the quota.
    rn.rewrite(c, cpus=EXCLUSIVE, quota=None)
    rn.rewrite(c, cpus=None, quota=PERIOD)
    took = wait_until(restored(c, MIXED_VALUES), RESTORE_TIMEOUT, "both rewrites undone")
    assert took <= RESTORE_BAR, took
    # Direct writes (what the systemd driver's two writes look like), at a range of spacings,
    # including inside the window where the first reapply is running.
    for gap in (0.0, 0.005, 0.02, 0.05, 0.08, 0.12, 0.2):
        time.sleep(0.4)
        write_file(c.cpus, EXCLUSIVE)
        time.sleep(gap)
        write_file(c.quota, str(PERIOD))
        t_second = time.monotonic()
        wait_until(restored(c, MIXED_VALUES), RESTORE_TIMEOUT, f"both writes {gap:g} s apart undone")
        assert time.monotonic() - t_second <= RESTORE_BAR, gap
    time.sleep(0.5)
    assert c.values() == MIXED_VALUES
    assert rn.watching(c)


def test_kubelet_restart_and_many_rewrites_hit_no_start_limit(reapply_node: ReapplyNode) -> None:
    """kubelet's restart rewrites every container at once; one container rewritten 8 times in
    3 s would be the 6th start within 10 s that fails a service with the default start limit."""
    rn = reapply_node
    containers = [started_cgroupfs(rn, f"k{i}") for i in range(4)]
    t0 = time.monotonic()
    for c in containers:
        rn.rewrite(c)
    for c in containers:
        wait_until(restored(c, MIXED_VALUES), 10.0, f"{c.id} restored after the kubelet restart")
    print(f"kubelet restart: {len(containers)} containers rewritten and restored in {time.monotonic() - t0:.3f} s")
    c = containers[0]
    for i in range(8):
        time.sleep(0.35)
        write_file(c.cpus, EXCLUSIVE)
        took = wait_until(restored(c, MIXED_VALUES), RESTORE_TIMEOUT, f"rewrite {i} undone")
        assert took <= RESTORE_BAR, (i, took)
    time.sleep(0.3)
    assert rn.sd.failed_units() == []
    assert all(rn.watching(x) for x in containers)


def test_a_writer_that_fights_fails_the_watch_and_the_timer_restarts_it(reapply_node: ReapplyNode) -> None:
    """TriggerLimitBurst= stops a fight; the periodic run restarts the failed watch and says so.

    The shipped limit is 50 triggers in 10 s; a drop-in lowers it to 4 here so that the test
    does not need to fight for long.
    """
    rn = reapply_node
    c = started_cgroupfs(rn)
    rn.sd.install_file("/etc/systemd/system/mixed-cpus-hook-watch@.path.d/test.conf",
                       "[Path]\nTriggerLimitIntervalSec=30s\nTriggerLimitBurst=4\n")
    rn.sd.systemctl("daemon-reload")
    rn.sd.systemctl("restart", c.watch)  # picks up the drop-in
    fights = 0
    while rn.active(c.watch) != "failed":
        fights += 1
        assert fights <= 20, "the watch never hit its trigger limit"
        write_file(c.cpus, EXCLUSIVE)
        wait_until(lambda: read_file(c.cpus) == MIXED or rn.active(c.watch) == "failed", RESTORE_TIMEOUT,
                   "the fought-over cpuset back, or the watch failed", 0.02)
        time.sleep(0.25)
    result = rn.sd.systemctl("show", "-p", "Result", "--value", c.watch).stdout.strip()
    assert result == "trigger-limit-hit", result
    assert fights == 5, fights  # 4 triggers allowed, the 5th refused
    time.sleep(0.5)
    assert read_file(c.cpus) == EXCLUSIVE  # not watched now: only the periodic run fixes it
    rn.sd.run(["rm", "-rf", "/etc/systemd/system/mixed-cpus-hook-watch@.path.d"])
    rn.sd.systemctl("daemon-reload")
    rn.sd.systemctl("start", "mixed-cpus-hook-reconcile.service")  # what the timer runs
    assert c.values() == MIXED_VALUES and rn.watching(c)
    log = rn.journal()
    assert f"container {c.id}: reapplied (periodic check): " in log
    assert f"container {c.id}: {c.watch} had failed (trigger limit hit? something keeps rewriting its cgroup); " \
        "started it again" in log, log
    assert rn.sd.failed_units() == []


def test_pod_quota_write_undone(reapply_node: ReapplyNode) -> None:
    rn = reapply_node
    c = started_cgroupfs(rn)
    write_file(c.pod_quota, str(2 * PERIOD))  # kubelet's value for the pod
    took = wait_until(restored(c, MIXED_VALUES), RESTORE_TIMEOUT, "the pod's quota raised again")
    assert took <= RESTORE_BAR, took
    rec = rn.record(c.id)
    assert (f"container {c.id}: reapplied (its cgroup was written, seen by its watch units): "
            f"{rec['pod_cgroup']['cpu']}/cpu.cfs_quota_us: {2 * PERIOD} -> {3 * PERIOD}") in rn.journal()


def test_container_deleted_leaves_no_watch_and_no_record(reapply_node: ReapplyNode) -> None:
    rn = reapply_node
    c = started_cgroupfs(rn)
    rn.runc.stop(c.id)
    assert rn.runc.cmd("delete", c.id).returncode == 0  # poststop: release
    assert rn.records() == []
    wait_until(lambda: rn.watch_units() == [], 10, "the watch unit stopped", 0.05)
    assert not os.path.exists(rn.state("watch", c.id))
    assert os.listdir(rn.state("pending")) == []
    assert rn.sd.failed_units() == []


def test_container_killed_without_poststop_is_collected(reapply_node: ReapplyNode) -> None:
    rn = reapply_node
    only_apply = {"createRuntime": [rn.runc.hooks["createRuntime"]]}
    c = started_cgroupfs(rn, "nopoststop", hooks=only_apply)
    pod_quota = c.pod_quota
    rn.runc.stop(c.id)
    assert rn.runc.cmd("delete", c.id).returncode == 0  # no release: the record stays
    assert rn.records() == [c.id]
    # What the timer runs every 30 s (started here rather than waited for).
    rn.sd.systemctl("start", "mixed-cpus-hook-reconcile.service")
    assert rn.records() == []
    assert read_file(pod_quota) == str(2 * PERIOD)  # its share of the pod's quota given back
    wait_until(lambda: rn.watch_units() == [], 10, "the watch unit stopped", 0.05)
    assert not os.path.exists(rn.state("watch", c.id))
    assert f"container {c.id}: cgroup gone, forgotten" in rn.journal()


def test_restarts_redo_nothing_and_the_start_up_run_restores_watches(reapply_node: ReapplyNode) -> None:
    rn = reapply_node
    c = started_cgroupfs(rn)
    files = [c.cpus, c.quota, c.pod_quota]
    # CRI-O restart: containers keep running, records and units persist; nothing to do.
    with rn.node.watch(files) as ino:
        rn.sd.systemctl("restart", "mixed-cpus-hook.service")  # also what a package upgrade does
        rn.sd.systemctl("start", "mixed-cpus-hook-reconcile.service")
        time.sleep(0.5)
        assert ino.modified() == []
    assert rn.records() == [c.id] and rn.watching(c)
    # Lost watches (an upgrade from a version without them, units stopped by hand): the
    # start-up run starts them again from the record.
    rn.sd.systemctl("stop", *c.watches)
    rn.sd.run(["rm", "-rf", f"{STATE_DIR}/watch/{c.id}"])
    rn.sd.systemctl("restart", "mixed-cpus-hook.service")
    assert rn.watching(c)
    assert os.path.islink(rn.state("watch", c.id, "cpus"))
    rn.rewrite(c)
    took = wait_until(restored(c, MIXED_VALUES), RESTORE_TIMEOUT, "the mixed set back")
    assert took <= RESTORE_BAR, took


def test_config_change_reconciles_every_container(reapply_node: ReapplyNode) -> None:
    rn = reapply_node
    c = started_cgroupfs(rn)
    rn.sd.systemctl("stop", *c.watches)  # only the configuration path unit may fix it now
    rn.rewrite(c)
    time.sleep(0.3)
    assert c.values() == (EXCLUSIVE, str(PERIOD), str(3 * PERIOD))
    rn.sd.install_file("/etc/mixed-cpus-hook/shared-cpus", f"# edited\n{SHARED}\n")
    wait_until(restored(c, MIXED_VALUES), RESTORE_TIMEOUT, "the configuration's reconcile")
    assert f"container {c.id}: reapplied (configuration or shared CPUs changed): /sys/fs/cgroup/cpuset" in rn.journal()
    # ... whose full sync also started the stopped watches again.
    wait_until(lambda: rn.watching(c), 10, "the full sync restarting the watches", 0.05)


# ---------------------------------------------------------------------------------------
# systemd driver


def test_systemd_driver_daemon_reload_and_rewrite_undone(reapply_node_systemd: ReapplyNode) -> None:
    rn = reapply_node_systemd
    slice_name, uid = rn.make_pod_systemd(quota_percent=200)
    cid = rn.runc.new_id("sd")
    proc = rn.runc.run(rn.runc.bundle(cid, f"{slice_name}:crio:{cid}", annotations("app", uid), cpus=EXCLUSIVE,
                                      quota=PERIOD, period=PERIOD), cid)
    assert proc.returncode == 0, proc.stdout
    c = rn.container(cid)
    assert c.cpus.endswith(f"/kubepods.slice/{slice_name}/crio-{cid}.scope/cpuset.cpus"), c.cpus
    assert c.values() == MIXED_VALUES
    rn.wait_watch(c)

    # daemon-reload re-applies the scope's and the slice's CPUQuota= (kubelet's values) ...
    with rn.node.watch([c.quota, c.pod_quota]) as ino:
        rn.sd.systemctl("daemon-reload")
        reverted = ino.modified()
        took = wait_until(restored(c, MIXED_VALUES), RESTORE_TIMEOUT, "quotas raised again after daemon-reload")
    assert c.quota in reverted, reverted  # systemd did write kubelet's value back
    assert took <= RESTORE_BAR, took
    # ... and so does runc update (unit properties through systemd, then the files).
    rn.rewrite(c)
    took = wait_until(restored(c, MIXED_VALUES), RESTORE_TIMEOUT, "the mixed set back")
    assert took <= RESTORE_BAR, took
    time.sleep(0.5)
    assert c.values() == MIXED_VALUES and rn.watching(c)
    assert rn.sd.failed_units() == []
