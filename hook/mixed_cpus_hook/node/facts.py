"""The node's facts every decision needs: cgroup layout, shared CPUs, online CPUs, kubelet's checkpoint.

Read fresh for every event: kubelet rewrites its checkpoint whenever it assigns, moves or frees
exclusive CPUs (a new Guaranteed pod, an in-place resize, a restart), and a decision taken on an
old copy hands a container CPUs kubelet may already have given to another. A long-running
process (the NRI plugin) passes a FactsCache: each file is stat'ed per event and parsed again
only when its identity (inode, size, times) changed, so a fresh view costs a few stat calls.
kubelet replaces its checkpoint by rename, so a new version is always a new inode.
"""

from __future__ import annotations

import os

from ..core.cgroup import Layout, compute_mount_type
from ..core.cpuset import format_cpulist, parse_cpulist, require_subset
from ..core.errors import ConfigError, HookError
from . import cgroupfs as cg
from .config import (Config, compute_pool_quota_mcpu, is_pool, load_reserved_cpus, load_shared_cpus, online_file,
                     read_online_cpus, read_online_text)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Dict, FrozenSet, List, NamedTuple, Optional, Tuple

    from .kubelet import Checkpoint
else:
    from ..core.compat import NamedTuple


class NodeFacts(NamedTuple):
    """Facts about the node every command needs: the cgroup layout, the shared CPUs, kubelet's record."""

    layout: Layout
    shared: FrozenSet[int]
    shared_where: str
    online: FrozenSet[int] = frozenset()
    checkpoint: Optional[Checkpoint] = None  # kubelet's checkpoint of the static policy, or None
    checkpoint_note: str = ""  # why the checkpoint is not used, when it exists but is refused
    # Bumped by a FactsCache whenever a fact changed since the last read (0 without a cache).
    generation: int = 0
    # shared_cpus: pool. ``shared`` is then the pool as the facts give it: with exclusive_source
    # kubelet, kubelet's defaultCpuSet minus the reserved CPUs; with dra, every online CPU that is not
    # reserved (the claims are subtracted by the DRA engine, which knows them).
    pool: bool = False
    reserved: FrozenSet[int] = frozenset()
    # A mixed container's share of quota in millicpus when it is not the shared CPUs' count (the
    # pool's budget, pool_quota_cpus); None: |shared| x 1000.
    share_mcpu: Optional[int] = None


ABSENT = (-1, -1, -1, -1, -1)  # the stat key of a file that is not there (a node without kubelet's checkpoint)


def _stat_key(path: str) -> Optional[Tuple[int, int, int, int, int]]:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return ABSENT
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class FactsCache:
    """What a resident process keeps between events: each fact with the stat key it was read at."""

    def __init__(self) -> None:
        self._entries: Dict[str, Tuple[Any, Any]] = {}
        self._sysfs: Dict[str, Optional[int]] = {}  # path -> kept descriptor (None: not on sysfs)
        self._mounts: Optional[List[Tuple[str, str]]] = None
        self._last: Optional[NodeFacts] = None
        # What the last facts were built from: the config and the values the reads above gave
        # (the same objects while nothing changed, since a hit returns what was put).
        self._inputs: Tuple[Any, ...] = ()
        # What the reads of the last facts saw, for recheck: (config, online CPUs' file, its text,
        # checkpoint path, its stat key, shared CPUs' file or "", its stat key); None: read again.
        self._seen: Optional[Tuple[Any, ...]] = None
        self.generation = 0

    def get(self, name: str, key: Any) -> Tuple[bool, Any]:
        entry = self._entries.get(name)
        if entry is not None and key is not None and entry[0] == key:
            return True, entry[1]
        return False, None

    def put(self, name: str, key: Any, value: Any) -> None:
        self._entries[name] = (key, value)

    def mounts(self, proc_root: str) -> List[Tuple[str, str]]:
        """This process's mounts, read once (cgroupfs.read_mounts): the layout's lexical roots and
        whether the online CPUs are on sysfs are decided from them."""
        if self._mounts is None:
            self._mounts = cg.read_mounts(proc_root)
        return self._mounts

    def read_sysfs_text(self, path: str, proc_root: str) -> str:
        """read_online_text, through a descriptor kept open when ``path`` is on sysfs (a pread at
        offset 0 makes sysfs show the value again: one system call for three); a fake node's file
        (not on sysfs) is read as usual."""
        if path not in self._sysfs:
            self._sysfs[path] = _open_if_sysfs(path, self.mounts(proc_root))
        fd = self._sysfs[path]
        if fd is not None:
            try:
                return os.pread(fd, 65536, 0).decode("ascii").replace("\r\n", "\n").replace("\r", "\n")
            except (OSError, UnicodeDecodeError):
                os.close(fd)
                self._sysfs[path] = None  # read as usual from now on (and the error said there)
        return read_online_text(path)

    def settle(self, facts: NodeFacts, inputs: Tuple[Any, ...] = ()) -> NodeFacts:
        """``facts`` with this cache's generation, bumped when anything differs from the last read;
        ``inputs``: what they were built from (see unchanged)."""
        last = self._last
        if last is None or facts._replace(generation=last.generation) != last:
            self.generation += 1
        out = facts._replace(generation=self.generation)
        self._last = out
        self._inputs = inputs
        return out

    def recheck(self, config: Config) -> Optional[NodeFacts]:
        """The last facts, when the same reads read_node_facts makes (the online CPUs' text, the
        stat of kubelet's checkpoint and of the shared CPUs' file) give what they gave for them;
        else None (read_node_facts then reads through the entries). Those reads' hits would give
        back the very objects the last facts were built from (unchanged): the entries' get, put
        and comparisons are skipped on every event of a quiet node."""
        seen = self._seen
        if seen is None or seen[0] is not config:
            return None
        if self.read_sysfs_text(seen[1], config.proc_root) != seen[2]:
            return None
        if seen[3] and _stat_key(seen[3]) != seen[4]:  # a key seen is never None (unreadable)
            return None
        if seen[5] and _stat_key(seen[5]) != seen[6]:
            return None
        return self._last

    def note_seen(self, config: Config, facts: NodeFacts) -> None:
        """After read_node_facts gave ``facts``: what its reads saw, when each entry holds the very
        value the facts were built from (else recheck reads through the entries next time)."""
        self._seen = None
        entries = self._entries
        online, path = entries.get("online"), entries.get("online-file")
        if online is None or path is None or path[0] != config.sys_root or online[1] is not facts.online:
            return
        ckpt_path = getattr(config, "kubelet_state_file", "") or ""
        ckpt_key = None
        if ckpt_path:
            ckpt = entries.get("checkpoint:" + ckpt_path)
            if ckpt is None or ckpt[1][0] is not facts.checkpoint or ckpt[1][1] != facts.checkpoint_note:
                return
            ckpt_key = ckpt[0]
        shared_file, shared_key = "", None
        if not facts.pool and config.shared_cpus is None:
            shared = entries.get("shared")
            if shared is None or shared[1][0] is not facts.shared:
                return
            shared_file, shared_key = config.shared_cpus_file, shared[0]
        self._seen = (config, path[1], online[0], ckpt_path, ckpt_key, shared_file, shared_key)

    def unchanged(self, inputs: Tuple[Any, ...]) -> Optional[NodeFacts]:
        """The last facts when they were built from these very inputs (the same config and the same
        objects the reads gave: an unchanged file gives back what was put), else None. Facts built
        from the same immutable values again would be equal to them and would have passed the same
        checks: building, checking and comparing them is skipped on every event of a quiet node."""
        last = self._inputs
        if len(last) != len(inputs) or not inputs:
            return None
        for a, b in zip(last, inputs):
            if a is not b:
                return None
        return self._last


def _open_if_sysfs(path: str, mounts: List[Tuple[str, str]]) -> Optional[int]:
    """A read descriptor of ``path`` when the mount that holds it is sysfs, else None."""
    if compute_mount_type(mounts, path) != "sysfs":
        return None
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def read_checkpoint(config: Config, cache: Optional[FactsCache] = None) -> Tuple[Optional[Checkpoint], str]:
    """kubelet's checkpoint when it exists and is of the static policy; else None and why.

    A checkpoint that cannot be read or is not of kubelet's shape is refused with a note (the
    run falls back to the records and the cgroup); kubelet writes it atomically, so a
    half-written file is never seen.
    """
    path = getattr(config, "kubelet_state_file", "") or ""
    if not path:
        return None, ""
    key = _stat_key(path) if cache is not None else None
    if cache is not None:
        hit, value = cache.get("checkpoint:" + path, key)
        if hit:
            return value
    result = _parse_checkpoint_file(path)
    if cache is not None and key is not None and _stat_key(path) == key:
        cache.put("checkpoint:" + path, key, result)
    return result


def _parse_checkpoint_file(path: str) -> Tuple[Optional[Checkpoint], str]:
    from .kubelet import load_checkpoint

    try:
        ckpt = load_checkpoint(path)
    except HookError as exc:
        return None, f"kubelet checkpoint refused, using the records and cgroups instead: {exc}"
    if ckpt is None:
        return None, ""
    if ckpt.policy != "static":
        return None, f"kubelet checkpoint {path}: policy {ckpt.policy!r}, not 'static': not used"
    return ckpt, ""


def _read_shared(config: Config, cache: Optional[FactsCache]) -> Tuple[FrozenSet[int], str]:
    if cache is None:
        return load_shared_cpus(config)
    if config.shared_cpus is not None:  # the setting: parsed once per config text
        hit, value = cache.get("shared-setting", config.shared_cpus)
        if not hit:
            value = load_shared_cpus(config)
            cache.put("shared-setting", config.shared_cpus, value)
        return value
    key = _stat_key(config.shared_cpus_file)
    hit, value = cache.get("shared", key)
    if hit:
        return value
    value = load_shared_cpus(config)
    if key is not None:
        cache.put("shared", key, value)
    return value


def _read_online(config: Config, cache: Optional[FactsCache]) -> FrozenSet[int]:
    """The online CPUs, read every time (sysfs has no useful times); parsed again only when the text
    changed (the same frozenset meanwhile: what is computed from it can be kept by identity)."""
    if cache is None:
        return read_online_cpus(config.sys_root)
    hit, path = cache.get("online-file", config.sys_root)
    if not hit:
        path = online_file(config.sys_root)
        cache.put("online-file", config.sys_root, path)
    text = cache.read_sysfs_text(path, config.proc_root)
    hit, value = cache.get("online", text)
    if not hit:
        value = parse_cpulist(text, path)
        cache.put("online", text, value)
    return value


def _read_layout(config: Config, cache: Optional[FactsCache]) -> Layout:
    if cache is None:
        return cg.read_layout(config.cgroup_root)
    hit, value = cache.get("layout", config.cgroup_root)
    if not hit:
        # A resident process reads the mounts once: paths on cgroup file systems then need no stat
        # per event (Layout.lexical).
        value = cg.read_layout(config.cgroup_root, mounts=cache.mounts(config.proc_root))
        cache.put("layout", config.cgroup_root, value)
    return value


def read_node_facts(config: Config, cache: Optional[FactsCache] = None) -> NodeFacts:
    """Shared CPUs (must be online), the cgroup layout and kubelet's CPU manager checkpoint, now.

    With a ``cache`` a file is parsed again only when it changed (the online CPUs, one small
    sysfs read, always are); without one everything is read.
    """
    if cache is not None:
        last = cache.recheck(config)
        if last is not None:
            return last
        facts = _read_node_facts(config, cache)
        cache.note_seen(config, facts)
        return facts
    return _read_node_facts(config, None)


def _read_node_facts(config: Config, cache: Optional[FactsCache]) -> NodeFacts:
    online = _read_online(config, cache)
    checkpoint, note = read_checkpoint(config, cache)
    pool = is_pool(config)
    shared_read = None if pool else _read_shared(config, cache)
    inputs = (config, online, checkpoint, note, shared_read)
    if cache is not None:
        last = cache.unchanged(inputs)
        if last is not None:
            return last
    if pool:
        facts = _pool_facts(config, online, checkpoint, note, _read_layout(config, cache))
    else:
        assert shared_read is not None
        shared, where = shared_read
        require_subset(shared, online, "shared CPUs (offline or absent)", where)
        facts = NodeFacts(_read_layout(config, cache), shared, where, online, checkpoint, note)
    return cache.settle(facts, inputs) if cache is not None else facts


def _pool_facts(config: Config, online: FrozenSet[int], checkpoint: Optional[Checkpoint], note: str,
                layout: cg.Layout) -> NodeFacts:
    """The pool as the node's facts give it (see NodeFacts.pool)."""
    reserved = load_reserved_cpus(config)
    where = f"{config.source}: setting 'shared_cpus' (pool)"
    if config.exclusive_source == "dra":
        pool = online - reserved
        return NodeFacts(layout, pool, where + ": the online CPUs outside reserved_cpus, less the claims", online,
                         checkpoint, note, pool=True, reserved=reserved)
    if checkpoint is None:
        raise ConfigError("shared_cpus: pool with exclusive_source kubelet follows kubelet's checkpoint, and there is "
                          f"none to read ({note or config.kubelet_state_file + ': not there'}): is kubelet's CPU "
                          "manager policy static?", where)
    pool = (checkpoint.default & online) - reserved
    if not pool:
        raise ConfigError(f"the pool is empty: kubelet's defaultCpuSet {format_cpulist(checkpoint.default)} less "
                          f"reserved_cpus {format_cpulist(reserved)}", where)
    return NodeFacts(layout, pool, where + ": kubelet's defaultCpuSet less reserved_cpus", online, checkpoint, note,
                     pool=True, reserved=reserved, share_mcpu=compute_pool_quota_mcpu(config))
