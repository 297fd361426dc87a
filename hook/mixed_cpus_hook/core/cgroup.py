"""The kernel's cgroup interface as plain data: layouts, cgroup dirs, quotas, file names and values.

Pure: nothing here reads or writes a file. ``node.cgroupfs`` does the I/O with these.
"""

from __future__ import annotations

import os

from .bounds import MAX_CGROUPS_PATH, MAX_PATH_COMPONENT, check_length, check_uid, quote
from .errors import CgroupError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Iterable, List, NamedTuple, Optional, Tuple
else:
    from .compat import NamedTuple

# A pod cgroup: cgroupfs "pod<uid>", systemd "kubepods[-qos]-pod<uid_with_underscores>.slice".
# The patterns say what is_pod_dir_name and split_systemd_path match, by hand (compiling a
# regular expression costs every container start ~0.1 ms; see core.validate's patterns).
POD_DIR = r"^(?:pod[0-9A-Fa-f_-]+|(?:[A-Za-z0-9_]+-)*pod[0-9A-Fa-f_]+\.slice)\Z"
# runc's systemd cgroupsPath "slice:prefix:name".
SYSTEMD_PATH = r"^([A-Za-z0-9_.@\\:-]*\.slice|):([A-Za-z0-9_.-]+):([A-Za-z0-9_.@+-]+)\Z"
CRUN_SUBGROUP = "container"
_WORD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
_HEX = "0123456789ABCDEFabcdef"
_SLICE_CHARS = _WORD + ".@\\:-"
_PREFIX_CHARS = _WORD + ".-"
_NAME_CHARS = _WORD + ".@+-"


def is_pod_dir_name(name: str) -> bool:
    """True for a directory named like a pod cgroup kubelet makes (``POD_DIR``)."""
    if name.startswith("pod") and len(name) > 3 and not name[3:].strip(_HEX + "_-"):
        return True
    if not name.endswith(".slice"):
        return False
    *words, last = name[: -len(".slice")].split("-")
    return (len(last) > 3 and last.startswith("pod") and not last[3:].strip(_HEX + "_")
            and all(w and not w.strip(_WORD) for w in words))


def split_systemd_path(cgroups_path: str) -> Optional[Tuple[str, str, str]]:
    """(slice, prefix, name) of runc's systemd form "slice:prefix:name" (``SYSTEMD_PATH``); None if not that form.

    The slice may hold colons itself; the prefix and name may not, so the last two colons split.
    """
    fields = cgroups_path.rsplit(":", 2)
    if len(fields) != 3:
        return None
    slice_name, prefix, name = fields
    if slice_name and (not slice_name.endswith(".slice") or slice_name.strip(_SLICE_CHARS)):
        return None
    if not prefix or prefix.strip(_PREFIX_CHARS) or not name or name.strip(_NAME_CHARS):
        return None
    return slice_name, prefix, name


class Layout(NamedTuple):
    """Where the controllers live: ``cpuset_root`` and ``cpu_root`` are the same dir on v2."""

    version: int
    root: str
    cpuset_root: str
    cpu_root: str
    # The controller roots that are cgroup file systems with nothing mounted below them
    # (compute_lexical_roots; node.cgroupfs.read_layout finds them when given a mountinfo). A
    # cgroup file system holds no symbolic link, so below such a root a path whose parts are
    # plain names is the directory it spells: it needs no resolving (is_lexically_below).
    lexical: Tuple[str, ...] = ()


def parse_mountinfo(text: str) -> List[Tuple[str, str]]:
    """(mount point, file system type) of each line of /proc/<pid>/mountinfo, in order.

    A mount point's space, tab, newline and backslash come octal-escaped (``\\040``); they are
    unescaped. Lines that are not of that shape are skipped.
    """
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split(" ")
        kind = right.split(" ", 1)[0]
        if not sep or len(fields) < 5 or not kind:
            continue
        point = fields[4]
        if "\\" in point:
            for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
                point = point.replace(code, char)
        mounts.append((point, kind))
    return mounts


def compute_lexical_roots(mounts: Iterable[Tuple[str, str]], roots: Iterable[str]) -> Tuple[str, ...]:
    """The ``roots`` (real paths) that are cgroup or cgroup2 mounts (the last mount there: the one
    seen) with no other mount below them: where a path needs no resolving (Layout.lexical)."""
    mounts = list(mounts)
    out = []
    for root in dict.fromkeys(roots):
        kinds = [kind for point, kind in mounts if point == root]
        below = any(point.startswith(root.rstrip("/") + "/") for point, _ in mounts)
        if kinds and kinds[-1] in ("cgroup", "cgroup2") and not below:
            out.append(root)
    return tuple(out)


def compute_mount_type(mounts: Iterable[Tuple[str, str]], path: str) -> str:
    """The file system type of the mount that holds ``path`` (the deepest, the last of equals); ""
    when none does."""
    best, kind = -1, ""
    for point, fs in mounts:
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= best:
            best, kind = len(point), fs
    return kind


def is_lexically_below(base: str, path: str) -> bool:
    """``path`` is ``base/<name>/<name>...``: plain names only (no "", ".", ".." part)."""
    if not path.startswith(base) or path[len(base):len(base) + 1] != "/":
        return False
    parts = path[len(base) + 1:].split("/")
    return "" not in parts and "." not in parts and ".." not in parts


class Dirs(NamedTuple):
    """A cgroup as its two controller directories (identical on v2)."""

    cpuset: str
    cpu: str


class Quota(NamedTuple):
    """CFS bandwidth: ``quota`` None means unlimited ("max" / -1)."""

    quota: Optional[int]
    period: int


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
    fields = split_systemd_path(cgroups_path)
    if fields is None:
        return None
    slice_name, prefix, name = fields
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
    check_length(cgroups_path, MAX_CGROUPS_PATH, "linux.cgroups_path", where, CgroupError)
    check_length(cgroup_parent, MAX_CGROUPS_PATH, "the pod's linux.cgroup_parent", where, CgroupError)
    check_uid(pod_uid, where)
    rel = compute_systemd_path(cgroups_path) if ":" in cgroups_path else cgroups_path
    if rel is None:
        raise CgroupError(f"linux.cgroups_path {quote(cgroups_path)} is neither a path nor slice:prefix:name", where)
    parts = list(filter(None, rel.split("/")))
    if "." in parts or ".." in parts or (parts and max(map(len, parts)) > MAX_PATH_COMPONENT):
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
        named = normalize_cgroup_path(cgroup_parent) if "/" in cgroup_parent else compute_slice_path(cgroup_parent)
        if named != pod:
            raise CgroupError(f"the pod's linux.cgroup_parent {quote(cgroup_parent)} is not {pod}, the pod cgroup "
                              f"linux.cgroups_path {quote(cgroups_path)} is in: refusing", where)
    return "/" + "/".join(parts), pod


def normalize_cgroup_path(rel: str) -> str:
    """A cgroup path in one spelling: ``a//b/`` -> ``/a/b``."""
    return "/" + "/".join(filter(None, rel.split("/")))


def compute_spec_cgroup(cgroups_path: str, spec_where: str) -> str:
    """The cgroup (relative to a hierarchy's root) that config.json's linux.cgroupsPath names."""
    rel = compute_systemd_path(cgroups_path) if ":" in cgroups_path else cgroups_path
    if rel is None:
        raise CgroupError(f"linux.cgroupsPath {cgroups_path!r} is neither a path nor slice:prefix:name", spec_where)
    return rel


def compute_cgroup_matches(found: str, named: str) -> bool:
    """The cgroup a process is in is the one linux.cgroupsPath names, or crun's subgroup of it."""
    found, named = normalize_cgroup_path(found), normalize_cgroup_path(named)
    return found == named or found == named.rstrip("/") + "/" + CRUN_SUBGROUP


def compute_pod_matches(pod_dir_name: str, pod_uid: str) -> bool:
    """A pod cgroup's name is the pod's: cgroupfs ``pod<uid>``, systemd ``...-pod<uid_with_underscores>.slice``."""
    if not pod_uid or "/" in pod_uid:
        return False
    if pod_dir_name == f"pod{pod_uid}":
        return True
    uid = pod_uid.replace("-", "_")
    return pod_dir_name.endswith(f"-pod{uid}.slice") or pod_dir_name == f"pod{uid}.slice"


def join_file(d: str, name: str) -> str:
    """os.path.join(d, name) for a plain file ``name`` (no "/"): the cgroup files' paths, built on
    every event of a resident process."""
    return d + name if not d or d[-1] == "/" else d + "/" + name


def cpuset_file(layout: Layout, d: str) -> str:
    return join_file(d, "cpuset.cpus")


def effective_file(layout: Layout, d: str) -> str:
    return join_file(d, "cpuset.effective_cpus" if layout.version == 1 else "cpuset.cpus.effective")


def quota_file(layout: Layout, d: str) -> str:
    return join_file(d, "cpu.cfs_quota_us" if layout.version == 1 else "cpu.max")


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


def format_quota(layout: Layout, quota: Quota) -> str:
    """The text to write into the quota file (v1 cfs_quota_us, v2 cpu.max)."""
    if layout.version == 1:
        return "-1" if quota.quota is None else str(quota.quota)
    return f"{'max' if quota.quota is None else quota.quota} {quota.period}"
