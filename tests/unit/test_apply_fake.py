"""End to end on fake nodes: apply, release, reconcile, status, dry-run, rollback.

The fake trees are plain files (see mixed_cpus_hook.testing.fakenode): they hold values but do not
enforce the kernel's rules, so these tests check what the hook reads, decides and writes;
the kernel's verdicts are the integration tests' business.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import syslog
from typing import Any, Callable, Dict, List

import pytest

from mixed_cpus_hook.core.errors import CgroupError
from mixed_cpus_hook.node import cgroupfs as cg

PREFIX = "mixed-cpus.openshift.io"
STATUS_KEYS = {"id", "namespace", "pod", "container", "cgroup", "exclusive", "shared", "desired", "actual", "quota",
               "pod_quota", "in_sync", "problem"}


def apply(run_hook: Callable, node: Any, paths: Dict[str, str], *extra: str) -> Any:
    return run_hook(["--config", node.config_path, "apply", "--state", paths["state"], *extra])


def release(run_hook: Callable, node: Any, paths: Dict[str, str]) -> Any:
    return run_hook(["--config", node.config_path, "release", "--state", paths["state"]])


def real(path: str) -> str:
    """What the hook names: the resolved path (v1's "cpu" is a symlink to "cpu,cpuacct")."""
    return os.path.realpath(path)


def ok(result: Any) -> Any:
    assert result.code == 0, result.err
    assert result.err == "", result.err
    return result


# -- layouts --------------------------------------------------------------------------------

LAYOUTS = [
    pytest.param(1, "cgroupfs", "", False, False, id="v1-cgroupfs"),
    pytest.param(1, "systemd", "", False, False, id="v1-systemd"),
    pytest.param(1, "cgroupfs", "", True, False, id="v1-cgroupfs-from-proc"),
    pytest.param(1, "systemd", "", True, False, id="v1-systemd-from-proc"),
    pytest.param(1, "systemd", "burstable", False, False, id="v1-systemd-qos-slice"),
    pytest.param(2, "cgroupfs", "", False, False, id="v2-cgroupfs"),
    pytest.param(2, "systemd", "", False, False, id="v2-systemd"),
    pytest.param(2, "cgroupfs", "", True, False, id="v2-cgroupfs-from-proc"),
    pytest.param(2, "systemd", "", True, False, id="v2-systemd-from-proc"),
    pytest.param(2, "systemd", "", True, True, id="v2-systemd-crun-container-subgroup"),
    pytest.param(2, "cgroupfs", "burstable", True, False, id="v2-cgroupfs-qos-dir"),
]


@pytest.mark.parametrize("version,driver,qos,from_proc,crun", LAYOUTS)
def test_apply_on_each_layout(fake_node: Callable, run_hook: Callable, version: int, driver: str, qos: str,
                              from_proc: bool, crun: bool) -> None:
    node = fake_node(version=version)
    paths = node.add_container("abc", driver=driver, qos=qos, quota=200000, pod_quota=200000,
                               pid=4242 if from_proc else 0, crun_subgroup=crun)
    if from_proc:  # /proc must be what locates the cgroup: no cgroupsPath to fall back on
        node.edit_spec(paths, lambda s: s["linux"].pop("cgroupsPath"))
    rel, pod_rel = paths["rel"], paths["pod_rel"]

    result = ok(apply(run_hook, node, paths))

    assert node.read(rel, "cpuset.cpus") == "0-3"
    assert node.quota(rel) == "400000"
    assert node.quota(pod_rel) == "400000"
    files = [line.split(": ")[1] for line in result.out.splitlines()]
    assert files == [real(node.path(pod_rel, node.quota_name())), real(node.path(rel, "cpuset.cpus")),
                     real(node.path(rel, node.quota_name()))]
    assert [p for p, _ in result.syslog] == [syslog.LOG_INFO] * 3
    rec = node.records("containers")["abc"]
    assert rec["cgroup"] == {"cpuset": real(os.path.dirname(node.path(rel, "cpuset.cpus"))),
                             "cpu": real(os.path.dirname(node.path(rel, node.quota_name())))}
    assert rec["pod_key"] == os.path.basename(pod_rel)
    assert (rec["exclusive"], rec["shared"], rec["desired"]) == ("2-3", "0-1", "0-3")
    assert (rec["namespace"], rec["pod"], rec["container"]) == ("ran", "du-0", "app")
    if crun:
        assert node.read(rel + "/container", "cpuset.cpus") == ""  # the subgroup inherits; it is not written

    before = node.freeze()
    again = ok(apply(run_hook, node, paths))
    assert again.out == ""
    assert node.changes(before) == []


LAYOUT_TREES = [
    pytest.param(lambda n: None, (1, "cpu,cpuacct"), id="v1-cpu-symlink-to-co-mounted-cpu-cpuacct"),
    pytest.param(lambda n: [os.unlink(os.path.join(n.cgroup_root, x)) for x in ("cpu", "cpuacct")],
                 (1, "cpu,cpuacct"), id="v1-co-mounted-without-symlinks"),
    pytest.param(lambda n: [os.unlink(os.path.join(n.cgroup_root, x)) for x in ("cpu", "cpuacct")]
                 + [os.rename(os.path.join(n.cgroup_root, "cpu,cpuacct"), os.path.join(n.cgroup_root, "cpuacct,cpu"))],
                 (1, "cpuacct,cpu"), id="v1-cpuacct-cpu-order"),
    pytest.param(lambda n: [os.unlink(os.path.join(n.cgroup_root, "cpu")),
                            os.rename(os.path.join(n.cgroup_root, "cpu,cpuacct"), os.path.join(n.cgroup_root, "cpu"))],
                 (1, "cpu"), id="v1-separate-cpu-hierarchy"),
    pytest.param(lambda n: shutil.rmtree(os.path.join(n.cgroup_root, "unified")), (1, "cpu,cpuacct"),
                 id="v1-without-unified"),
]


@pytest.mark.parametrize("change,expected", LAYOUT_TREES)
def test_read_layout_v1_variants(fake_node: Callable, change: Callable, expected: Any) -> None:
    node = fake_node(version=1)
    change(node)
    layout = cg.read_layout(node.cgroup_root)
    root = os.path.realpath(node.cgroup_root)
    assert layout == cg.Layout(expected[0], root, os.path.join(root, "cpuset"), os.path.join(root, expected[1]))


def test_read_layout_v2(fake_node: Callable) -> None:
    node = fake_node(version=2)
    root = os.path.realpath(node.cgroup_root)
    assert cg.read_layout(node.cgroup_root) == cg.Layout(2, root, root, root)


BAD_LAYOUTS = [
    pytest.param(1, lambda n: [os.unlink(os.path.join(n.cgroup_root, "cpu")),
                               shutil.rmtree(os.path.join(n.cgroup_root, "cpu,cpuacct"))],
                 "cgroup v1 cpuset is mounted but no cpu controller hierarchy was found", id="v1-without-cpu"),
    pytest.param(1, lambda n: [os.unlink(os.path.join(n.cgroup_root, "cpu")),
                               shutil.move(os.path.join(n.cgroup_root, "cpu,cpuacct"), os.path.join(n.root, "elsewhere")),
                               os.symlink(os.path.join(n.root, "elsewhere"), os.path.join(n.cgroup_root, "cpu"))],
                 "outside the cgroup root", id="v1-cpu-symlink-leaves-the-root"),
    pytest.param(2, lambda n: n.write("", "cgroup.controllers", "cpu io memory"), "cgroup v2 without the cpuset controller",
                 id="v2-without-cpuset"),
    pytest.param(2, lambda n: n.write("", "cgroup.controllers", "io"), "without the cpuset and cpu controller",
                 id="v2-without-both"),
    pytest.param(2, lambda n: os.unlink(os.path.join(n.cgroup_root, "cgroup.controllers")),
                 "no cgroup v1 cpuset hierarchy and no cgroup v2 mount found", id="nothing-mounted"),
]


@pytest.mark.parametrize("version,change,message", BAD_LAYOUTS)
def test_read_layout_refuses(fake_node: Callable, version: int, change: Callable, message: str) -> None:
    node = fake_node(version=version)
    change(node)
    with pytest.raises(CgroupError) as info:
        cg.read_layout(node.cgroup_root)
    assert message in info.value.message


# -- the common story -------------------------------------------------------------------------

def test_not_asking_exits_at_once_without_reading_the_config(fake_node: Callable, run_hook: Callable) -> None:
    node = fake_node()
    paths = node.add_container("abc", ask=None, quota=200000, pod_quota=200000)
    before = node.freeze()
    result = run_hook(["--config", os.path.join(node.root, "missing.yaml"), "apply", "--state", paths["state"]])
    assert (result.code, result.out, result.err, result.syslog) == (0, "", "", [])
    assert node.changes(before) == []
    assert node.state_files() == []


def test_annotations_from_config_json_when_the_state_has_none(node: Any, run_hook: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    state = node.load_json(paths["state"])
    del state["annotations"]
    node.save_json(paths["state"], state)
    ok(apply(run_hook, node, paths))
    assert node.read(paths["rel"], "cpuset.cpus") == "0-3"


def test_state_annotations_win_over_config_json(node: Any, run_hook: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    state = node.load_json(paths["state"])
    del state["annotations"][f"{PREFIX}/app"]
    node.save_json(paths["state"], state)
    before = node.freeze()
    assert ok(apply(run_hook, node, paths)).out == ""
    assert node.changes(before) == []


@pytest.mark.parametrize("cpus", [pytest.param("0-3", id="overlaps-shared"), pytest.param("1", id="inside-shared")])
def test_no_exclusive_cpus_is_not_applicable(node: Any, run_hook: Callable, cpus: str) -> None:
    paths = node.add_container("abc", cpus=cpus, quota=200000, pod_quota=200000)
    before = node.freeze()
    result = apply(run_hook, node, paths)
    assert result.code == 0
    assert len(result.err_lines) == 1
    assert result.err_lines[0].startswith("mixed-cpus-hook: warning: container abc has no exclusive CPUs")
    assert [p for p, _ in result.syslog] == [syslog.LOG_WARNING]
    assert node.changes(before) == []
    assert node.records("containers") == {} and node.records("pods") == {}


def test_unlimited_quota_only_the_cpuset_is_written(node: Any, run_hook: Callable) -> None:
    paths = node.add_container("abc", quota=None, pod_quota=None)
    result = ok(apply(run_hook, node, paths))
    assert len(result.out.splitlines()) == 1
    assert node.read(paths["rel"], "cpuset.cpus") == "0-3"
    assert node.quota(paths["rel"]) in ("-1", "max") and node.quota(paths["pod_rel"]) in ("-1", "max")
    assert node.records("containers")["abc"]["quota"]["applied"] is None


def test_container_outside_a_pod_cgroup(node: Any, run_hook: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    node.mkdir("custom/standalone", "2-3")
    node.set_quota("custom/standalone", 100000)
    if node.version == 2:
        node.grant_effective("custom/standalone")
    node.edit_spec(paths, lambda s: s["linux"].update(cgroupsPath="/custom/standalone"))
    ok(apply(run_hook, node, paths))
    assert node.read("custom/standalone", "cpuset.cpus") == "0-3"
    assert node.quota("custom/standalone") == "300000"
    assert node.quota(paths["pod_rel"]) == "200000"
    assert node.records("containers")["abc"]["pod_key"] is None
    assert node.records("pods") == {}


def test_v1_ancestors_widened_before_the_container(fake_node: Callable, run_hook: Callable) -> None:
    node = fake_node(version=1)
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    node.write("kubepods", "cpuset.cpus", "2-3")
    node.write(paths["pod_rel"], "cpuset.cpus", "2-3")
    result = ok(apply(run_hook, node, paths))
    files = [line.split(": ")[1] for line in result.out.splitlines()]
    assert files[:2] == [real(node.path("kubepods", "cpuset.cpus")), real(node.path(paths["pod_rel"], "cpuset.cpus"))]
    assert files[2] == real(node.path(paths["pod_rel"], "cpu.cfs_quota_us"))
    assert files[3] == real(node.path(paths["rel"], "cpuset.cpus"))
    assert [node.read(r, "cpuset.cpus") for r in ("kubepods", paths["pod_rel"], paths["rel"])] == ["0-3"] * 3


def test_dry_run_writes_nothing(node: Any, run_hook: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    before = node.freeze()
    result = ok(apply(run_hook, node, paths, "--dry-run"))
    lines = result.out.splitlines()
    assert len(lines) == 3 and all(line.startswith("would write ") for line in lines)
    assert "-> 0-3" in lines[1]
    assert node.changes(before) == []
    assert node.state_files() == []
    assert not os.path.exists(os.path.join(node.state_dir, "lock"))


def test_dry_run_when_in_sync(node: Any, run_hook: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    ok(apply(run_hook, node, paths))
    before = node.freeze()
    assert ok(apply(run_hook, node, paths, "--dry-run")).out == "container abc: nothing to write (in-sync)\n"
    assert node.changes(before) == []


def test_kubelet_resize_is_the_new_base(node: Any, run_hook: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    ok(apply(run_hook, node, paths))
    node.set_quota(paths["rel"], 300000)       # in-place resize: kubelet writes container and pod
    node.set_quota(paths["pod_rel"], 300000)
    ok(apply(run_hook, node, paths))
    assert (node.quota(paths["rel"]), node.quota(paths["pod_rel"])) == ("500000", "500000")
    assert node.records("containers")["abc"]["quota"] == {"base": 300000, "applied": 500000, "period": 100000,
                                                                    "ours": [500000]}
    before = node.freeze()
    assert ok(apply(run_hook, node, paths)).out == ""
    assert node.changes(before) == []


def test_resize_by_exactly_the_shared_share_is_kubelets(node: Any, run_hook: Callable, run_cli: Callable) -> None:
    """kubelet's new quota equals the one the hook wrote (2 -> 4 CPUs, 2 shared): still a resize.

    kubelet writes a Guaranteed container's quota as its CPUs x period; the record's base follows
    that rule, so the new cpuset's size tells kubelet's 400000 from the hook's own.
    """
    paths = node.add_container("abc", cpus="2-3", quota=200000, pod_quota=200000)
    ok(apply(run_hook, node, paths))
    assert (node.quota(paths["rel"]), node.quota(paths["pod_rel"])) == ("400000", "400000")
    node.set_quota(paths["rel"], 400000)       # the resize to 4 CPUs: kubelet's values
    node.set_quota(paths["pod_rel"], 400000)
    node.write(paths["rel"], "cpuset.cpus", "2-5")
    res = run_cli(["--config", node.config_path, "reconcile"])
    assert res.code == 0, res.err
    assert node.read(paths["rel"], "cpuset.cpus") == "0-5"
    assert (node.quota(paths["rel"]), node.quota(paths["pod_rel"])) == ("600000", "600000")
    rec = node.records("containers")["abc"]
    assert (rec["exclusive"], rec["quota"]["base"]) == ("2-5", 400000)
    assert node.records("pods")[os.path.basename(paths["pod_rel"])]["quota"]["base"] == 400000


def test_release_gives_back_the_pod_share(node: Any, run_hook: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    ok(apply(run_hook, node, paths))
    result = ok(release(run_hook, node, paths))
    # The container's cgroup is still there (as at NRI's StopContainer): its quota goes back to
    # kubelet's first, since cgroup v1 refuses a pod quota below a child's.
    assert node.quota(paths["rel"]) == "200000"
    assert node.quota(paths["pod_rel"]) == "200000"
    assert len(result.out.splitlines()) == 2
    assert node.records("containers") == {} and node.records("pods") == {}
    assert result.syslog[-1] == (syslog.LOG_INFO, "container abc: released, record removed")
    # releasing again, or something never applied, is a no-op
    before = node.freeze()
    assert ok(release(run_hook, node, paths)).out == ""
    assert node.changes(before) == []


def test_release_after_the_pod_cgroup_is_gone(node: Any, run_hook: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    ok(apply(run_hook, node, paths))
    for top in {os.path.dirname(node.path(paths["pod_rel"], n)) for n in ("cpuset.cpus", node.quota_name())}:
        shutil.rmtree(top)
    ok(release(run_hook, node, paths))
    assert node.records("containers") == {} and node.records("pods") == {}


def test_release_with_an_unreadable_pod_quota_fails_and_keeps_the_pod_record(node: Any, run_hook: Callable) -> None:
    """Only a pod cgroup that is gone is skipped; one that is there with a quota that cannot be
    read is an error naming the file, and the pod's record stays for the reconcile to finish."""
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    ok(apply(run_hook, node, paths))
    node.write(paths["pod_rel"], node.quota_name(), "garbled")
    result = release(run_hook, node, paths)
    assert result.code != 0 and "cgroup error" in result.err and "pod0f1e2d3c" in result.err, result.err
    assert list(node.records("pods")) == [os.path.basename(paths["pod_rel"])]
    assert node.records("containers")["abc"]["phase"] == "releasing"


def test_two_containers_in_one_pod(node: Any, run_hook: Callable) -> None:
    a = node.add_container("aaa", name="a", quota=200000, pod_quota=400000)
    b = node.add_container("bbb", name="b", quota=200000)
    pod = a["pod_rel"]
    ok(apply(run_hook, node, a))
    assert node.quota(pod) == "600000"
    ok(apply(run_hook, node, b))
    assert node.quota(pod) == "800000"
    assert [m["id"] for m in node.records("pods")[os.path.basename(pod)]["members"]] == ["aaa", "bbb"]
    ok(apply(run_hook, node, a))
    assert node.quota(pod) == "800000"
    ok(release(run_hook, node, a))
    assert node.quota(pod) == "600000"
    assert [m["id"] for m in node.records("pods")[os.path.basename(pod)]["members"]] == ["bbb"]
    assert node.quota(b["rel"]) == "400000"  # the other container keeps its own quota
    ok(release(run_hook, node, b))
    assert node.quota(pod) == "400000"
    assert node.records("pods") == {}


CRASH_LOOPS = [
    pytest.param("release-then-start", id="old-released-before-new-starts"),
    pytest.param("start-then-release", id="old-released-after-new-starts"),
]


@pytest.mark.parametrize("order", CRASH_LOOPS)
def test_crash_looping_container_never_grows_the_pod_quota(node: Any, run_hook: Callable, order: str) -> None:
    prev = None
    seen: List[int] = []
    for i in range(6):
        paths = node.add_container(f"try{i}", quota=200000, pod_quota=200000)
        if prev is not None and order == "release-then-start":
            ok(release(run_hook, node, prev))
        ok(apply(run_hook, node, paths))
        seen.append(int(node.quota(paths["pod_rel"])))
        if prev is not None and order == "start-then-release":
            ok(release(run_hook, node, prev))
        seen.append(int(node.quota(paths["pod_rel"])))
        prev = paths
    if order == "release-then-start":
        assert set(seen) == {400000}
    else:
        assert max(seen) == 600000  # the dying one and the new one overlap for a moment
    assert node.quota(prev["pod_rel"]) == "400000"
    assert [m["id"] for m in list(node.records("pods").values())[0]["members"]] == ["try5"]
    assert sorted(node.records("containers")) == ["try5"]


def test_reconcile_forgets_a_gone_container_and_returns_its_share(node: Any, run_hook: Callable,
                                                                  run_cli: Callable) -> None:
    old = node.add_container("old", quota=200000, pod_quota=200000)
    ok(apply(run_hook, node, old))
    for d in {os.path.dirname(node.path(old["rel"], n)) for n in ("cpuset.cpus", node.quota_name())}:
        shutil.rmtree(d)  # gone without a poststop hook
    new = node.add_container("new", quota=200000)
    ok(apply(run_hook, node, new))
    assert node.quota(new["pod_rel"]) == "600000"
    result = run_cli(["--config", node.config_path, "reconcile"])
    assert result.code == 0, result.err
    assert "container old: cgroup gone, forgotten" in result.out
    assert node.quota(new["pod_rel"]) == "400000"
    assert sorted(node.records("containers")) == ["new"]


def test_reconcile_writes_nothing_when_in_sync(node: Any, run_hook: Callable, run_cli: Callable) -> None:
    a = node.add_container("aaa", name="a", quota=200000, pod_quota=200000)
    b = node.add_container("bbb", name="b", quota=100000)
    ok(apply(run_hook, node, a))
    ok(apply(run_hook, node, b))
    before = node.freeze()
    result = run_cli(["--config", node.config_path, "reconcile"])
    assert (result.code, result.out, result.err) == (0, "", "")
    assert node.changes(before) == []


def test_reconcile_restores_what_kubelet_rewrote(node: Any, run_hook: Callable, run_cli: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    ok(apply(run_hook, node, paths))
    node.write(paths["rel"], "cpuset.cpus", "2-3")  # kubelet's CPU manager after a restart
    status = run_cli(["--config", node.config_path, "status", "--json"])
    assert status.code == 3  # drift
    assert json.loads(status.out)["rows"][0]["in_sync"] is False
    dry = run_cli(["--config", node.config_path, "reconcile", "--dry-run"])
    assert dry.code == 0 and "would write" in dry.out
    assert node.read(paths["rel"], "cpuset.cpus") == "2-3"
    result = run_cli(["--config", node.config_path, "reconcile"])
    assert result.code == 0, result.err
    assert result.out.startswith("container abc: ") and "2-3 -> 0-3" in result.out
    assert node.read(paths["rel"], "cpuset.cpus") == "0-3"
    assert node.quota(paths["rel"]) == "400000"  # nothing added twice
    assert node.records("containers")["abc"]["exclusive"] == "2-3"


def test_status_json(node: Any, run_hook: Callable, run_cli: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    assert json.loads(run_cli(["--config", node.config_path, "status", "--json"]).out) == {"rows": [], "problems": []}
    ok(apply(run_hook, node, paths))
    result = run_cli(["--config", node.config_path, "status", "--json"])
    assert result.code == 0, result.err
    rows = json.loads(result.out)["rows"]
    assert len(rows) == 1
    row = rows[0]
    assert STATUS_KEYS <= set(row)
    assert (row["id"], row["namespace"], row["pod"], row["container"]) == ("abc", "ran", "du-0", "app")
    assert (row["exclusive"], row["shared"], row["desired"], row["actual"]) == ("2-3", "0-1", "0-3", "0-3")
    assert row["quota"] == {"desired": "400000", "actual": "400000"}
    assert row["pod_quota"] == {"desired": "400000", "actual": "400000"}
    assert (row["in_sync"], row["problem"], row["drift"], row["broken"]) == (True, "", [], False)
    assert row["cgroup"] == real(os.path.dirname(node.path(paths["rel"], "cpuset.cpus")))


def test_record_pointing_outside_the_cgroup_root_is_refused(node: Any, run_hook: Callable, run_cli: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    ok(apply(run_hook, node, paths))
    victim = os.path.join(node.root, "victim")
    os.makedirs(victim)
    with open(os.path.join(victim, "cpuset.cpus"), "w", encoding="ascii") as f:
        f.write("7\n")
    rec_path = os.path.join(node.state_dir, "containers", "abc.json")
    rec = node.load_json(rec_path)
    rec["cgroup"] = {"cpuset": victim, "cpu": victim}
    node.save_json(rec_path, rec)
    result = run_cli(["--config", node.config_path, "reconcile"])
    assert result.code == 1
    assert "outside the cgroup root" in result.err
    with open(os.path.join(victim, "cpuset.cpus"), encoding="ascii") as f:
        assert f.read() == "7\n"
    status = json.loads(run_cli(["--config", node.config_path, "status", "--json"]).out)["rows"]
    assert "outside the cgroup root" in status[0]["problem"]


# -- failures and rollback ----------------------------------------------------------------------

def test_rollback_when_the_parent_does_not_grant_the_shared_cpus(fake_node: Callable, run_hook: Callable) -> None:
    """v2 verifies cpuset.cpus.effective after writing; here the fake parent grants nothing new."""
    node = fake_node(version=2)
    paths = node.add_container("abc", quota=200000, pod_quota=200000, grant=False)
    before = node.freeze()
    result = apply(run_hook, node, paths)
    assert result.code == 1
    d = os.path.dirname(node.path(paths["rel"], "cpuset.cpus"))
    assert result.err_lines == [f"mixed-cpus-hook: error: container abc: write refused: {d}: cpuset.cpus.effective is"
                                " 2-3, not 0-3 (a parent cgroup does not grant the shared CPUs); rolled back 3 earlier"
                                " write(s)"]
    assert result.syslog[-1] == (syslog.LOG_ERR, result.err_lines[0][len("mixed-cpus-hook: error: "):])
    assert node.changes(before, mtimes=False) == []
    assert node.records("containers") == {} and node.records("pods") == {}


def test_failure_policy_ignore_exits_0_and_still_logs(fake_node: Callable, run_hook: Callable) -> None:
    node = fake_node(version=2)
    node.configure(failure_policy="ignore")
    paths = node.add_container("abc", quota=200000, pod_quota=200000, grant=False)
    before = node.freeze()
    result = apply(run_hook, node, paths)
    assert result.code == 0
    assert len(result.err_lines) == 1
    assert result.err_lines[0].endswith("rolled back 3 earlier write(s) (ignored: failure_policy is ignore)")
    assert [p for p, _ in result.syslog][-1] == syslog.LOG_ERR
    assert node.changes(before, mtimes=False) == []
    assert node.records("containers") == {}


def kernel_refuses_writes(path: str) -> bool:
    """True when even root cannot open ``path`` for writing (a read-only sysfs attribute)."""
    if not os.path.exists(path):
        return False
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return True
    os.close(fd)
    return False


POSSIBLE = "/sys/devices/system/cpu/possible"
KERNEL_MAX = "/sys/devices/system/cpu/kernel_max"


@pytest.fixture
def swap_for(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Bind-mount a kernel file over a fake cgroup file (the hook never writes through a symlink).

    Unmounted after the test, newest first.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root (bind mounts)")
    mounted: List[str] = []

    def swap(path: str, target: str) -> None:
        subprocess.run(["mount", "--bind", target, path], check=True, capture_output=True)
        mounted.append(path)

    def undo() -> None:
        for path in reversed(mounted):
            subprocess.run(["umount", path], check=True, capture_output=True)

    request.addfinalizer(undo)
    return swap


@pytest.mark.skipif(not kernel_refuses_writes(POSSIBLE), reason=f"{POSSIBLE} is missing or writable here")
def test_rollback_when_the_cpuset_write_is_refused(node: Any, run_hook: Callable, swap_for: Callable[[str, str], None]) -> None:
    """The pod's quota is raised first; the container's cpuset write then fails: the pod goes back."""
    paths = node.add_container("abc", cpus="3", quota=200000, pod_quota=200000)
    cpuset = node.path(paths["rel"], "cpuset.cpus")
    swap_for(cpuset, POSSIBLE)  # readable, never writable, even for root
    before = node.freeze()
    result = apply(run_hook, node, paths)
    assert result.code == 1
    assert result.err_lines == [f"mixed-cpus-hook: error: container abc: write refused: {cpuset}: cannot open for"
                                " writing: Permission denied; rolled back 1 earlier write(s)"]
    assert node.changes(before, mtimes=False) == []
    assert node.quota(paths["pod_rel"]) == "200000"
    assert node.records("containers") == {} and node.records("pods") == {}


@pytest.mark.skipif(not kernel_refuses_writes(KERNEL_MAX), reason=f"{KERNEL_MAX} is missing or writable here")
def test_rollback_when_the_last_write_is_refused(fake_node: Callable, run_hook: Callable, swap_for: Callable[[str, str], None]) -> None:
    """v1: pod quota and cpuset written, then the container's quota refused: both restored."""
    node = fake_node(version=1)
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    swap_for(node.path(paths["rel"], "cpu.cfs_quota_us"), KERNEL_MAX)
    before = node.freeze()
    result = apply(run_hook, node, paths)
    assert result.code == 1
    assert result.err_lines[0].endswith("cannot open for writing: Permission denied; rolled back 2 earlier write(s)")
    assert node.changes(before, mtimes=False) == []
    assert (node.read(paths["rel"], "cpuset.cpus"), node.quota(paths["pod_rel"])) == ("2-3", "200000")
    assert node.records("containers") == {} and node.records("pods") == {}


def test_rollback_when_a_value_does_not_stick(node: Any, run_hook: Callable, swap_for: Callable[[str, str], None]) -> None:
    """Every write succeeds but the cpuset reads back empty: all three writes are undone."""
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    cpuset = node.path(paths["rel"], "cpuset.cpus")
    swap_for(cpuset, os.devnull)
    before = node.freeze()
    result = apply(run_hook, node, paths)
    assert result.code == 1
    assert result.err_lines[0].endswith(f"{cpuset}: wrote '0-3' but it reads back ''; rolled back 3 earlier write(s)")
    assert node.changes(before, mtimes=False) == []
    assert node.records("containers") == {} and node.records("pods") == {}


@pytest.mark.skipif(not kernel_refuses_writes(POSSIBLE), reason=f"{POSSIBLE} is missing or writable here")
def test_failed_reapply_restores_the_previous_records(node: Any, run_hook: Callable, swap_for: Callable[[str, str], None]) -> None:
    a = node.add_container("aaa", name="a", cpus="3", quota=200000, pod_quota=200000)
    b = node.add_container("bbb", name="b", cpus="2", quota=200000)
    ok(apply(run_hook, node, a))
    ok(apply(run_hook, node, b))
    records = (node.records("containers"), node.records("pods"))
    node.write(a["rel"], "cpuset.cpus", "3")  # kubelet rewrote it ...
    swap_for(node.path(a["rel"], "cpuset.cpus"), POSSIBLE)  # ... and now refuses the fix
    node.set_quota(a["pod_rel"], 300000)  # and a resize happened, so the pod quota is raised first
    result = apply(run_hook, node, a)
    assert result.code == 1, result.err
    assert (node.records("containers"), node.records("pods")) == records
    assert node.quota(a["pod_rel"]) == "300000"


# -- the real process ------------------------------------------------------------------------------

def test_installed_executable_applies_and_releases(fake_node: Callable, run_exe: Callable) -> None:
    node = fake_node(version=2)
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    with open(paths["state"], encoding="utf-8") as f:
        state = f.read()
    result = run_exe(["--config", node.config_path, "apply"], stdin=state)
    assert (result.code, result.err) == (0, "")
    assert node.read(paths["rel"], "cpuset.cpus") == "0-3"
    result = run_exe(["--config", node.config_path, "release"], stdin=state)
    assert (result.code, result.err) == (0, "")
    assert node.quota(paths["pod_rel"]) == "200000"


def test_installed_executable_reports_one_line(fake_node: Callable, run_exe: Callable) -> None:
    node = fake_node()
    result = run_exe(["--config", node.config_path, "apply"], stdin='{"ociVersion": "1.0", "id": "../x", "bundle": "/b"}')
    assert result.code == 1
    assert result.err.splitlines() == ["mixed-cpus-hook: error: invalid state: stdin: field 'id': '../x' is not a"
                                       " plain container id"]


USAGE = [
    pytest.param(["apply", "--bogus"], id="unknown-option"),
    pytest.param(["apply", "--state"], id="option-without-value"),
    pytest.param(["frobnicate"], id="unknown-command"),
    pytest.param(["release", "--dry-run"], id="dry-run-is-for-apply"),
]


@pytest.mark.parametrize("argv", USAGE)
def test_usage_errors_exit_2(run_cli: Callable, argv: List[str]) -> None:
    result = run_cli(argv)
    assert result.code == 2
    assert result.out == ""
    assert result.err


def test_usage_error_from_the_executable(run_exe: Callable) -> None:
    assert run_exe(["apply", "--bogus"]).code == 2


FAST_PATH_IMPORTS = """
import sys
from mixed_cpus_hook.frontends.entry import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("click", "yaml", "jsonschema", "psutil") if m in sys.modules)
print(code, ",".join(heavy) or "-")
"""


def test_the_hook_path_imports_no_heavy_module(fake_node: Callable) -> None:
    node = fake_node()
    asks = node.add_container("abc", quota=200000, pod_quota=200000)
    skips = node.add_container("def", ask=None)
    env = dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=os.path.join(node.root, "cache"))

    def run(paths: Dict[str, str]) -> str:
        proc = subprocess.run([sys.executable, "-c", FAST_PATH_IMPORTS, "--config", node.config_path, "apply",
                               "--state", paths["state"]], capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()[-1]

    assert run(skips) == "0 -"     # not asking: not even the config is read
    assert run(asks) == "0 yaml"   # first run parses the YAML and fills the cache
    assert run(asks) == "0 -"      # every later container start: standard library only


def test_write_text_replaces_the_whole_value(tmp_path: Any) -> None:
    """On a plain file (a fake node) a shorter value must not keep the old value's tail."""
    path = tmp_path / "cpu.max"
    path.write_text("400000 100000\n")
    cg.write_text(str(path), "max 100000")
    assert path.read_text() == "max 100000"


def test_fake_node_writes_are_whole_for_a_reader(node: Any) -> None:
    """A kernel cgroup file shows its old value or its new one, never an empty moment; the fake
    node's own writes (the tests' "kubelet") must not either, or a settle pass or the plugin racing
    them reports an unreadable quota (a CI failure once) no real node can produce."""
    import threading

    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    target = node.path(paths["rel"], "cpu.max" if node.version == 2 else "cpu.cfs_quota_us")
    os.chmod(target, 0o640)
    seen: List[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            with open(target, encoding="ascii") as f:
                seen.append(f.read())

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(300):
            node.set_quota(paths["rel"], None if i % 2 else 200000)
    finally:
        done.set()
        t.join()
    assert seen and all(v.strip() for v in seen), "a reader saw an empty cgroup file"
    assert oct(os.stat(target).st_mode & 0o777) == oct(0o640)
    assert not [n for n in os.listdir(os.path.dirname(target)) if n.endswith(".fakenode-new")]
