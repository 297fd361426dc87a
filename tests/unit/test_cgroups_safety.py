"""cgroups.py's checks that the cgroup is this container's and this pod's, and that no link leads out."""

from __future__ import annotations

import os
from typing import Any

import pytest

from mixed_cpus_hook.core.cgroup import Layout, compute_cgroup_matches, compute_pod_matches
from mixed_cpus_hook.core.errors import CgroupError, WriteError
from mixed_cpus_hook.node.cgroupfs import find_link, locate_container, write_text

UID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"

PODS = [
    pytest.param(f"pod{UID}", UID, True, id="cgroupfs"),
    pytest.param(f"kubepods-pod{UID.replace('-', '_')}.slice", UID, True, id="systemd-guaranteed"),
    pytest.param(f"kubepods-burstable-pod{UID.replace('-', '_')}.slice", UID, True, id="systemd-burstable"),
    pytest.param(f"pod{UID}", "99999999-aaaa-bbbb-cccc-123456789abc", False, id="cgroupfs-other-pod"),
    pytest.param(f"kubepods-pod{UID.replace('-', '_')}.slice", UID.replace("0f", "1f"), False,
                 id="systemd-other-pod"),
    pytest.param(f"pod{UID}x", UID, False, id="longer-name"),
    pytest.param(f"kubepods-pod{UID}.slice", UID, False, id="systemd-keeps-no-dashes"),
    pytest.param(f"pod{UID}", "", False, id="no-uid-in-the-annotations"),
    pytest.param("pod", "", False, id="empty-uid-never-matches-a-bare-pod"),
    pytest.param(f"pod{UID}", f"{UID}/..", False, id="uid-with-a-slash"),
]


@pytest.mark.parametrize("name,uid,expected", PODS)
def test_compute_pod_matches(name: str, uid: str, expected: bool) -> None:
    assert compute_pod_matches(name, uid) is expected


CGROUPS = [
    pytest.param("/kubepods/podX/crio-abc", "/kubepods/podX/crio-abc", True, id="same"),
    pytest.param("kubepods//podX/crio-abc/", "/kubepods/podX/crio-abc", True, id="slashes-do-not-matter"),
    pytest.param("/k.slice/crio-abc.scope/container", "/k.slice/crio-abc.scope", True, id="crun-subgroup"),
    pytest.param("/k.slice/crio-abc.scope/other", "/k.slice/crio-abc.scope", False, id="another-subgroup"),
    pytest.param("/system.slice/sshd.service", "/kubepods/podX/crio-abc", False, id="sshd"),
    pytest.param("/", "/kubepods/podX/crio-abc", False, id="root"),
    pytest.param("/kubepods/podY/crio-xyz", "/kubepods/podX/crio-abc", False, id="another-pods-container"),
    pytest.param("/kubepods/podX", "/kubepods/podX/crio-abc", False, id="the-pod-itself"),
]


@pytest.mark.parametrize("found,named,expected", CGROUPS)
def test_compute_cgroup_matches(found: str, named: str, expected: bool) -> None:
    assert compute_cgroup_matches(found, named) is expected


def _tree(tmp_path: Any) -> Layout:
    root = tmp_path / "cg"
    (root / "kubepods/podX/crio-abc").mkdir(parents=True)
    (root / "system.slice").mkdir()
    return Layout(2, str(root), str(root), str(root))


def _proc(tmp_path: Any, pid: int, rel: str) -> str:
    d = tmp_path / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(f"0::{rel}\n")
    return str(tmp_path / "proc")


def test_no_cgroups_path_needs_the_id_in_the_name(tmp_path: Any) -> None:
    layout = _tree(tmp_path)
    proc = _proc(tmp_path, 7, "/kubepods/podX/crio-abc")
    dirs, how = locate_container(layout, "abc", 7, None, proc)
    assert dirs.cpuset.endswith("/kubepods/podX/crio-abc") and how.endswith("/7/cgroup")
    with pytest.raises(CgroupError, match="whose name does not contain the container id zzz, and config.json has no "
                                          "linux.cgroupsPath"):
        locate_container(layout, "zzz", 7, None, proc)


def test_mismatch_names_both(tmp_path: Any) -> None:
    layout = _tree(tmp_path)
    proc = _proc(tmp_path, 1, "/system.slice")
    with pytest.raises(CgroupError) as info:
        locate_container(layout, "abc", 1, "/kubepods/podX/crio-abc", proc, "/b/config.json")
    assert str(info.value) == (f"/b/config.json: process 1 is in /system.slice ({proc}/1/cgroup), not in "
                               "/kubepods/podX/crio-abc, the cgroup linux.cgroupsPath /kubepods/podX/crio-abc names: "
                               "the state names another process; refusing")


def test_find_link_names_the_first_link(tmp_path: Any) -> None:
    (tmp_path / "real/sub").mkdir(parents=True)
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert find_link(str(tmp_path / "link/sub/file")) == (str(tmp_path / "link"), str(tmp_path / "real"))
    assert find_link(str(tmp_path / "real/sub")) is None


def test_directory_link_out_of_the_root_is_named(tmp_path: Any) -> None:
    layout = _tree(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    os.rmdir(tmp_path / "cg/kubepods/podX/crio-abc")
    os.symlink(tmp_path / "elsewhere", tmp_path / "cg/kubepods/podX/crio-abc")
    with pytest.raises(CgroupError, match=f"through the symbolic link {tmp_path}/cg/kubepods/podX/crio-abc -> "
                                          f"{tmp_path}/elsewhere"):
        locate_container(layout, "abc", 0, "/kubepods/podX/crio-abc")


def test_write_never_follows_a_symlinked_file(tmp_path: Any) -> None:
    target = tmp_path / "outside"
    target.write_text("100000")
    os.symlink(target, tmp_path / "cpu.max")
    with pytest.raises(WriteError, match=f"is a symbolic link \\(to {target}\\); a cgroup file never is"):
        write_text(str(tmp_path / "cpu.max"), "max 100000")
    assert target.read_text() == "100000"
