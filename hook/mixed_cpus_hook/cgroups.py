"""Finding a container's cgroups and reading/writing the few files the hook touches.

Supports cgroup v1 (``cpuset`` and ``cpu`` hierarchies, ``cpu`` possibly a symlink to a
co-mounted ``cpu,cpuacct``), hybrid hosts (v1 controllers plus an empty cgroup2 at
``unified/``: the v1 controllers are used) and cgroup v2; the systemd and cgroupfs drivers;
crun's ``container`` subgroup. Every directory is resolved and must stay below the cgroup
root. Writes use os.write so that the kernel's refusal is seen at write(2).
"""

from __future__ import annotations

import os
import re

from .cpuset import parse_cpulist
from .errors import CgroupError, WriteError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import FrozenSet, List, NamedTuple, Optional, Tuple
else:
    from ._compat import NamedTuple

# A pod cgroup: cgroupfs "pod<uid>", systemd "kubepods[-qos]-pod<uid_with_underscores>.slice".
# Patterns are strings compiled on first use by re's own cache: a container start that does
# not need one does not pay for compiling it. \Z, not $: "$" also matches before a newline.
POD_DIR = r"^(?:pod[0-9A-Fa-f_-]+|(?:[A-Za-z0-9_]+-)*pod[0-9A-Fa-f_]+\.slice)\Z"
# runc's systemd cgroupsPath "slice:prefix:name".
SYSTEMD_PATH = r"^([A-Za-z0-9_.@\\:-]*\.slice|):([A-Za-z0-9_.-]+):([A-Za-z0-9_.@+-]+)\Z"
CRUN_SUBGROUP = "container"


class Layout(NamedTuple):
    """Where the controllers live: ``cpuset_root`` and ``cpu_root`` are the same dir on v2."""

    version: int
    root: str
    cpuset_root: str
    cpu_root: str


class Dirs(NamedTuple):
    """A cgroup as its two controller directories (identical on v2)."""

    cpuset: str
    cpu: str


class Quota(NamedTuple):
    """CFS bandwidth: ``quota`` None means unlimited ("max" / -1)."""

    quota: Optional[int]
    period: int


def read_layout(cgroup_root: str = "/sys/fs/cgroup") -> Layout:
    """Detect v1 (or hybrid) versus v2 from what is mounted at ``cgroup_root``."""
    root = os.path.realpath(cgroup_root)
    cpuset_v1 = os.path.join(root, "cpuset")
    if os.path.isfile(os.path.join(cpuset_v1, "cpuset.cpus")):
        for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
            cpu_v1 = os.path.join(root, name)
            if os.path.isfile(os.path.join(cpu_v1, "cpu.cfs_quota_us")):
                return Layout(1, root, cpuset_v1, _inside(root, cpu_v1, "cpu hierarchy"))
        raise CgroupError("cgroup v1 cpuset is mounted but no cpu controller hierarchy was found", root)
    try:
        # Binary read, then bytes.decode: open(encoding="ascii") would import encodings.ascii.
        with open(os.path.join(root, "cgroup.controllers"), "rb") as f:
            controllers = f.read().decode("ascii").split()
    except OSError:
        raise CgroupError("no cgroup v1 cpuset hierarchy and no cgroup v2 mount found", root) from None
    missing = [c for c in ("cpuset", "cpu") if c not in controllers]
    if missing:
        raise CgroupError(f"cgroup v2 without the {' and '.join(missing)} controller", root)
    return Layout(2, root, root, root)


def _inside(root: str, path: str, what: str) -> str:
    """Resolve ``path`` and refuse it unless it is ``root`` or below it; the message names the link."""
    real = os.path.realpath(path)
    if not _is_below(root, real):
        link = find_link(path)
        via = f" (through the symbolic link {link[0]} -> {link[1]})" if link else ""
        raise CgroupError(f"{what} {path} resolves to {real}, outside the cgroup root{via}", root)
    return real


def _is_below(root: str, real: str) -> bool:
    return real == root or real.startswith(root.rstrip("/") + "/")


def find_link(path: str) -> Optional[Tuple[str, str]]:
    """The first symbolic link on ``path`` (deepest-last walk from "/"), and what it points to."""
    cur = "/"
    for part in [p for p in os.path.abspath(path).split("/") if p]:
        cur = os.path.join(cur, part)
        if os.path.islink(cur):
            try:
                return cur, os.readlink(cur)
            except OSError:
                return cur, "?"
    return None


def _join(base: str, rel: str, what: str, root: str) -> str:
    parts = [p for p in rel.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise CgroupError(f"{what} {rel!r} climbs out of its hierarchy", root)
    return _inside(root, os.path.join(base, *parts), what)


def parse_proc_cgroup(text: str) -> dict:
    """Map controller (or "" for v2) to cgroup path from /proc/<pid>/cgroup text."""
    paths = {}
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        controllers = fields[1].split(",") if fields[1] else [""]
        for c in controllers:
            paths[c] = fields[2]
    return paths


def compute_systemd_path(cgroups_path: str) -> Optional[str]:
    """Expand runc's systemd form "slice:prefix:name" into a path; None if not that form."""
    m = re.match(SYSTEMD_PATH, cgroups_path)
    if not m:
        return None
    slice_name, prefix, name = m.groups()
    parts = []
    if slice_name and slice_name != "-.slice":
        stem = slice_name[: -len(".slice")]
        if not stem or stem.startswith("-") or stem.endswith("-") or "--" in stem:
            return None
        words = stem.split("-")
        parts = ["-".join(words[: i + 1]) + ".slice" for i in range(len(words))]
    unit = name if name.endswith(".slice") else f"{prefix}-{name}.scope"
    return "/" + "/".join(parts + [unit])


def compute_slice_path(slice_name: str) -> Optional[str]:
    """The cgroup path of a systemd slice ("kubepods-burstable.slice" -> "/kubepods.slice/kubepods-
    burstable.slice"); None when it is not a slice name systemd would make."""
    full = compute_systemd_path(f"{slice_name}:p:x")
    return None if full is None or not slice_name.endswith(".slice") else os.path.dirname(full)


def compute_nri_cgroup(cgroups_path: str, cid: str, pod_uid: str, cgroup_parent: str, where: str) -> Tuple[str, str]:
    """(container, pod) cgroup paths, relative to a hierarchy's root, that NRI names for a container.

    ``cgroups_path`` (cgroupfs ``/kubepods/<qos>/pod<uid>/<name>`` or systemd ``<pod slice>:<prefix>:
    <name>``) must name a container cgroup whose parent is the cgroup of pod ``pod_uid`` (cgroupfs
    ``pod<uid>``, systemd ``...-pod<uid with _>.slice``) and whose own name is the container id
    (containerd's cgroupfs ``<id>``, CRI-O's ``crio-<id>``, systemd ``<prefix>-<id>.scope``); ``cgroup_parent`` (the pod's), when given, must name that same pod
    cgroup. Anything else (a QoS or the kubepods cgroup, the pod cgroup itself, another pod's or
    another container's cgroup, ``..``) is refused with a CgroupError: nothing is written there.
    """
    from .bounds import MAX_CGROUPS_PATH, MAX_PATH_COMPONENT, check_length, check_uid
    from .log import quote

    check_length(cgroups_path, MAX_CGROUPS_PATH, "linux.cgroups_path", where, CgroupError)
    check_length(cgroup_parent, MAX_CGROUPS_PATH, "the pod's linux.cgroup_parent", where, CgroupError)
    check_uid(pod_uid, where)
    rel = compute_systemd_path(cgroups_path) if ":" in cgroups_path else cgroups_path
    if rel is None:
        raise CgroupError(f"linux.cgroups_path {quote(cgroups_path)} is neither a path nor slice:prefix:name", where)
    parts = [p for p in rel.split("/") if p]
    if any(p in (".", "..") or len(p) > MAX_PATH_COMPONENT for p in parts):
        raise CgroupError(f"linux.cgroups_path {quote(cgroups_path)} climbs out of its hierarchy or has a component "
                          f"longer than {MAX_PATH_COMPONENT}", where)
    if len(parts) < 2 or not compute_pod_matches(parts[-2], pod_uid):
        raise CgroupError(f"linux.cgroups_path {quote(cgroups_path)} is not a container cgroup inside the cgroup of "
                          f"pod {pod_uid}: refusing to touch it", where)
    leaf = parts[-1][:-len(".scope")] if parts[-1].endswith(".scope") else parts[-1]
    if not cid or not (leaf == cid or leaf.endswith("-" + cid)):
        raise CgroupError(f"linux.cgroups_path {quote(cgroups_path)} names a cgroup that is not named after the "
                          f"container id {quote(cid)} (<id>, <prefix>-<id> or <prefix>-<id>.scope): refusing to "
                          "touch it", where)
    pod = "/" + "/".join(parts[:-1])
    if cgroup_parent:
        named = _norm(cgroup_parent) if "/" in cgroup_parent else compute_slice_path(cgroup_parent)
        if named != pod:
            raise CgroupError(f"the pod's linux.cgroup_parent {quote(cgroup_parent)} is not {pod}, the pod cgroup "
                              f"linux.cgroups_path {quote(cgroups_path)} is in: refusing", where)
    return "/" + "/".join(parts), pod


def _norm(rel: str) -> str:
    return "/" + "/".join(p for p in rel.split("/") if p)


def compute_spec_cgroup(cgroups_path: str, spec_where: str) -> str:
    """The cgroup (relative to a hierarchy's root) that config.json's linux.cgroupsPath names."""
    rel = compute_systemd_path(cgroups_path) if ":" in cgroups_path else cgroups_path
    if rel is None:
        raise CgroupError(f"linux.cgroupsPath {cgroups_path!r} is neither a path nor slice:prefix:name", spec_where)
    return rel


def compute_cgroup_matches(found: str, named: str) -> bool:
    """The cgroup a process is in is the one linux.cgroupsPath names, or crun's subgroup of it."""
    found, named = _norm(found), _norm(named)
    return found == named or found == named.rstrip("/") + "/" + CRUN_SUBGROUP


def compute_pod_matches(pod_dir_name: str, pod_uid: str) -> bool:
    """A pod cgroup's name is the pod's: cgroupfs ``pod<uid>``, systemd ``...-pod<uid_with_underscores>.slice``."""
    if not pod_uid or "/" in pod_uid:
        return False
    if pod_dir_name == f"pod{pod_uid}":
        return True
    uid = pod_uid.replace("-", "_")
    return pod_dir_name.endswith(f"-pod{uid}.slice") or pod_dir_name == f"pod{uid}.slice"


def _crun_parent(path: str, container_id: str) -> str:
    """crun on v2 with systemd puts the process in "<scope>/container"; the scope is the container."""
    head, tail = os.path.split(path.rstrip("/"))
    if tail == CRUN_SUBGROUP and container_id in os.path.basename(head):
        return head
    return path


def locate_container(layout: Layout, container_id: str, pid: int, cgroups_path: Optional[str],
                     proc_root: str = "/proc", spec_where: str = "config.json") -> Tuple[Dirs, str]:
    """The container's cgroup dirs and how they were found.

    /proc/<pid>/cgroup says where the process is; it must be the cgroup ``cgroupsPath`` from
    config.json names (or crun's subgroup of it): a state naming another process (pid 1,
    another container) is refused, naming both. Without a ``cgroupsPath`` the cgroup's name
    must contain the container id. ``cgroupsPath`` alone is used when the process is gone,
    as in a manual run.
    """
    text = None
    if pid > 0:
        try:
            with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            text = None
    if text is not None:
        paths = parse_proc_cgroup(text)
        if layout.version == 1:
            rel_cpuset, rel_cpu = paths.get("cpuset"), paths.get("cpu")
        else:
            rel_cpuset = rel_cpu = paths.get("")
        if rel_cpuset is None or rel_cpu is None:
            raise CgroupError(f"process {pid} is in no cgroup of the cpuset/cpu controllers", f"{proc_root}/{pid}/cgroup")
        how = f"{proc_root}/{pid}/cgroup"
    elif cgroups_path:
        rel_cpuset = rel_cpu = compute_spec_cgroup(cgroups_path, spec_where)
        how = f"linux.cgroupsPath {cgroups_path}"
    else:
        raise CgroupError(f"process {pid} is gone and there is no linux.cgroupsPath", spec_where)
    found = (rel_cpuset, rel_cpu)
    rel_cpuset = _crun_parent(rel_cpuset, container_id)
    rel_cpu = _crun_parent(rel_cpu, container_id)
    if rel_cpuset.strip("/") == "" or rel_cpu.strip("/") == "":
        named = f" (linux.cgroupsPath names {cgroups_path})" if cgroups_path else ""
        raise CgroupError(f"the container is in the root cgroup; refusing to change the whole node{named}", how)
    dirs = Dirs(
        _join(layout.cpuset_root, rel_cpuset, "container cgroup", layout.root),
        _join(layout.cpu_root, rel_cpu, "container cgroup", layout.root),
    )
    if text is not None:
        _check_same_cgroup(found, cgroups_path, container_id, pid, how, spec_where)
    for d in dict.fromkeys(dirs):  # cpuset first: an ordered dedupe keeps the message reproducible
        if not os.path.isdir(d):
            raise CgroupError(f"container cgroup not found (from {how})", d)
    return dirs, how


def _check_same_cgroup(found: Tuple[str, str], cgroups_path: Optional[str], container_id: str, pid: int,
                       how: str, spec_where: str) -> None:
    """The process's cgroup must be this container's, as config.json names it."""
    for rel in dict.fromkeys(found):
        if cgroups_path:
            named = _norm(compute_spec_cgroup(cgroups_path, spec_where))
            if not compute_cgroup_matches(rel, named):
                raise CgroupError(
                    f"process {pid} is in {_norm(rel)} ({how}), not in {named}, the cgroup linux.cgroupsPath "
                    f"{cgroups_path} names: the state names another process; refusing", spec_where)
        elif container_id not in os.path.basename(_crun_parent(_norm(rel), container_id)):
            raise CgroupError(
                f"process {pid} is in {_norm(rel)} ({how}), whose name does not contain the container id "
                f"{container_id}, and config.json has no linux.cgroupsPath: refusing", spec_where)


def find_pod(layout: Layout, dirs: Dirs) -> Optional[Dirs]:
    """The pod cgroup is the container's parent when it is named like one kubelet makes."""
    parents = Dirs(os.path.dirname(dirs.cpuset), os.path.dirname(dirs.cpu))
    if not all(re.match(POD_DIR, os.path.basename(p)) for p in parents):
        return None
    return parents


def ancestors(layout: Layout, cpuset_dir: str) -> List[str]:
    """cpuset dirs from just below the hierarchy root down to ``cpuset_dir``'s parent."""
    rel = os.path.relpath(os.path.dirname(cpuset_dir), layout.cpuset_root)
    out: List[str] = []
    if rel == ".":
        return out
    cur = layout.cpuset_root
    for part in rel.split("/"):
        cur = os.path.join(cur, part)
        out.append(cur)
    return out


def cpuset_file(layout: Layout, d: str) -> str:
    return os.path.join(d, "cpuset.cpus")


def effective_file(layout: Layout, d: str) -> str:
    return os.path.join(d, "cpuset.effective_cpus" if layout.version == 1 else "cpuset.cpus.effective")


def quota_file(layout: Layout, d: str) -> str:
    return os.path.join(d, "cpu.cfs_quota_us" if layout.version == 1 else "cpu.max")


def read_text(path: str) -> str:
    """One cgroupfs file, stripped; a CgroupError names it when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise CgroupError(f"cannot read: {exc.strerror}", path) from None
    try:
        return os.read(fd, 65536).decode("ascii", "replace").strip()
    except OSError as exc:
        raise CgroupError(f"cannot read: {exc.strerror}", path) from None
    finally:
        os.close(fd)


def read_cpus(layout: Layout, d: str) -> FrozenSet[int]:
    """The cpuset a cgroup asks for; on v2 an empty request means it inherits its effective set."""
    path = cpuset_file(layout, d)
    cpus = parse_cpulist(read_text(path), path)
    if not cpus and layout.version == 2:
        eff = effective_file(layout, d)
        cpus = parse_cpulist(read_text(eff), eff)
    return cpus


def read_requested_cpus(layout: Layout, d: str) -> FrozenSet[int]:
    """cpuset.cpus exactly as written (may be empty on v2)."""
    path = cpuset_file(layout, d)
    return parse_cpulist(read_text(path), path)


def read_effective_cpus(layout: Layout, d: str) -> FrozenSet[int]:
    path = effective_file(layout, d)
    return parse_cpulist(read_text(path), path)


def parse_quota_v2(text: str, where: str) -> Quota:
    fields = text.split()
    try:
        if len(fields) != 2:
            raise ValueError
        period = int(fields[1])
        quota = None if fields[0] == "max" else int(fields[0])
    except ValueError:
        raise CgroupError(f"unexpected content {text!r}", where) from None
    return Quota(quota, period)


def read_quota(layout: Layout, d: str) -> Quota:
    path = quota_file(layout, d)
    if layout.version == 2:
        return parse_quota_v2(read_text(path), path)
    try:
        quota = int(read_text(path))
        period = int(read_text(os.path.join(d, "cpu.cfs_period_us")))
    except ValueError:
        raise CgroupError("unexpected content in the CFS quota or period", d) from None
    return Quota(None if quota < 0 else quota, period)


def format_quota(layout: Layout, quota: Quota) -> str:
    """The text to write into the quota file (v1 cfs_quota_us, v2 cpu.max)."""
    if layout.version == 1:
        return "-1" if quota.quota is None else str(quota.quota)
    return f"{'max' if quota.quota is None else quota.quota} {quota.period}"


def write_text(path: str, text: str) -> None:
    """Write one value with a single write(2), so the kernel's verdict reaches us."""
    try:
        # O_TRUNC is a no-op on cgroupfs (like the shell's ">"), but on a plain file (a fake
        # node) a shorter value must not leave the tail of the longer old one behind.
        # O_NOFOLLOW: a cgroup file is never a symbolic link; one planted there must not
        # redirect the write (e.g. a pod's quota file pointing at a file outside the root).
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
    except OSError as exc:
        if os.path.islink(path):
            raise WriteError(f"is a symbolic link (to {_readlink(path)}); a cgroup file never is: refusing to write "
                             "through it", path) from None
        raise WriteError(f"cannot open for writing: {exc.strerror}", path) from None
    try:
        data = text.encode("ascii")
        if os.write(fd, data) != len(data):
            raise WriteError(f"short write of {text!r}", path)
    except OSError as exc:
        import errno  # only on this failure path

        hint = {errno.EACCES: " (v1: not within the parent's cpuset?)", errno.EINVAL: " (above the parent's quota?)",
                errno.EBUSY: " (a child needs CPUs being removed)", errno.ENOSPC: " (empty cpuset on a populated cgroup)"}
        raise WriteError(f"kernel refused {text!r}: {exc.strerror}{hint.get(exc.errno, '')}", path) from None
    finally:
        os.close(fd)


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"
