"""Finding a container's cgroups and reading/writing the few files the hook touches.

Supports cgroup v1 (``cpuset`` and ``cpu`` hierarchies, ``cpu`` possibly a symlink to a
co-mounted ``cpu,cpuacct``), hybrid hosts (v1 controllers plus an empty cgroup2 at
``unified/``: the v1 controllers are used) and cgroup v2; the systemd and cgroupfs drivers;
crun's ``container`` subgroup. Every directory is resolved and must stay below the cgroup
root. Writes use os.write so that the kernel's refusal is seen at write(2).
"""

from __future__ import annotations

import os
import stat

from ..core.cgroup import (
    CRUN_SUBGROUP,
    Dirs,
    Layout,
    Quota,
    compute_cgroup_matches,
    compute_lexical_roots,
    compute_spec_cgroup,
    cpuset_file,
    effective_file,
    is_lexically_below,
    is_pod_dir_name,
    join_file,
    normalize_cgroup_path,
    parse_mountinfo,
    parse_proc_cgroup,
    parse_quota_v2,
    quota_file,
)
from ..core.cpuset import parse_cpulist
from ..core.errors import CgroupError, WriteError
from .files import FileRefused, KeptFds, read_regular_file

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Dict, FrozenSet, List, Optional, Tuple


def read_layout(cgroup_root: str = "/sys/fs/cgroup", mounts: Optional[List[Tuple[str, str]]] = None) -> Layout:
    """Detect v1 (or hybrid) versus v2 from what is mounted at ``cgroup_root``.

    With ``mounts`` (read_mounts: a resident process reads them once) the layout also says which
    controller roots are cgroup file systems with nothing mounted below (Layout.lexical): paths
    there are taken as spelled, without a stat per use. A container start does not read them.
    """
    layout = _read_layout(cgroup_root)
    if not mounts:
        return layout
    return layout._replace(lexical=compute_lexical_roots(mounts, (layout.cpuset_root, layout.cpu_root)))


MAX_MOUNTINFO_BYTES = 16 << 20


def read_mounts(proc_root: str = "/proc") -> List[Tuple[str, str]]:
    """(mount point, file system type) of this process's mounts; none when they cannot be read
    (then every path is resolved and every file read as without them)."""
    try:
        text = read_regular_file(os.path.join(proc_root, "self", "mountinfo"), MAX_MOUNTINFO_BYTES)
    except (OSError, FileRefused):
        return []
    return parse_mountinfo(text.decode("utf-8", "replace"))


def _read_layout(cgroup_root: str) -> Layout:
    root = os.path.realpath(cgroup_root)
    cpuset_v1 = os.path.join(root, "cpuset")
    if os.path.isfile(os.path.join(cpuset_v1, "cpuset.cpus")):
        for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
            cpu_v1 = os.path.join(root, name)
            if os.path.isfile(os.path.join(cpu_v1, "cpu.cfs_quota_us")):
                return Layout(1, root, cpuset_v1, resolve_inside_root(root, cpu_v1, "cpu hierarchy"))
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


# path -> (os.path.realpath(path), the (st_dev, st_ino) of the directory it named). Bounded.
_RESOLVED: Dict[str, Tuple[str, Tuple[int, int]]] = {}
# Paths found lexically below one of a layout's lexical roots (the tuple itself: the same layout),
# asked again on every event of their containers; pure, bounded as _RESOLVED is.
_LEXICAL: Dict[str, Tuple[str, ...]] = {}
MAX_RESOLVED = 4096


def _identity(path: str) -> Optional[Tuple[int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _realpath(path: str) -> str:
    """os.path.realpath(path), remembered: realpath costs one lstat per component (a dozen for a
    container's cgroup), on every event of a resident process.

    A path resolved before is taken again while it and its resolved form name the same directory
    (one stat, two when they differ): no symbolic link put on the way since can fake that. Else
    a last component that is not a symbolic link (or not there yet: a container's cgroup before
    the runtime makes it) resolves as its parent, remembered too, plus its name.
    """
    hit = _RESOLVED.get(path)
    if hit is not None:
        ident = _identity(path)
        if ident is not None and ident == hit[1] and (hit[0] == path or _identity(hit[0]) == ident):
            return hit[0]
    head, name = os.path.split(path)
    real = ""
    if os.path.isabs(path) and head != path and name not in ("", ".", ".."):
        try:
            link = stat.S_ISLNK(os.lstat(path).st_mode)
        except FileNotFoundError:
            return os.path.join(_realpath(head), name)  # not there: nothing to remember
        except OSError:
            link = True
        if not link:
            real = os.path.join(_realpath(head), name)
    if not real:
        real = os.path.realpath(path)
    ident = _identity(real)
    if ident is not None:
        if len(_RESOLVED) >= MAX_RESOLVED:
            _RESOLVED.clear()
        _RESOLVED[path] = (real, ident)
    return real


def forget_resolved(*paths: str) -> None:
    """Drop what ``_realpath`` remembers of these paths: a released container's cgroups are never
    asked for again, and a resident plugin sees a new container id for every container it ever
    places (each remembered path would stay until the bound clears them all)."""
    for path in paths:
        _RESOLVED.pop(path, None)
        _LEXICAL.pop(path, None)


def resolve_inside_root(root: str, path: str, what: str, lexical: Tuple[str, ...] = ()) -> str:
    """Resolve ``path`` and refuse it unless it is ``root`` or below it; the message names the link.

    A path of plain names below one of the ``lexical`` roots (Layout.lexical: a cgroup file system,
    which holds no link) is what it spells: returned as it is.
    """
    if lexical and _LEXICAL.get(path) is lexical:
        return path
    if _is_below_any(lexical, path):
        _remember_lexical(path, lexical)
        return path
    real = _realpath(path)
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


def join_plain_inside_root(base: str, rel: str, what: str, root: str, lexical: Tuple[str, ...] = ()) -> str:
    """``base + rel`` for a ``rel`` already checked to be "/name/name..." of plain names (no "",
    "." or ".." part: core.cgroup.compute_nri_cgroup's): below a lexical root it is what it
    spells, with no part to check again; elsewhere resolve_inside_root decides."""
    path = base.rstrip("/") + rel
    if base in lexical:
        _remember_lexical(path, lexical)  # the record's copy of it is checked by a lookup
        return path
    return resolve_inside_root(root, path, what, lexical)


def join_plain_in_lexical_roots(layout: Layout, rel: str, pod_rel: str) -> Optional[Tuple[Dirs, Dirs]]:
    """join_plain_inside_root of ``rel`` (a container's) and ``pod_rel`` (its pod's) under both
    controllers' roots, when both are lexical (then each path is what it spells, remembered as
    checked); None when either root is not (join_plain_inside_root resolves them one by one)."""
    lexical = layout.lexical
    if layout.cpuset_root not in lexical or layout.cpu_root not in lexical:
        return None
    cpuset, cpu = layout.cpuset_root.rstrip("/"), layout.cpu_root.rstrip("/")
    dirs, pod = Dirs(cpuset + rel, cpu + rel), Dirs(cpuset + pod_rel, cpu + pod_rel)
    if len(_LEXICAL) + 4 > MAX_RESOLVED:
        _LEXICAL.clear()
    _LEXICAL.update(((dirs[0], lexical), (dirs[1], lexical), (pod[0], lexical), (pod[1], lexical)))
    return dirs, pod


def _remember_lexical(path: str, lexical: Tuple[str, ...]) -> None:
    if len(_LEXICAL) >= MAX_RESOLVED:
        _LEXICAL.clear()
    _LEXICAL[path] = lexical


def join_inside_root(base: str, rel: str, what: str, root: str, lexical: Tuple[str, ...] = ()) -> str:
    """``base/rel`` resolved (resolve_inside_root); a ``rel`` with "." or ".." parts is refused."""
    parts = [p for p in rel.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise CgroupError(f"{what} {rel!r} climbs out of its hierarchy", root)
    return resolve_inside_root(root, os.path.join(base, *parts), what, lexical)


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
        join_inside_root(layout.cpuset_root, rel_cpuset, "container cgroup", layout.root, layout.lexical),
        join_inside_root(layout.cpu_root, rel_cpu, "container cgroup", layout.root, layout.lexical),
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
        norm = normalize_cgroup_path(rel)
        if cgroups_path:
            named = normalize_cgroup_path(compute_spec_cgroup(cgroups_path, spec_where))
            if not compute_cgroup_matches(rel, named):
                raise CgroupError(
                    f"process {pid} is in {norm} ({how}), not in {named}, the cgroup linux.cgroupsPath "
                    f"{cgroups_path} names: the state names another process; refusing", spec_where)
        elif container_id not in os.path.basename(_crun_parent(norm, container_id)):
            raise CgroupError(
                f"process {pid} is in {norm} ({how}), whose name does not contain the container id "
                f"{container_id}, and config.json has no linux.cgroupsPath: refusing", spec_where)


def find_pod(layout: Layout, dirs: Dirs) -> Optional[Dirs]:
    """The pod cgroup is the container's parent when it is named like one kubelet makes."""
    parents = Dirs(os.path.dirname(dirs.cpuset), os.path.dirname(dirs.cpu))
    if not all(is_pod_dir_name(os.path.basename(p)) for p in parents):
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


# Descriptors kept open, for the quota files of pods a resident process reads on every event of
# their containers (read_quota, verify) and writes when one joins or leaves: on a cgroup file system
# (Layout.lexical) a pread at offset 0 regenerates the file's content and a pwrite at 0 is one write
# to it, so one system call replaces three. Every kept descriptor is open for reading and writing;
# a file that cannot be opened so (a read-only mount) is read as usual, not kept. A descriptor of a
# removed cgroup fails (ENODEV) and is dropped; forget_kept drops a pod's when its record goes; at
# most MAX_KEPT, the oldest closed first.
MAX_KEPT = 64
_KEPT = KeptFds(MAX_KEPT)


def read_text_in(layout: Layout, path: str, keep: bool = False, below: bool = False) -> str:
    """read_text, through the descriptor kept for ``path`` if there is one; with ``keep`` (a pod's
    file) one is kept from now on when ``path`` is on a cgroup file system (Layout.lexical);
    ``below``: the caller knows it is (its directory is one join_plain_* gave below such a root)."""
    fd = _KEPT.get(path)
    if fd is not None:
        try:
            return os.pread(fd, 65536, 0).decode("ascii", "replace").strip()
        except OSError:
            forget_kept(path.rpartition("/")[0])  # the cgroup went: none of its descriptors reads any more
    if not keep or not (below or _is_below_any(layout.lexical, path)):
        return read_text(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:  # not writable here (a read-only mount), or not there: read as usual, which says why
        return read_text(path)
    try:
        text = os.pread(fd, 65536, 0).decode("ascii", "replace").strip()
    except OSError as exc:
        os.close(fd)
        raise CgroupError(f"cannot read: {exc.strerror}", path) from None
    _KEPT.keep(path, fd)
    return text


def _is_below_any(lexical: Tuple[str, ...], path: str) -> bool:
    """Whether ``path`` is lexically below one of the ``lexical`` roots (is_lexically_below)."""
    for base in lexical:
        if is_lexically_below(base, path):
            return True
    return False


def forget_kept(cgroup_dir: str) -> None:
    """Close the descriptors kept for the files of ``cgroup_dir`` (its pod record is gone): only
    that directory's (KeptFds indexes them), however many other pods' are kept."""
    _KEPT.close_in(cgroup_dir.rstrip("/"))


def read_quota(layout: Layout, d: str, keep: bool = False) -> Quota:
    """The CFS quota and period of cgroup ``d``; ``keep``: a pod's, read on every event of its
    containers (read_text_in keeps the descriptors)."""
    path = quota_file(layout, d)
    below = keep and _LEXICAL.get(d) is layout.lexical  # a pod's cgroup as join_plain_* gave it
    if layout.version == 2:
        return parse_quota_v2(read_text_in(layout, path, keep, below), path)
    try:
        quota = int(read_text_in(layout, path, keep, below))
        period = int(read_text_in(layout, join_file(d, "cpu.cfs_period_us"), keep, below))
    except ValueError:
        raise CgroupError("unexpected content in the CFS quota or period", d) from None
    return Quota(None if quota < 0 else quota, period)


def write_text(path: str, text: str) -> None:
    """Write one value with a single write(2), so the kernel's verdict reaches us (through the
    descriptor kept for ``path``, a pod's quota, when there is one)."""
    fd = _KEPT.get(path)
    if fd is not None:
        if _write_value(fd, path, text, kept=True):
            return
        forget_kept(path.rpartition("/")[0])  # the cgroup went: the open below says so
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
        _write_value(fd, path, text)
    finally:
        os.close(fd)


def _write_value(fd: int, path: str, text: str, kept: bool = False) -> bool:
    """One write(2) of ``text`` to ``fd`` (a kept descriptor: a pwrite at offset 0); False when a
    kept descriptor's cgroup was removed since (ENODEV): nothing written."""
    data = text.encode("ascii")
    try:
        if (os.pwrite(fd, data, 0) if kept else os.write(fd, data)) != len(data):
            raise WriteError(f"short write of {text!r}", path)
        return True
    except OSError as exc:
        import errno  # only on this failure path

        if kept and exc.errno == errno.ENODEV:
            return False
        hint: Dict[Optional[int], str] = {
            errno.EACCES: " (v1: not within the parent's cpuset?)", errno.EINVAL: " (above the parent's quota?)",
            errno.EBUSY: " (a child needs CPUs being removed)", errno.ENOSPC: " (empty cpuset on a populated cgroup)"}
        raise WriteError(f"kernel refused {text!r}: {exc.strerror}{hint.get(exc.errno, '')}", path) from None


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"

