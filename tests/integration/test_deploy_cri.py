"""deploy/ as kubelet would run it: the rendered DaemonSet's pod in containerd 1.7.24 and 2.1.x.

The image is built from the Containerfile on Debian bullseye (tests/integration/plugin_image.py,
cached by its inputs) and imported into a private containerd (one per version for the module);
``kubectl kustomize`` renders an overlay of deploy/overlays/containerd with the test's
configuration (shared CPU 0, namespace mixed-ns); the DaemonSet's pod template runs through CRI
(tests/integration/kube_template.py) with its mounts, security context, env and args, and its
plugin plugs into the same containerd's NRI socket. Then a workload pod asks, as in
test_nri_containerd.py with the plugin run by hand: the same mixed set (Cpus_allowed_list read
inside), OPENSHIFT_* env, quotas and kubelet's intercepted UpdateContainerResources.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import socket
import subprocess
import tarfile
import time
from typing import Callable, Dict, List, Optional, Tuple

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

try:
    from . import containerd as ctd_mod
    from .cri_kube import Kube
    from .kube_template import TemplatePod, find, parse_memory, render
    from .plugin_image import build_image
    from .test_nri_containerd import (EXCLUSIVE, MIXED, MIXED_INSIDE, MIXED_VALUES, PLAIN, assert_mixed,
                                      require_prerequisites, rewrite_and_watch, wait_for)
except ImportError:  # collected as top-level modules (rootdir-relative)
    import containerd as ctd_mod  # type: ignore[no-redef]
    from cri_kube import Kube  # type: ignore[no-redef]
    from kube_template import TemplatePod, find, parse_memory, render  # type: ignore[no-redef]
    from plugin_image import build_image  # type: ignore[no-redef]
    from test_nri_containerd import (EXCLUSIVE, MIXED, MIXED_INSIDE, MIXED_VALUES, PLAIN,  # type: ignore[no-redef]
                                     assert_mixed, require_prerequisites, rewrite_and_watch, wait_for)

from mixed_cpus_hook import __version__
from mixed_cpus_hook.testing.fakenode import format_checkpoint

pytestmark = [pytest.mark.integration]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OVERLAY = os.path.join(REPO, "deploy", "overlays", "containerd")
TEST_CONFIG = 'shared_cpus: "0"\nallowed_namespaces: [mixed-ns]\n'
READY_TIMEOUT = 60.0
CAP_NONE = "0000000000000000"


@pytest.fixture(scope="module")
def image():
    require_prerequisites()
    return build_image()


@pytest.fixture(scope="module")
def rendered(image, tmp_path_factory) -> List[dict]:
    """deploy/overlays/containerd with the test's configuration, rendered by kubectl kustomize."""
    d = tmp_path_factory.mktemp("overlay")
    (d / "config.yaml").write_text(TEST_CONFIG)
    (d / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(OVERLAY, str(d))],
        "configMapGenerator": [{"name": "mixed-cpus-hook-config", "behavior": "replace", "files": ["config.yaml"]}]}))
    return render(str(d))


@pytest.fixture(scope="module", params=ctd_mod.VERSIONS, ids=[f"containerd{v}" for v in ctd_mod.VERSIONS])
def ctd(request, image):
    """One private containerd per version for the module, the plugin's image imported."""
    with ctd_mod.running(request.param, [image.archive]) as c:
        yield c


class DeployWorld:
    """One test: kubelet's calls, the DaemonSet's pods it runs, the node's kubelet checkpoint."""

    def __init__(self, ctd, node, rendered: List[dict], image) -> None:
        self.ctd, self.node, self.image = ctd, node, image
        self.kube = Kube(ctd, node.top, os.path.join(node.tmp, "pod-logs"))
        self.daemonset = find(rendered, "DaemonSet")
        self.configmaps = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "ConfigMap"}
        self.kubelet_dir = os.path.join(node.tmp, "kubelet")
        os.makedirs(self.kubelet_dir)
        self.cdi_dirs = {d: os.path.join(node.tmp, "cdi-" + d.strip("/").replace("/", "-"))
                         for d in ("/etc/cdi", "/var/run/cdi")}  # DirectoryOrCreate: made by the template
        self.host_paths = {"/var/run/nri": ctd.dir, "/sys/fs/cgroup": "/sys/fs/cgroup",
                           "/var/lib/kubelet": self.kubelet_dir, "/run/mixed-cpus-hook": node.state_dir,
                           **self.cdi_dirs}
        self.entries: Dict[str, Dict[str, str]] = {}
        self.pods: List[TemplatePod] = []
        self.rro = int(ctd.version.split(".")[0]) >= 2  # containerd 2.x advertises recursive read-only mounts
        self.volume_mounts: List[str] = []

    def pod_volume(self) -> str:
        """A tmpfs under the kubelet dir, as a pod's secret volume is (unmounted at cleanup)."""
        d = os.path.join(self.kubelet_dir, "pods", "p1", "volumes", "secret")
        os.makedirs(d)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "mch-secret", d], check=True, timeout=30)
        self.volume_mounts.append(d)
        return d

    def records(self) -> List[str]:
        return self.node.records()

    def plugin_pod(self, daemonset: Optional[dict] = None, wait: bool = True) -> TemplatePod:
        """A new pod of the DaemonSet (or of an edited copy), started; with ``wait``, synchronized
        with containerd and /healthz 200."""
        mark = self.ctd.log_mark()
        p = TemplatePod(self.kube, daemonset or self.daemonset, self.configmaps, self.host_paths, self.image.ref,
                        self.node.tmp, recursive_read_only=self.rro)
        self.pods.append(p)
        p.start()
        if not wait:
            return p
        deadline = time.monotonic() + READY_TIMEOUT
        while not self.ctd.plugin_synchronized(mark, "mixed-cpus-hook"):
            assert time.monotonic() < deadline, f"plugin pod not synchronized:\n{self.plugin_log(p)}\n" \
                                                f"{self.ctd.log_since(mark)[-3000:]}"
            time.sleep(0.1)
        assert wait_for(lambda: get(p.port, "/healthz")[0], 200, 10.0) == 200, self.plugin_log(p)
        return p

    def plugin_log(self, p: TemplatePod) -> str:
        d = os.path.join(self.node.tmp, f"{p.name}-logs")
        out = []
        for cur, _dirs, names in os.walk(d):
            for n in names:
                with open(os.path.join(cur, n), encoding="utf-8", errors="replace") as f:
                    out.append(f.read()[-4000:])
        return "\n".join(out)

    def checkpoint(self, pod_uid: str, container: str, cpus: str) -> None:
        """kubelet's CPU manager gives ``container`` of the pod ``cpus`` (its checkpoint, renamed in)."""
        self.entries.setdefault(pod_uid, {})[container] = cpus
        tmp = os.path.join(self.kubelet_dir, ".cpu_manager_state.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(format_checkpoint(self.entries, online="0-1"))
        os.replace(tmp, os.path.join(self.kubelet_dir, "cpu_manager_state"))  # kubelet's way: rename

    def workload(self, name: str = "du") -> Tuple[object, str]:
        """A Guaranteed pod whose container ``app`` asks, on exclusive CPU 1 (kubelet's checkpoint)."""
        pod = self.kube.pod(name=name, asks="app")
        self.checkpoint(pod.uid, "app", EXCLUSIVE)
        return pod, self.kube.container(pod, "app")

    def cleanup(self) -> List[str]:
        if self.ctd.proc is None:
            self.ctd.start()
        problems = self.kube.cleanup()
        for d in self.volume_mounts:
            proc = subprocess.run(["umount", d], capture_output=True, text=True, timeout=30)
            if proc.returncode != 0:
                problems.append(f"umount {d}: {proc.stderr.strip()}")
        return problems


@pytest.fixture
def deploy(ctd, mch_node, rendered, image):
    world = DeployWorld(ctd, mch_node, rendered, image)
    yield world
    problems = world.cleanup()
    assert not problems, f"cleanup: {problems}"


def get(port: int, path: str, timeout: float = 5.0) -> Tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    except OSError as exc:
        return 0, str(exc)
    finally:
        conn.close()


def scrape(port: int) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    status, body = get(port, "/metrics")
    assert status == 200, body
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def proc_status(pid: int) -> Dict[str, str]:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def mount_modes(pid: int) -> Dict[str, str]:
    """Mount point -> "ro" or "rw" in the process's mount namespace (the last mount on a point wins)."""
    out = {}
    with open(f"/proc/{pid}/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            out[fields[4]] = "ro" if "ro" in fields[5].split(",") else "rw"
    return out


# ---------------------------------------------------------------------------------------------


def test_plugin_pod_runs_with_least_privilege_and_mixes_a_workload(deploy):
    deploy.pod_volume()  # another pod's secret under /var/lib/kubelet
    plugin = deploy.plugin_pod()
    # The plugin as the runtime started it from the template: uid 0, no capability at all, no
    # new privileges, seccomp filtering (2), a read-only root file system.
    st = proc_status(plugin.pid())
    assert st["Uid"].split()[:2] == ["0", "0"], st["Uid"]
    assert (st["CapEff"], st["CapPrm"], st["CapBnd"]) == (CAP_NONE, CAP_NONE, CAP_NONE), st
    assert (st["NoNewPrivs"], st["Seccomp"]) == ("1", "2"), st
    rc, _out, err = deploy.kube.cri.exec_sync(plugin.cid, ["python3", "-c", "open('/probe', 'w')"])
    assert rc != 0 and "Read-only file system" in err, err
    # Writable: the cgroup files and the state dir only; the NRI socket's dir and kubelet's read-only
    # (/var/run is a link to /run in the image).
    mounts = mount_modes(plugin.pid())
    assert {p: mounts.get(p) for p in ("/", "/run/nri", "/var/lib/kubelet", "/sys/fs/cgroup",
                                       "/run/mixed-cpus-hook", "/etc/mixed-cpus-hook", "/etc/cdi", "/run/cdi")} == {
        "/": "ro", "/run/nri": "ro", "/var/lib/kubelet": "ro", "/sys/fs/cgroup": "rw",
        "/run/mixed-cpus-hook": "rw", "/etc/mixed-cpus-hook": "ro", "/etc/cdi": "ro", "/run/cdi": "ro"}, mounts
    # The pods' volumes under kubelet's dir: read-only where the runtime does recursive read-only
    # (containerd 2.x: recursiveReadOnly IfPossible); containerd 1.7 leaves the submount writable.
    assert mounts["/var/lib/kubelet/pods/p1/volumes/secret"] == ("ro" if deploy.rro else "rw"), mounts

    pod, cid = deploy.workload()
    assert_mixed(deploy, pod, cid)
    assert deploy.kube.inside(cid) == MIXED_INSIDE
    # `kubectl logs` of the plugin (its container's stderr, as the runtime keeps it): nothing listens
    # on /dev/log in the pod, so every line goes there, the registration and the admission too.
    # (The runtime writes the container's log as it reads the pipe: a line may take a moment.)
    admitted = f"container {cid} (mixed-ns/"
    deadline = time.monotonic() + 10
    while admitted not in deploy.plugin_log(plugin) and time.monotonic() < deadline:
        time.sleep(0.1)
    log = deploy.plugin_log(plugin)
    assert "nri: registered as 10-mixed-cpus-hook" in log, log
    assert admitted in log and "mixed CPUs" in log, log
    # kubelet's CPU manager rewrite, intercepted: the cgroup never holds the exclusive-only set.
    w = rewrite_and_watch(deploy, pod, cid, [{"cpus": EXCLUSIVE}] * 2)
    assert w["cpus"].values() == {MIXED}, w["cpus"].seen
    assert w["quota"].values() == {"200000"}, w["quota"].seen
    assert_mixed(deploy, pod, cid)

    got = scrape(plugin.port)
    assert got[("mixed_cpus_hook_nri_connected", ())] == 1
    assert got[("mixed_cpus_hook_nri_requests_total", (("event", "CreateContainer"),))] == 1
    assert got[("mixed_cpus_hook_nri_requests_total", (("event", "UpdateContainer"),))] >= 2
    assert got[("mixed_cpus_hook_containers_admitted_total", ())] == 1
    assert got[("mixed_cpus_hook_pod_quota_raised_total", ())] == 1
    assert got[("mixed_cpus_hook_mixed_containers", ())] == 1
    assert got[("mixed_cpus_hook_nri_answer_seconds_count", (("event", "CreateContainer"),))] == 1
    assert not [k for k in got if k[0] == "mixed_cpus_hook_nri_errors_total"], got

    # A scraper that connects and says nothing holds the HTTP thread only: a second workload is
    # mixed meanwhile (the runtime gives a plugin 2 s per request).
    silent = socket.create_connection(("127.0.0.1", plugin.port))
    try:
        pod2 = deploy.kube.pod(name="du2", asks="")
        side = deploy.kube.container(pod2, "side", cpus="0", quota=50000)  # shared pool, does not ask
        assert deploy.kube.values(pod2, side) == {"cpus": "0", "quota": 50000, "pod_quota": 200000}
    finally:
        silent.close()

    # What the plugin costs inside the pod: its resident memory, within the template's limit.
    rss_kib = int(proc_status(plugin.pid())["VmRSS"].split()[0])
    limit = parse_memory(deploy.daemonset["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"])
    print(f"\nplugin RSS in the pod ({deploy.ctd.version}): {rss_kib} KiB; limit {limit >> 20} MiB; "
          f"image {deploy.image.size / 1e6:.0f} MB")
    assert rss_kib * 1024 < limit / 2, f"RSS {rss_kib} KiB is more than half the pod's memory limit"


def test_rolling_update_new_pod_synchronizes(deploy):
    old = deploy.plugin_pod()
    pod, cid = deploy.workload()
    assert_mixed(deploy, pod, cid)
    old.stop()  # the DaemonSet controller deletes the old pod first (maxUnavailable 1)
    assert old.stopped_exit_code == 0, deploy.plugin_log(old)  # SIGTERM: a clean exit
    # While no plugin runs, kubelet's rewrite lands as it is.
    deploy.kube.update(cid, cpus=EXCLUSIVE)
    assert deploy.kube.values(pod, cid)["cpus"] == EXCLUSIVE
    new = deploy.plugin_pod()  # Synchronize + the records on the host: back to the mixed set
    assert wait_for(lambda: deploy.kube.values(pod, cid), MIXED_VALUES) == MIXED_VALUES  # pod raised once
    assert_mixed(deploy, pod, cid)
    assert deploy.kube.inside(cid) == MIXED_INSIDE
    w = rewrite_and_watch(deploy, pod, cid, [{"cpus": EXCLUSIVE}])
    assert w["cpus"].values() == {MIXED}, w["cpus"].seen
    got = scrape(new.port)
    assert got[("mixed_cpus_hook_nri_connected", ())] == 1
    assert got[("mixed_cpus_hook_mixed_containers", ())] == 1
    assert got.get(("mixed_cpus_hook_containers_admitted_total", ()), 0) == 0  # tracked, not admitted again


def test_uninstall_leaves_valid_cpusets(deploy):
    plugin = deploy.plugin_pod()
    pod, cid = deploy.workload()
    assert_mixed(deploy, pod, cid)
    plugin.stop()  # kubectl delete -k: the DaemonSet's pods go
    assert plugin.stopped_exit_code == 0, deploy.plugin_log(plugin)
    # The mixed container keeps what it has (exclusive + shared, its quotas) until kubelet writes.
    assert deploy.kube.values(pod, cid) == MIXED_VALUES
    assert deploy.kube.inside(cid)["Cpus_allowed_list"] == MIXED
    # kubelet's next rewrite puts it on its exclusive CPU: valid, and the container runs on.
    deploy.kube.update(cid, cpus=EXCLUSIVE)
    assert deploy.kube.values(pod, cid) == {"cpus": EXCLUSIVE, "quota": 200000, "pod_quota": 300000}
    assert deploy.kube.inside(cid)["Cpus_allowed_list"] == EXCLUSIVE
    # A pod that asks after the uninstall is created as kubelet says, without error or env.
    pod2 = deploy.kube.pod(name="du2", asks="app")
    cid2 = deploy.kube.container(pod2, "app")
    assert deploy.kube.values(pod2, cid2) == PLAIN
    assert deploy.kube.inside(cid2) == {"Cpus_allowed_list": EXCLUSIVE}


def test_image_labels_and_one_folder_for_any_python(image, tmp_path):
    """The image's labels name this version; its /opt/mixed-cpus-hook/lib, built for bullseye's 3.9,
    also serves this machine's own python3 (another minor version), with no site-packages."""
    assert {k: image.labels.get(k) for k in ("org.opencontainers.image.version", "org.opencontainers.image.licenses",
                                             "org.opencontainers.image.title")} == {
        "org.opencontainers.image.version": __version__, "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.title": "mixed-cpus-hook"}
    assert image.labels.get("org.opencontainers.image.source")
    with tarfile.open(image.archive) as archive:
        [manifest] = json.load(archive.extractfile("manifest.json"))
        for layer in manifest["Layers"]:
            with tarfile.open(fileobj=archive.extractfile(layer)) as t:
                members = [m for m in t.getmembers() if m.name.startswith("opt/mixed-cpus-hook/")]
                t.extractall(tmp_path, members=members)  # noqa: S202 - our own image
    lib = tmp_path / "opt" / "mixed-cpus-hook" / "lib"
    host = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    if host == "3.9":
        pytest.skip("this machine's python3 is 3.9, the image's own: no other minor version to try")
    assert (tmp_path / "opt" / "mixed-cpus-hook" / "bin" / "mixed-cpus-hook").exists()
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import jsonschema, yaml, psutil, click, google.protobuf; "
            "from mixed_cpus_hook.frontends.nri import plugin, httpd; from mixed_cpus_hook.frontends.cli.main import main; "
            "sys.argv = ['mixed-cpus-hook', '--version']; main(['--version'])")
    proc = subprocess.run(["/usr/bin/python3", "-S", "-E", "-c", code, str(lib)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"version {__version__}" in proc.stdout, proc.stdout


def no_root(ds: dict) -> None:
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(runAsUser=65534, runAsGroup=65534)


def no_cgroupfs(ds: dict) -> None:
    """Without the host's cgroupfs: the container sees the runtime's own read-only cgroup mount.
    (``readOnly: true`` on the hostPath would not do: on cgroup v1 the controllers are submounts,
    which the runtime's recursive bind keeps writable, as seen here with containerd 1.7 and 2.1.)"""
    ctr = ds["spec"]["template"]["spec"]["containers"][0]
    ctr["volumeMounts"] = [m for m in ctr["volumeMounts"] if m["mountPath"] != "/sys/fs/cgroup"]


LESS_PRIVILEGE = [  # id, edit of the DaemonSet, what happens instead
    ("uid-65534", no_root, "cannot connect"),
    ("no-cgroupfs", no_cgroupfs, "pod cgroup not found"),
]


@pytest.mark.parametrize("edit,failure", [c[1:] for c in LESS_PRIVILEGE], ids=[c[0] for c in LESS_PRIVILEGE])
def test_less_privilege_does_not_work(deploy, edit: Callable[[dict], None], failure: str):
    """Why the template asks for what it asks: without uid 0 the plugin cannot connect to the NRI
    socket (root's, mode 0755 in containerd 2.1: only root may write to it); without the host's
    cgroupfs it cannot reach the pod cgroup, and a container that asks is refused (failure_policy
    fail), nothing written."""
    os.chmod(deploy.ctd.dir, 0o755)  # as /var/run/nri on a node: the socket's own mode decides
    try:
        ds = copy.deepcopy(deploy.daemonset)
        edit(ds)
        mark = deploy.ctd.log_mark()
        plugin = deploy.plugin_pod(ds, wait=edit is not no_root)
        pod = deploy.kube.pod(asks="app")
        deploy.checkpoint(pod.uid, "app", EXCLUSIVE)
        if edit is no_root:
            time.sleep(3.0)  # a few connection attempts
            assert get(plugin.port, "/healthz")[0] == 503
            assert not deploy.ctd.plugin_synchronized(mark, "mixed-cpus-hook")
            assert failure in deploy.plugin_log(plugin) and "Permission denied" in deploy.plugin_log(plugin)
            cid = deploy.kube.container(pod, "app")  # no plugin: created as kubelet says
            assert deploy.kube.values(pod, cid) == PLAIN
        else:
            with pytest.raises(ctd_mod.CriError) as err:
                deploy.kube.container(pod, "app")
            assert failure in err.value.details, err.value.details
            assert pod.quota() == 200000
            assert deploy.records() == []
    finally:
        os.chmod(deploy.ctd.dir, 0o700)
