"""deploy/'s overlays rendered by Debian sid's kubectl (kustomize) and validated offline.

* every object against Kubernetes' published OpenAPI schemas for kubectl's minor version
  (the ``kubernetes-validate`` package, strict: an unknown field is an error);
* the OpenShift SecurityContextConstraints (a CRD, no published schema there) admits the
  DaemonSet's pod: each rule of the SCC checked against the pod template;
* the shipped configuration is one the plugin accepts, the image is this version's, the probes
  and the metrics address use one port.
"""

from __future__ import annotations

import os
import subprocess
from typing import List

import kubernetes_validate
import pytest

try:
    from .kube_template import find, kubectl, render
    from .plugin_image import version
except ImportError:  # collected as top-level modules (rootdir-relative)
    from kube_template import find, kubectl, render  # type: ignore[no-redef]
    from plugin_image import version  # type: ignore[no-redef]

from mixed_cpus_hook.node.config import load_config

pytestmark = [pytest.mark.integration]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OVERLAYS = ["containerd", "openshift"]
# kind -> the SCC "volumes" name of a pod volume source
VOLUME_KINDS = {"hostPath": "hostPath", "configMap": "configMap", "secret": "secret", "emptyDir": "emptyDir",
                "projected": "projected", "downwardAPI": "downwardAPI"}


@pytest.fixture(scope="module")
def kube_version() -> str:
    """kubectl's minor version (1.36 from Debian sid): the schemas to validate against."""
    if os.geteuid() != 0:
        pytest.skip("needs root: fetches kubectl into /var/cache (scripts/fetch-kubectl.sh)")
    out = subprocess.run([kubectl(), "version", "--client", "-o", "yaml"], capture_output=True, text=True,
                         check=True).stdout
    major = out.split("major:")[1].split()[0].strip("'\"")
    minor = out.split("minor:")[1].split()[0].strip("'\"+")
    return f"{major}.{minor}.0"


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request, kube_version) -> List[dict]:
    return render(os.path.join(REPO, "deploy", "overlays", request.param))


def test_every_object_validates_against_kubernetes_schemas(rendered, kube_version):
    checked = []
    for obj in rendered:
        if obj["apiVersion"].startswith("security.openshift.io/"):
            continue  # no published schema: test_scc_admits_the_daemonset_pod
        kubernetes_validate.validate(obj, kube_version, strict=True)
        checked.append(obj["kind"])
    assert {"Namespace", "ServiceAccount", "ConfigMap", "DaemonSet"} <= set(checked), checked


def test_daemonset_shape(rendered):
    ds = find(rendered, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    [ctr] = spec["containers"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["nodeSelector"]["mixed-cpus.openshift.io/enabled"] == "true"
    assert {"operator": "Exists"} in spec["tolerations"]
    assert ctr["image"] == f"localhost/mixed-cpus-hook:{version()}"
    sc = ctr["securityContext"]
    assert (sc["runAsUser"], sc["privileged"], sc["allowPrivilegeEscalation"], sc["readOnlyRootFilesystem"],
            sc["capabilities"]) == (0, False, False, True, {"drop": ["ALL"]})
    port = next(p["containerPort"] for p in ctr["ports"] if p["name"] == "metrics")
    assert ctr["args"] == ["--metrics-address", f":{port}"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert ctr[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, ctr[probe]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: (volumes[m["name"]].get("hostPath", {}).get("path"), m.get("readOnly", False))
              for m in ctr["volumeMounts"]}
    assert mounts == {"/var/run/nri": ("/var/run/nri", True), "/sys/fs/cgroup": ("/sys/fs/cgroup", False),
                      "/var/lib/kubelet": ("/var/lib/kubelet", True),
                      "/run/mixed-cpus-hook": ("/run/mixed-cpus-hook", False),
                      "/etc/mixed-cpus-hook": (None, True), "/etc/cdi": ("/etc/cdi", True),
                      "/var/run/cdi": ("/var/run/cdi", True)}, mounts
    cm = volumes["config"]["configMap"]["name"]
    assert cm.startswith("mixed-cpus-hook-config-"), cm  # kustomize's content hash: a change rolls the pods
    find(rendered, "ConfigMap", cm)


def test_shipped_configuration_is_accepted(rendered, tmp_path):
    data = find(rendered, "ConfigMap")["data"]
    (tmp_path / "config.yaml").write_text(data["config.yaml"])
    config = load_config(str(tmp_path / "config.yaml"), cache_dir=str(tmp_path / "cache"))
    assert (config.state_dir, config.kubelet_state_file, config.cgroup_root) == (
        "/run/mixed-cpus-hook", "/var/lib/kubelet/cpu_manager_state", "/sys/fs/cgroup")


def test_scc_admits_the_daemonset_pod():
    """The OpenShift overlay's SCC, rule by rule, against the pod it must admit (and no more)."""
    rendered = render(os.path.join(REPO, "deploy", "overlays", "openshift"))
    scc = find(rendered, "SecurityContextConstraints")
    ds = find(rendered, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    [ctr] = spec["containers"]
    sc = ctr["securityContext"]
    assert scc["allowPrivilegedContainer"] is False and sc["privileged"] is False
    assert scc["allowPrivilegeEscalation"] is False and sc["allowPrivilegeEscalation"] is False
    assert set(scc["requiredDropCapabilities"]) <= set(sc["capabilities"]["drop"])
    assert not sc["capabilities"].get("add") and scc["allowedCapabilities"] == []
    assert scc["readOnlyRootFilesystem"] is True and sc["readOnlyRootFilesystem"] is True
    assert scc["runAsUser"]["type"] == "RunAsAny"  # uid 0
    assert scc["seLinuxContext"]["type"] == "RunAsAny" and sc["seLinuxOptions"] == {"type": "spc_t"}
    assert "runtime/default" in scc["seccompProfiles"] and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    used = {VOLUME_KINDS[k] for v in spec["volumes"] for k in v if k != "name"}
    assert used <= set(scc["volumes"]), (used, scc["volumes"])
    assert scc["allowHostDirVolumePlugin"] is True
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(host) and scc[f"allow{host[0].upper()}{host[1:]}"] is False
    assert "metadata" in scc and "namespace" not in scc["metadata"]  # cluster-scoped
    binding = find(rendered, "RoleBinding")
    role = find(rendered, "ClusterRole")
    assert role["rules"] == [{"apiGroups": ["security.openshift.io"], "resources": ["securitycontextconstraints"],
                              "resourceNames": [scc["metadata"]["name"]], "verbs": ["use"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"],
                                    "namespace": ds["metadata"]["namespace"]}]


TYPOS = [  # id, JSON patch-like edit of the DaemonSet, what the validator names
    ("unknown-field", lambda ds: ds["spec"]["template"]["spec"].update(priorityClass="x"), "priorityClass"),
    ("port-as-text", lambda ds: ds["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(
        containerPort="9470"), "9470"),
]


@pytest.mark.parametrize("edit,named", [t[1:] for t in TYPOS], ids=[t[0] for t in TYPOS])
def test_validator_rejects_a_broken_daemonset(edit, named, kube_version):
    """The schemas are really applied: the rendered DaemonSet with one mistake fails, naming it."""
    ds = find(render(os.path.join(REPO, "deploy", "overlays", "containerd")), "DaemonSet")
    edit(ds)
    with pytest.raises(kubernetes_validate.ValidationError) as err:
        kubernetes_validate.validate(ds, kube_version, strict=True)
    assert named in str(err.value), str(err.value)
