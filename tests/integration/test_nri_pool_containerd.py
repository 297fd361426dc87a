"""The pool (shared_cpus: pool) for real: containerd 1.7.24 (Debian trixie) and 2.1.9 (Debian sid) with
CDI, driven over CRI as kubelet does, on this 2-CPU cgroup v1 machine (every test runs once per
containerd version).

The CPU DRA driver's side is played by the test (pool_kube.Claims): its prepare step writes a
CDI spec per claim (kind ``dra.k8s.io/cpu``, device ``claim-<uid>``, the only edit
``DRA_CPUSET_<uid>=<cpulist>``, cdiVersion 0.8.0) into containerd's private CDI spec dir, and
kubelet's CreateContainer names the device in ContainerConfig.CDI_devices; kubelet's CPU
manager is ``none`` (no cpuset in CRI; CPU shares 2 without a CPU request, 512 with 0.5 CPU).
The plugin runs with ``shared_cpus: pool`` and ``exclusive_source: dra`` and places every
container; the pool is 0-1 less the claims.

A ``DRA_CPUSET_`` variable the pod spec writes itself (CRI's envs, no CDI device) is no claim: no spec of
the plugin's ``cdi_spec_dirs`` (containerd's own spec dir here) holds it, and the container is refused.

Also here: which CDI spec versions each containerd accepts (the driver writes 0.8.0), and what
NRI does when a second plugin sets the cpuset too (the CPU DRA driver's own NRI half beside this
plugin): containerd/nri's result.go refuses the container ("plugins ... both tried to set CPU
pinning").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from typing import List

import pytest

try:
    from . import containerd as ctd_mod
    from .cri import CriError
    from .cri_kube import Kube, Plugin, wait_for
    from .helpers import hook_executable
    from .pool_kube import Claims, PoolKube, PoolWatcher, Window, find_violations, parse_cpus, spec_doc
except ImportError:  # collected as top-level modules (rootdir-relative)
    import containerd as ctd_mod  # type: ignore[no-redef]
    from cri import CriError  # type: ignore[no-redef]
    from cri_kube import Kube, Plugin, wait_for  # type: ignore[no-redef]
    from helpers import hook_executable  # type: ignore[no-redef]
    from pool_kube import (Claims, PoolKube, PoolWatcher, Window, find_violations,  # type: ignore[no-redef]
                           parse_cpus, spec_doc)

pytestmark = [pytest.mark.integration]

BUSYBOX = "/bin/busybox"
SETTLE = 15.0
SHARES_HALF_CPU = 512  # kubelet's shares for a request of 0.5 CPU: a mixed claim container


def require_prerequisites() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: runs containerd and creates cgroups")
    if not os.path.isfile("/sys/fs/cgroup/cpuset/cpuset.cpus"):
        pytest.skip("needs the cgroup v1 cpuset hierarchy (the v2 scenarios run in test_nri_pool_v2_vm.py)")
    with open("/sys/devices/system/cpu/online", encoding="ascii") as f:
        online = f.read().strip()
    if online != "0-1":
        pytest.skip(f"the scenario is written for CPUs 0-1 (the pool 0-1, a claim of CPU 1); online: {online}")
    with open(BUSYBOX, "rb") as f:
        if b"/ld-linux" in f.read(4096):
            pytest.fail(f"{BUSYBOX} is dynamically linked (Debian package busybox-static)")


@pytest.fixture(scope="module", params=ctd_mod.VERSIONS, ids=[f"containerd{v}" for v in ctd_mod.VERSIONS])
def ctd(request):
    """One private containerd per version, with CDI on and its own spec dir."""
    require_prerequisites()
    with ctd_mod.running(request.param, cdi=True) as c:
        yield c


class PoolWorld(PoolKube):
    """One test: kubelet's calls with the driver's claims (pool_kube.PoolKube), plugins started on demand."""

    def __init__(self, ctd: ctd_mod.Containerd, node) -> None:
        super().__init__(Kube(ctd, node.top, os.path.join(node.tmp, "pod-logs")), Claims(ctd.cdi_dir))
        self.ctd, self.node = ctd, node
        self.plugins: List[Plugin] = []

    def plugin(self, extra: str = "", failure_policy: str = "fail") -> Plugin:
        path = os.path.join(self.node.tmp, f"pool-config-{len(self.plugins)}.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("# written by tests/integration/test_nri_pool_containerd.py\n"
                    "shared_cpus: pool\nexclusive_source: dra\n"
                    f"state_dir: {self.node.state_dir}\nfailure_policy: {failure_policy}\n"
                    "allowed_namespaces: [mixed-ns]\n"
                    f"cdi_spec_dirs: [{json.dumps(self.ctd.cdi_dir)}]\n"  # where containerd reads them
                    f"kubelet_state_file: {self.node.tmp}/no-kubelet/cpu_manager_state\n{extra}")
        p = Plugin(path, self.ctd.nri_sock, os.path.join(self.node.tmp, f"plugin-{len(self.plugins)}.log"),
                   self.ctd, env={"MIXED_CPUS_HOOK_CACHE_DIR": self.node.cache_dir})
        self.plugins.append(p)
        p.start()
        return p

    def cleanup(self) -> List[str]:
        problems = self.kube.cleanup()
        for p in self.plugins:
            code = p.stop()
            if code not in (0, None, -9):
                problems.append(f"plugin exited {code} on SIGTERM:\n{p.log()}")
        self.claims.cleanup()
        return problems


@pytest.fixture
def pool(ctd, mch_node):
    world = PoolWorld(ctd, mch_node)
    yield world
    problems = world.cleanup()
    assert not problems, f"cleanup: {problems}"


def claim_cycle(pool: PoolWorld, watcher: PoolWatcher, std_pod, std: str, name: str, shares: int):
    """A claimant of CPU 1 created, started, stopped and removed while the standard container ``std``
    runs: the values seen at each step, and the claim's window for the invariant."""
    claim = pool.claims.prepare("1")
    pod = pool.pod(name)
    cid = pool.container(pod, name, claims=(claim,), shares=shares, start=False)
    seen = {"std_after_create": pool.cpus(std_pod, std), "std_allowed_after_create": pool.allowed(std)}
    start = time.monotonic()
    pool.kube.cri.start(cid)
    pool.watch(watcher, name, pod, cid)
    seen.update(cpus=pool.cpus(pod, cid), inside=pool.inside(cid))
    end = time.monotonic()
    pool.release(cid)
    watcher.remove(name)
    pool.claims.unprepare(claim)
    seen["std_after_release"] = wait_for(lambda: pool.cpus(std_pod, std), "0-1", SETTLE)
    seen["std_allowed_after_release"] = pool.allowed(std)
    return claim, seen, Window(name, parse_cpus("1"), start, end)


def test_claims_shrink_the_pool_before_the_claimant_starts(pool):
    """The issue's walk-through on 2 CPUs: a standard container on the pool 0-1; a claim of CPU 1 with
    no CPU request: the standard container is on 0 when CreateContainer returns (before the claimant
    starts), the claimant on 1; stop and remove: back on 0-1; a mixed claim container (claim CPU 1,
    shares 512): 0-1 with OPENSHIFT_ISOLATED_CPUS=1, the standard container on 0; it goes: 0-1.
    A watcher reads every container's cpuset.cpus meanwhile: no claimed CPU elsewhere, ever."""
    plugin = pool.plugin()
    std_pod = pool.pod("std")
    std = pool.container(std_pod, "std")
    assert pool.cpus(std_pod, std) == "0-1"
    assert pool.inside(std)["Cpus_allowed_list"] == "0-1"
    with PoolWatcher() as w:
        pool.watch(w, "std", std_pod, std)
        claim, seen, window = claim_cycle(pool, w, std_pod, std, "claimant", shares=2)  # no CPU request
        claim2, seen2, window2 = claim_cycle(pool, w, std_pod, std, "mixed", shares=SHARES_HALF_CPU)
        until = time.monotonic()
    violations = find_violations(w.transitions, [window, window2], until)
    print(f"\n{pool.ctd.version}: claim-only {seen}\nmixed {seen2}\n"
          f"watcher: {w.samples} rounds, {w.writes} writes, std's values {w.summary()['std']}")
    for step in (seen, seen2):
        assert step["std_after_create"] == "0" and step["std_allowed_after_create"] == "0", (step, plugin.log())
        assert step["std_after_release"] == "0-1" and step["std_allowed_after_release"] == "0-1", step
    assert seen["cpus"] == "1", seen
    assert seen["inside"] == {"Cpus_allowed_list": "1", f"DRA_CPUSET_{claim.uid}": "1"}, seen
    assert seen2["cpus"] == "0-1", seen2
    assert seen2["inside"] == {"Cpus_allowed_list": "0-1", f"DRA_CPUSET_{claim2.uid}": "1",
                               "OPENSHIFT_ISOLATED_CPUS": "1"}, seen2
    assert violations == [], violations
    assert w.samples > 100 and w.writes["std"] >= 4, (w.samples, w.writes)
    assert plugin.running(), plugin.log()


def test_a_claim_the_pod_spec_wrote_itself_is_refused(pool):
    """The environment NRI sends holds the pod author's variables too (CRI ContainerConfig.envs): a
    ``DRA_CPUSET_<uid>=1`` written there, with no CDI device, is in no CDI spec: under failure_policy fail
    CreateContainer fails naming the variable and the spec dir, and no CPU leaves the pool (the standard
    container stays on 0-1). A claim the driver prepared (its spec, the device named) still works; the same
    claim with the pod spec setting its variable to other CPUs is refused (containerd sends the pod's entry)."""
    plugin = pool.plugin()
    std_pod = pool.pod("std")
    std = pool.container(std_pod, "std")
    forged_pod = pool.pod("forged")
    uid = str(uuid.uuid4())
    with pytest.raises(CriError) as err:
        pool.container(forged_pod, "forged", envs={f"DRA_CPUSET_{uid}": "1"})
    print(f"\n{pool.ctd.version}: {err.value.details}")
    refusal = f"DRA_CPUSET_{uid} is not in any CDI spec under {pool.ctd.cdi_dir}: not the CPU DRA driver's claim"
    assert refusal in err.value.details, err.value
    assert wait_for(lambda: refusal in plugin.log(), True, SETTLE), plugin.log()  # logged once answered
    assert (pool.cpus(std_pod, std), pool.allowed(std)) == ("0-1", "0-1")
    assert pool.kube.cri.containers(forged_pod.id) == [], "the refused container was left behind"
    # the driver's claim of the same CPU: placed, the standard container moved off it
    claim = pool.claims.prepare("1")
    cid = pool.container(forged_pod, "claimant", claims=(claim,))
    assert (pool.cpus(forged_pod, cid), pool.cpus(std_pod, std), pool.allowed(std)) == ("1", "0", "0")
    assert pool.inside(cid) == {"Cpus_allowed_list": "1", claim.env.split("=")[0]: "1"}
    pool.release(cid)
    assert wait_for(lambda: pool.cpus(std_pod, std), "0-1", SETTLE) == "0-1"
    # the pod spec sets the claim's own variable to more CPUs, beside the claim's device: the environment
    # containerd sends holds the pod's entry, which no spec holds: refused, nothing moved
    name = claim.env.split("=")[0]
    with pytest.raises(CriError) as err:
        pool.container(forged_pod, "override", claims=(claim,), envs={name: "0-1"})
    print(f"{pool.ctd.version}: {err.value.details}")
    assert f"{name}=0-1 is not in any CDI spec under {pool.ctd.cdi_dir} (a spec holds {claim.env})" \
        in err.value.details, err.value
    assert (pool.cpus(std_pod, std), pool.allowed(std)) == ("0-1", "0-1")
    pool.claims.unprepare(claim)
    assert wait_for(lambda: pool.cpus(std_pod, std), "0-1", SETTLE) == "0-1"
    # `check` sees the same directory as containerd's config, and the driver's spec gone
    found = check_finding(pool, "cdi-specs")
    assert found["status"] == "ok" and f"{pool.ctd.cdi_dir}: 0 spec file(s)" in found["message"], found
    assert plugin.running(), plugin.log()


class Blocker:
    """A child cgroup holding CPU 1 inside a container's cpuset cgroup (cgroup v1): its parent cannot
    shrink below it (EBUSY), so runc's update, and anybody's write, that takes CPU 1 away fails."""

    def __init__(self, container_cpuset_dir: str) -> None:
        self.path = os.path.join(container_cpuset_dir, "mch-blocker")

    def __enter__(self) -> "Blocker":
        os.mkdir(self.path)
        for name, value in (("cpuset.cpus", "1"), ("cpuset.mems", "0")):
            with open(os.path.join(self.path, name), "w", encoding="ascii") as f:
                f.write(value)
        return self

    def remove(self) -> None:
        if os.path.isdir(self.path):
            os.rmdir(self.path)

    def __exit__(self, *exc) -> None:
        self.remove()


def test_an_update_containerd_could_not_apply_is_redone_or_the_start_fails(pool):
    """containerd logs an update of the CreateContainer reply it cannot apply and creates the claimant
    anyway: at the claimant's StartContainer the plugin reads the others' cgroups back and writes
    what did not land; when that fails too, the start fails (failure_policy fail)."""
    plugin = pool.plugin()
    std_pod = pool.pod("std")
    std = pool.container(std_pod, "std")
    std_dir = pool.kube.cgroup(std_pod, std, "cpuset")
    mark = pool.ctd.log_mark()
    with Blocker(std_dir) as blocker:
        claim = pool.claims.prepare("1")
        claimant_pod = pool.pod("claimant")
        claimant = pool.container(claimant_pod, "claimant", claims=(claim,), start=False)
        not_applied = pool.cpus(std_pod, std)
        blocker.remove()  # the write can land now: the plugin's check at the start redoes it
        pool.kube.cri.start(claimant)
        redone = pool.cpus(std_pod, std)
    ctd_log = pool.ctd.log_since(mark)
    assert not_applied == "0-1", not_applied
    assert redone == "0", (redone, plugin.log())
    # the plugin logs a request's lines once its answer is sent: the line may come just after the start
    assert wait_for(lambda: "had not applied the update that took claimed CPUs from it" in plugin.log(), True,
                    SETTLE), plugin.log()
    pool.release(claimant)
    pool.claims.unprepare(claim)
    assert wait_for(lambda: pool.cpus(std_pod, std), "0-1", SETTLE) == "0-1"
    # again, and this time the CPU cannot leave the standard container: the claimant may not start
    with Blocker(std_dir):
        claim2 = pool.claims.prepare("1")
        claimant2 = pool.container(pool.pod("claimant2"), "claimant", claims=(claim2,), start=False)
        with pytest.raises(CriError) as err:
            pool.kube.cri.start(claimant2)
        state = pool.kube.cri.status(claimant2).status.state
        stuck = pool.cpus(std_pod, std)
    print(f"\n{pool.ctd.version}: containerd's log of the update it could not apply: "
          f"{[line for line in ctd_log.splitlines() if 'update' in line.lower()][:3]}\n"
          f"StartContainer refused: {err.value}\nclaimant state after: {state}")
    assert "exclusivity cannot hold" in err.value.details, err.value
    assert state == 2, state  # CONTAINER_EXITED: kubelet restarts it (back-off) until exclusivity holds
    assert stuck == "0-1"
    assert plugin.running(), plugin.log()
    pool.release(claimant2)
    pool.claims.unprepare(claim2)
    assert wait_for(lambda: pool.cpus(std_pod, std), "0-1", SETTLE) == "0-1"


CDI_VERSIONS = ("0.3.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "1.0.0", "1.1.0")
# What each containerd accepts (Debian's builds: trixie's 1.7.24 with CDI 0.8, sid's 2.1.9 with CDI 1.0).
ACCEPTED = {"1.7": ("0.3.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0"),
            "2.1": ("0.3.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0")}


def test_cdi_spec_versions_each_containerd_accepts(pool):
    """A claim's spec written with each cdiVersion, one at a time: which ones containerd injects (the
    CPU DRA driver writes 0.8.0)."""
    pod = pool.pod("cdi")
    outcome = {}
    for version in CDI_VERSIONS:
        claim = pool.claims.prepare("1", version=version)
        try:
            cid = pool.container(pod, "v" + version.replace(".", "-"), claims=(claim,), start=False)
        except CriError as exc:
            outcome[version] = exc.details
        else:
            env = [e for e in pool.kube.cri.status(cid, verbose=True).info.get("info", "").split('"')
                   if e.startswith("DRA_CPUSET_")]
            outcome[version] = "ok" if env == [claim.env] else f"created, env {env}"
            pool.kube.cri.remove(cid)
        pool.claims.unprepare(claim)
    print(f"\ncontainerd {pool.ctd.version}: " + "; ".join(f"{v}: {o[:160]}" for v, o in outcome.items()))
    accepted = tuple(v for v, o in outcome.items() if o == "ok")
    assert accepted == ACCEPTED[pool.ctd.version], outcome
    assert spec_doc("u", "1")["cdiVersion"] in accepted


CLASH_PLUGIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nri_clash_plugin.py")


def test_a_second_plugin_that_sets_the_cpuset_makes_nri_refuse_the_container(pool):
    """Beside the CPU DRA driver's own NRI half (registered as 00-dra.cpu, setting every container's
    cpuset): containerd/nri gives one plugin a container's cpuset per request and fails the request
    when a second sets it. Without the second plugin the same container is created."""
    pool.plugin()
    mark = pool.ctd.log_mark()
    log_path = os.path.join(pool.node.tmp, "clash.log")
    with open(log_path, "wb") as log:
        clash = subprocess.Popen([sys.executable, CLASH_PLUGIN, pool.ctd.nri_sock, "dra.cpu", "00", "0-1"],
                                 stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(lambda: pool.ctd.plugin_synchronized(mark, "00-dra.cpu"), True, SETTLE), \
            pool.ctd.log_since(mark)[-3000:]
        pod = pool.pod("clash")
        with pytest.raises(CriError) as err:
            pool.container(pod, "std")
        claim = pool.claims.prepare("1")
        with pytest.raises(CriError) as err2:
            pool.container(pod, "claimant", claims=(claim,))
    finally:
        clash.terminate()
        clash.wait(10)
    print(f"\n{pool.ctd.version}: {err.value.details}")
    for e in (err, err2):
        assert "both tried to set CPU pinning" in e.value.details, e.value
        assert '"00-dra.cpu"' in e.value.details and '"10-mixed-cpus-hook"' in e.value.details, e.value
    # `check` names such a plugin: here pre-installed in containerd's plugin_path (containerd starts those
    # only at its own start: the file is only looked at)
    marker = os.path.join(pool.ctd.dir, "nri-plugins", "00-dra.cpu")
    with open(marker, "w", encoding="utf-8"):
        pass
    try:
        found = check_finding(pool, "nri-plugins")
    finally:
        os.unlink(marker)
    assert found["status"] == "error" and f"the CPU DRA driver's NRI half (kubernetes-sigs/dra-driver-cpu): {marker}" \
        in found["message"], found
    assert "in place of its NRI half" in found["fix"], found
    # the driver's half gone: the same containers are created and placed
    assert wait_for(lambda: _try_create(pool, pod, "std"), True, SETTLE) is True
    claimant = pool.container(pod, "claimant", claims=(claim,))
    assert pool.cpus(pod, claimant) == "1"


def check_finding(pool, check: str) -> dict:
    """One finding of `mixed-cpus-hook check` with the plugin's configuration and this containerd's config."""
    argv = [hook_executable(), "--config", pool.plugins[0].config_path, "check", "--json", "--no-detect", "--no-probe",
            "--no-systemd", "--containerd-config", pool.ctd.config]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=pool.node.cache_dir))
    findings = [f for f in json.loads(proc.stdout) if f["check"] == check]
    assert findings, proc.stdout + proc.stderr
    return findings[0]


def _try_create(pool, pod, name: str) -> bool:
    try:
        pool.container(pod, name)
    except CriError:
        return False
    return True
