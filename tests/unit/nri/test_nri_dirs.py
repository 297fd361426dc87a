"""usecases.nri.compute_nri_dirs: the container's and the pod's cgroup dirs from what NRI names.

On a fake node (plain files: no cgroup mount, so every path is resolved, links included) and on
both cgroup versions: a path that resolves to itself is the container's; a symbolic link on the
way is followed only while it stays inside the cgroup root and ends in the container's own pod.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Callable, Dict, List, Optional

import pytest

from mixed_cpus_hook.core.cgroup import Dirs, compute_nri_cgroup
from mixed_cpus_hook.core.errors import CgroupError
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.node.facts import read_node_facts
from mixed_cpus_hook.testing.fakenode import cgroups_path
from mixed_cpus_hook.usecases.nri import ContainerFacts, compute_nri_dirs

APP = "a1" * 32
POD_UID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"
OTHER_UID = "11111111-2222-3333-4444-555555555555"


def _facts(driver: str) -> ContainerFacts:
    path = cgroups_path(driver, POD_UID, APP)
    pod = os.path.dirname(path) if driver == "cgroupfs" else path.split(":")[0]
    return ContainerFacts(APP, {}, frozenset({2}), None, path, pod)


def _container_dirs(layout: Any, rel: str) -> Dict[str, str]:
    """Each hierarchy's root -> the container's directory there (one on v2)."""
    return {root: os.path.join(root, rel) for root in (layout.cpuset_root, layout.cpu_root)}


def _link_to(layout: Any, rel: str, target_rel: str) -> None:
    """Replace the container cgroup by a link to cgroup ``target_rel`` (made), in every hierarchy."""
    for root, d in _container_dirs(layout, rel).items():
        shutil.rmtree(os.path.realpath(d))
        target = os.path.join(root, target_rel)
        os.makedirs(target, exist_ok=True)
        os.symlink(target, d)


def _link_outside(layout: Any, rel: str) -> None:
    for root, d in _container_dirs(layout, rel).items():
        shutil.rmtree(os.path.realpath(d))
        outside = os.path.join(os.path.dirname(layout.root), "outside", os.path.basename(root))
        os.makedirs(outside, exist_ok=True)
        os.symlink(outside, d)


# (how the container cgroup is spelled or linked, the refusal or None)
CASES = {
    "plain": (None, None),
    "link-inside-its-own-pod": (lambda layout, rel: _link_to(layout, rel, os.path.dirname(rel) + "/elsewhere"),
                                None),
    "link-into-another-pod": (lambda layout, rel: _link_to(
        layout, rel, os.path.dirname(os.path.dirname(rel)) + f"/pod{OTHER_UID}/victim"), "not inside its pod cgroup"),
    "link-out-of-the-root": (_link_outside, "outside the cgroup root"),
}


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("change, refused", CASES.values(), ids=list(CASES))
def test_compute_nri_dirs(fake_node: Callable[..., Any], version: int, driver: str, change: Any,
                          refused: Optional[str]) -> None:
    node = fake_node(version=version)
    rel = node.add_container(APP, driver=driver, pod_uid=POD_UID)["rel"]
    layout = read_node_facts(load_config(node.config_path)).layout
    assert not layout.lexical  # a fake node: every path is resolved
    if change is not None:
        change(layout, rel)
    facts = _facts(driver)
    if refused:
        with pytest.raises(CgroupError, match=refused):
            compute_nri_dirs(layout, facts, POD_UID)
        return
    dirs, pod = compute_nri_dirs(layout, facts, POD_UID)
    spelled = Dirs(*(os.path.join(root, rel) for root in (layout.cpuset_root, layout.cpu_root)))
    assert dirs == Dirs(*(os.path.realpath(d) for d in spelled))
    assert pod == Dirs(*(os.path.dirname(d) for d in dirs))
    assert all(os.path.basename(d) == os.path.basename(os.path.dirname(rel)) for d in pod)


# -- below lexical roots (cgroup file systems: no links) the dirs are what the path spells ----------

LEXICAL = {
    "both-roots-lexical": (("cpuset", "cpu"), True),
    "cpu-root-not-lexical": (("cpuset",), False),
    "no-root-lexical": ((), False),
}


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("lexical, spelled_only", LEXICAL.values(), ids=list(LEXICAL))
def test_compute_nri_dirs_below_lexical_roots(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, driver: str,
                                              lexical: Any, spelled_only: bool) -> None:
    """A lexical root's paths are taken as spelled: nothing on the file system is asked (here no
    cgroup exists at all); a root that is not lexical is resolved as on a fake node."""
    from mixed_cpus_hook.core.cgroup import Layout
    from mixed_cpus_hook.node import cgroupfs

    root = str(tmp_path / "cg")
    roots = {"cpuset": root + "/cpuset", "cpu": root + "/cpu,cpuacct/"}  # a trailing "/" is joined right
    layout = Layout(1, root, roots["cpuset"], roots["cpu"], tuple(roots[k] for k in lexical))
    resolved: List[str] = []
    real = cgroupfs._realpath
    monkeypatch.setattr(cgroupfs, "_realpath", lambda p: resolved.append(p) or real(p))
    facts = _facts(driver)
    rel, pod_rel = compute_nri_cgroup(facts.cgroups_path, APP, POD_UID, facts.pod_cgroup, "test")
    dirs, pod = compute_nri_dirs(layout, facts, POD_UID)
    assert dirs == Dirs(root + "/cpuset" + rel, root + "/cpu,cpuacct" + rel)
    assert pod == Dirs(root + "/cpuset" + pod_rel, root + "/cpu,cpuacct" + pod_rel)
    assert (resolved == []) is spelled_only


def test_the_spelled_dirs_are_remembered_for_the_records_checks(tmp_path: Any, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """Every later event checks the record's copy of these dirs (usecases.common.inside): below a
    lexical root that is one lookup of what CreateContainer found, until the container (or its pod)
    is forgotten."""
    from mixed_cpus_hook.core.cgroup import Layout
    from mixed_cpus_hook.node import cgroupfs

    root = str(tmp_path / "cg")
    layout = Layout(1, root, root + "/cpuset", root + "/cpu", (root + "/cpuset", root + "/cpu"))
    dirs, pod = compute_nri_dirs(layout, _facts("cgroupfs"), POD_UID)
    monkeypatch.setattr(cgroupfs, "is_lexically_below", lambda *a: pytest.fail("not remembered"))
    for path in (*dirs, *pod):
        assert cgroupfs.resolve_inside_root(root, path, "record", layout.lexical) == path
    cgroupfs.forget_resolved(*dirs)
    monkeypatch.undo()
    assert all(path not in cgroupfs._LEXICAL for path in dirs)
    assert all(cgroupfs._LEXICAL.get(path) is layout.lexical for path in pod)
    from mixed_cpus_hook.usecases.release import forget_pod

    forget_pod(pod)  # the pod's record went with its last member
    assert all(path not in cgroupfs._LEXICAL for path in pod)
