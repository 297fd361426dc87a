"""The NRI plugin for real: containerd 1.7.24 (Debian trixie) and 2.1.x (Debian sid) with NRI, driven
over CRI as kubelet does (every test runs once per containerd version).

cgroup v1 on this machine: 2 CPUs, exclusive "1" (kubelet's cpuset for the container), shared
"0". One private containerd for the module (tests/integration/containerd.py: own root, state,
sockets, runc with the cgroupfs driver, images imported from busybox-static); per test a
kubelet-like pod cgroup ``<test top>/kubepods/pod<uid>`` with a CFS quota of 200000 made first,
then RunPodSandbox / CreateContainer (cpuset "1", quota 100000, period 100000) /
StartContainer / UpdateContainerResources over CRI (tests/integration/cri.py), and the plugin
``mixed-cpus-hook --config CFG nri --socket <containerd's NRI socket>`` as a child process.

Mixed means: the container's cpuset.cpus "0-1", its quota 200000 (+1 shared CPU x period), its
pod's 300000, PID 1 inside on Cpus_allowed_list "0-1", OPENSHIFT_ISOLATED_CPUS=1 and
OPENSHIFT_SHARED_CPUS=0 in its environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Callable, Dict, List

import pytest

try:
    from . import containerd as ctd_mod
    from .cri import CriError
    from .cri_kube import PREFIX, Kube, Plugin, Watcher
    from .cri_kube import wait_for as cri_wait_for
except ImportError:  # collected as top-level modules (rootdir-relative)
    import containerd as ctd_mod  # type: ignore[no-redef]
    from cri import CriError  # type: ignore[no-redef]
    from cri_kube import PREFIX, Kube, Plugin, Watcher  # type: ignore[no-redef]
    from cri_kube import wait_for as cri_wait_for  # type: ignore[no-redef]

pytestmark = [pytest.mark.integration]

EXCLUSIVE, SHARED, MIXED = "1", "0", "0-1"
PLAIN = {"cpus": EXCLUSIVE, "quota": 100000, "pod_quota": 200000}
MIXED_VALUES = {"cpus": MIXED, "quota": 200000, "pod_quota": 300000}
MIXED_INSIDE = {"Cpus_allowed_list": MIXED, "OPENSHIFT_ISOLATED_CPUS": EXCLUSIVE, "OPENSHIFT_SHARED_CPUS": SHARED}
BUSYBOX = "/bin/busybox"
SETTLE = 15.0  # seconds to wait for an asynchronous change (Synchronize, reconnect)
RECONCILE_INTERVAL = 1.0  # the plugin's periodic reconcile (default 10 s), so that tests see it act


def require_prerequisites() -> None:
    """Skip only where a prerequisite cannot exist here; fail when an install step is missing."""
    if os.geteuid() != 0:
        pytest.skip("needs root: runs containerd and creates cgroups")
    if not (os.path.isfile("/sys/fs/cgroup/cpuset/cpuset.cpus") and os.path.isfile("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")):
        pytest.skip("needs cgroup v1 cpuset and cpu hierarchies (the v2 scenarios run in test_nri_v2_vm.py)")
    with open("/sys/devices/system/cpu/online", encoding="ascii") as f:
        online = f.read().strip()
    if not (online.startswith("0-") or online.startswith("0,1")):
        pytest.skip(f"needs CPUs 0 (shared) and 1 (exclusive) online; online: {online}")
    if shutil.which("runc") is None:
        pytest.fail("runc is not installed (Debian package runc; scripts/install-deps.sh)")
    with open(BUSYBOX, "rb") as f:
        if b"/ld-linux" in f.read(4096):
            pytest.fail(f"{BUSYBOX} is dynamically linked (Debian package busybox-static)")
    try:
        import grpc  # noqa: F401, PLC0415
        import grpc_tools  # noqa: F401, PLC0415
    except ImportError as exc:
        pytest.fail(f"{exc}: the test venv needs grpcio and grpcio-tools (make venv)")


@pytest.fixture(scope="module", params=ctd_mod.VERSIONS, ids=[f"containerd{v}" for v in ctd_mod.VERSIONS])
def ctd(request):
    """One private containerd per version for the module (every test runs on 1.7.24 and 2.1.x)."""
    require_prerequisites()
    with ctd_mod.running(request.param) as c:
        yield c


class NriWorld:
    """One test: kubelet's calls (``kube``), plugins started on demand, the records they keep."""

    def __init__(self, ctd: ctd_mod.Containerd, node) -> None:
        self.ctd, self.node = ctd, node
        self.kube = Kube(ctd, node.top, os.path.join(node.tmp, "pod-logs"))
        self.plugins: List[Plugin] = []

    def plugin(self, failure_policy: str = "fail", allowed: str = "[mixed-ns]", start: bool = True) -> Plugin:
        path = os.path.join(self.node.tmp, f"nri-config-{len(self.plugins)}.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("# written by tests/integration/test_nri_containerd.py\n"
                    f'shared_cpus: "{SHARED}"\nstate_dir: {self.node.state_dir}\n'
                    f"failure_policy: {failure_policy}\nallowed_namespaces: {allowed}\n"
                    f"kubelet_state_file: {self.node.tmp}/no-kubelet/cpu_manager_state\n")
        p = Plugin(path, self.ctd.nri_sock, os.path.join(self.node.tmp, f"plugin-{len(self.plugins)}.log"),
                   self.ctd, env={"MIXED_CPUS_HOOK_CACHE_DIR": self.node.cache_dir},
                   reconcile_interval=RECONCILE_INTERVAL)
        self.plugins.append(p)
        if start:
            p.start()
        return p

    def records(self) -> List[str]:
        return self.node.records()

    def cleanup(self) -> List[str]:
        problems = []
        if self.ctd.proc is None:  # a test stopped containerd and failed before starting it again
            self.ctd.start()
        problems += self.kube.cleanup()
        for p in self.plugins:
            code = p.stop()
            if code not in (0, None, -9):
                problems.append(f"plugin exited {code} on SIGTERM:\n{p.log()}")
        return problems


@pytest.fixture
def nri(ctd, mch_node):
    world = NriWorld(ctd, mch_node)
    yield world
    problems = world.cleanup()
    assert not problems, f"cleanup: {problems}"


def wait_for(read: Callable[[], object], expected: object, timeout: float = SETTLE) -> object:
    return cri_wait_for(read, expected, timeout)


def assert_mixed(nri: NriWorld, pod, cid: str, pod_quota: int = 300000) -> None:
    values = nri.kube.values(pod, cid)
    assert values == dict(MIXED_VALUES, pod_quota=pod_quota), f"{cid[:12]} cgroups: {values}"
    inside = nri.kube.inside(cid)
    assert inside["Cpus_allowed_list"] == MIXED, f"inside {cid[:12]}: {inside}"
    assert cid in nri.records(), f"no record for {cid[:12]}: {nri.records()}"
    assert nri.node.record(cid).get("mode") == "nri", nri.node.record(cid)


def rewrite_and_watch(nri: NriWorld, pod, cid: str, updates: List[Dict[str, object]],
                      settle: float = 0.0) -> Dict[str, Watcher]:
    """kubelet's UpdateContainerResources calls, with the container's cpuset and quota files watched
    (and for ``settle`` seconds after them: what the plugin's periodic reconcile writes shows too)."""
    cg = {"cpus": nri.kube.cgroup(pod, cid, "cpuset") + "/cpuset.cpus", "quota": nri.kube.quota_file(pod, cid)}
    with Watcher(cg["cpus"], pause=0.0005) as wc, Watcher(cg["quota"], pause=0.0005) as wq:
        for u in updates:
            nri.kube.update(cid, **u)
        time.sleep(settle)
    return {"cpus": wc, "quota": wq}


# ---------------------------------------------------------------------------------------------
# the harness itself: containerd and CRI without the plugin


def test_without_plugin_the_container_gets_kubelets_cpuset(nri):
    pod = nri.kube.pod()
    cid = nri.kube.container(pod)
    assert nri.kube.values(pod, cid) == PLAIN
    assert nri.kube.inside(cid) == {"Cpus_allowed_list": EXCLUSIVE}
    assert nri.kube.cri.status(cid).status.state == 1  # CONTAINER_RUNNING
    assert nri.records() == []


# ---------------------------------------------------------------------------------------------
# CreateContainer, UpdateContainer, Stop/Remove


def test_created_mixed_with_env_and_quotas_sibling_untouched(nri):
    nri.plugin()
    pod = nri.kube.pod(asks="app")
    cid = nri.kube.container(pod, "app")
    assert_mixed(nri, pod, cid)
    assert nri.kube.inside(cid) == MIXED_INSIDE
    # A sibling in the same pod that did not ask: kubelet's values, no env, no record.
    side = nri.kube.container(pod, "side", cpus=SHARED, quota=50000)
    assert nri.kube.values(pod, side) == {"cpus": SHARED, "quota": 50000, "pod_quota": 300000}
    assert nri.kube.inside(side) == {"Cpus_allowed_list": SHARED}
    assert nri.records() == [cid]


def test_kubelet_update_never_leaves_the_exclusive_only_set(nri):
    nri.plugin()
    pod = nri.kube.pod()
    cid = nri.kube.container(pod)
    assert_mixed(nri, pod, cid)
    # The CPU manager's rewrite after a kubelet restart: cpuset only, three times; then two
    # rounds of the plugin's periodic reconcile.
    w = rewrite_and_watch(nri, pod, cid, [{"cpus": EXCLUSIVE}] * 3, settle=2.5 * RECONCILE_INTERVAL)
    assert w["cpus"].events >= 3, f"runc wrote cpuset.cpus {w['cpus'].events} times for 3 updates"
    assert w["cpus"].values() == {MIXED}, f"cpuset.cpus seen: {w['cpus'].seen} after events {w['cpus'].after_event}"
    assert w["quota"].values() == {"200000"}, f"cfs_quota_us seen: {w['quota'].seen}"
    assert_mixed(nri, pod, cid)
    # An in-place resize: kubelet's new quota is the new base, raised by 1 shared CPU x period.
    w = rewrite_and_watch(nri, pod, cid, [{"cpus": EXCLUSIVE, "quota": 150000, "period": 100000}])
    assert w["cpus"].values() == {MIXED}, w["cpus"].seen
    values = nri.kube.values(pod, cid)
    assert (values["cpus"], values["quota"]) == (MIXED, 250000), values
    assert nri.kube.inside(cid)["Cpus_allowed_list"] == MIXED


def test_stop_and_remove_give_the_pods_share_back(nri):
    nri.plugin()
    pod = nri.kube.pod()
    cid = nri.kube.container(pod)
    assert_mixed(nri, pod, cid)
    nri.kube.cri.stop(cid, timeout=0)
    assert wait_for(pod.quota, 200000, 5.0) == 200000
    nri.kube.cri.remove(cid)
    assert wait_for(nri.records, [], 5.0) == []
    assert pod.quota() == 200000
    # The pod's next container is raised again, once.
    again = nri.kube.container(pod)
    assert_mixed(nri, pod, again)


# ---------------------------------------------------------------------------------------------
# the plugin and the runtime coming and going


def test_plugin_started_after_the_container_synchronizes_it(nri):
    pod = nri.kube.pod()
    cid = nri.kube.container(pod)
    assert nri.kube.values(pod, cid) == PLAIN
    nri.plugin()  # Synchronize shows the running container: brought to the mixed set
    assert wait_for(lambda: nri.kube.values(pod, cid), MIXED_VALUES) == MIXED_VALUES
    assert_mixed(nri, pod, cid)
    w = rewrite_and_watch(nri, pod, cid, [{"cpus": EXCLUSIVE}])
    assert w["cpus"].values() == {MIXED}, w["cpus"].seen


def test_containerd_restart_plugin_reconnects(nri):
    plugin = nri.plugin()
    pod = nri.kube.pod()
    cid = nri.kube.container(pod)
    assert_mixed(nri, pod, cid)
    mark = nri.ctd.log_mark()
    nri.ctd.restart()
    plugin.wait_synchronized(mark)  # the plugin's reconnect, with backoff
    assert plugin.running()
    assert_mixed(nri, pod, cid)  # nothing lost, nothing raised twice
    w = rewrite_and_watch(nri, pod, cid, [{"cpus": EXCLUSIVE}])
    assert w["cpus"].values() == {MIXED}, w["cpus"].seen
    release(nri, cid)  # kubelet gives CPU 1 to the next container once this one is gone
    pod2 = nri.kube.pod(name="du2")
    cid2 = nri.kube.container(pod2)
    assert_mixed(nri, pod2, cid2)
    assert nri.kube.inside(cid2) == MIXED_INSIDE


def test_plugin_killed_and_restarted_resyncs(nri):
    plugin = nri.plugin()
    pod = nri.kube.pod()
    cid = nri.kube.container(pod)
    assert_mixed(nri, pod, cid)
    assert plugin.kill() == -9
    # With no plugin, kubelet's rewrite reaches the cgroup as it is (and the watcher sees it).
    w = rewrite_and_watch(nri, pod, cid, [{"cpus": EXCLUSIVE}])
    assert EXCLUSIVE in w["cpus"].values(), w["cpus"].seen
    assert nri.kube.values(pod, cid)["cpus"] == EXCLUSIVE
    plugin.start()  # Synchronize + the records: back to the mixed set, the pod raised only once
    assert wait_for(lambda: nri.kube.values(pod, cid), MIXED_VALUES) == MIXED_VALUES
    assert_mixed(nri, pod, cid)
    release(nri, cid)
    pod2 = nri.kube.pod(name="du2")
    cid2 = nri.kube.container(pod2)
    assert_mixed(nri, pod2, cid2)


def tracer_of(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return int(next(line for line in f if line.startswith("TracerPid:")).split()[1])


def test_plugin_killed_before_it_writes_its_answers_records_leaves_them_to_its_restart(nri):
    """A creation's records are journaled in the state lock's file before the answer and written
    after it. The plugin is killed (SIGKILL, by strace at its first rename after it is attached: the
    first record file of the creation's answer) with the container created mixed and no record file
    written; its restart does the journal before anything else: the container is tracked, its pod
    raised once, and its release gives everything back."""
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (scripts/install-deps.sh installs it)")
    plugin = nri.plugin()
    pod = nri.kube.pod()
    assert plugin.proc is not None
    pid = plugin.proc.pid
    tracer = subprocess.Popen(["strace", "-qq", "-o", "/dev/null", "-p", str(pid), "-e", "trace=rename,renameat,renameat2",
                               "-e", "inject=rename,renameat,renameat2:signal=KILL:when=1"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: tracer_of(pid) == tracer.pid, True, 10.0), "strace did not attach"
        cid = nri.kube.container(pod)
        assert plugin.proc.wait(timeout=SETTLE) == -9, plugin.log()
    finally:
        if tracer.poll() is None:
            tracer.kill()
        tracer.wait(timeout=10)
    lock = os.path.join(nri.node.state_dir, "lock")
    with open(lock, "rb") as f:
        journal = f.read()
    assert journal.startswith(b"mixed-cpus-hook journal 1\n") and f"save containers {cid} ".encode() in journal
    assert nri.records() == [], "a record file was written before the kill"
    assert nri.kube.values(pod, cid) == MIXED_VALUES  # the runtime had the answer
    plugin.start()  # Synchronize: the journal first, then the container is tracked (not admitted again)
    assert wait_for(lambda: cid in nri.records(), True, SETTLE) is True
    assert os.path.getsize(lock) == 0
    assert_mixed(nri, pod, cid)  # its pod raised once
    release(nri, cid)
    assert pod.quota() == PLAIN["pod_quota"]


def release(nri: NriWorld, cid: str) -> None:
    """Stop and remove a container, as kubelet does before it hands its CPUs to another."""
    nri.kube.cri.stop(cid, timeout=0)
    nri.kube.cri.remove(cid)
    assert wait_for(lambda: cid in nri.records(), False, 5.0) is False


def test_a_cpu_another_running_container_holds_is_refused(nri):
    """Without kubelet's checkpoint, a cpuset naming a CPU another tracked container holds is not
    kubelet's assignment (kubelet never gives one CPU to two containers): refused, nothing written."""
    nri.plugin()
    pod = nri.kube.pod()
    cid = nri.kube.container(pod)
    pod2 = nri.kube.pod(name="du2")
    with pytest.raises(CriError) as err:
        nri.kube.container(pod2)
    assert f"holds CPUs already exclusive to other containers (1 by {cid})" in str(err.value)
    assert pod2.quota() == 200000 and nri.records() == [cid]
    assert_mixed(nri, pod, cid)


# ---------------------------------------------------------------------------------------------
# failure policy

FAILURES = [
    # id, pod namespace, annotation value, allowed_namespaces, what a "fail" error says
    ("bad-annotation", "mixed-ns", "yes", "[mixed-ns]", f"annotation {PREFIX}/app: value 'yes' is not 'enable'"),
    ("refused-namespace", "other-ns", "enable", "[mixed-ns]", "namespace 'other-ns' may not ask for mixed CPUs"),
]


@pytest.mark.parametrize("policy", ["fail", "ignore"])
@pytest.mark.parametrize("namespace,value,allowed,message", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_failure_policy(nri, policy, namespace, value, allowed, message):
    plugin = nri.plugin(failure_policy=policy, allowed=allowed)
    pod = nri.kube.pod(namespace=namespace, value=value)
    if policy == "fail":
        with pytest.raises(CriError) as err:
            nri.kube.container(pod)
        assert message in err.value.details, err.value.details
        assert pod.quota() == 200000
    else:
        cid = nri.kube.container(pod)
        assert nri.kube.values(pod, cid) == PLAIN
        assert nri.kube.inside(cid) == {"Cpus_allowed_list": EXCLUSIVE}
    assert nri.records() == []
    assert plugin.running(), plugin.log()
