#!/usr/bin/env python3
"""Run ``mixed-cpus-hook nri`` doing the product's duties in the leanest straight-line Python: a
measuring device, never a product mode.

``benchmarks/nri_reference.py --duties`` runs the plugin through this (the reference tool's
NRI_REFERENCE_WRAP, with the plugin's own interpreter). ``nri_go_work.py`` measures the floor of a
Python plugin doing the Go reference plugin's work; this measures the floor of one that also does
every duty the product keeps on the request path, each with the system calls the product makes
for it (``strace`` of one Create, Update and Stop of the real handlers, 2026-12-05) and no more
Python than the duty needs: one function per event, no engine, no layers, no record classes.

CreateContainer of an asking container (cgroupfs paths, no DRA, as in the tool):
  the annotations counted and bounded, the ids, names and uid checked as plain names, the cgroup
  paths bounded and checked lexically inside the cgroup root, the cpulist bounded and parsed
  within the online CPUs, the quota and period bounded; the online CPUs read (a kept sysfs
  descriptor, pread) and kubelet's checkpoint looked up (a stat; read and parsed when it
  changed); the pod cgroup's existence checked; the state lock (the lock file's stat, flock);
  the container's and the pod's records looked up (openat in kept directory descriptors, the
  directory's fstat when missing); without a checkpoint entry, every other container record
  listed and its exclusive CPUs checked disjoint; the pod's quota and period read through kept
  descriptors; the container cgroup's stat; the pod record (the raise listed) then the container
  record journaled (one pwrite each in the lock file, as the plugin's store does); the pod's quota
  written and read back; once the answer is sent, each record written (a temporary created,
  written, fstat, closed, renamed), the journal emptied, the lock released, one log line written.
UpdateContainer: the record's stat; the online CPUs and the checkpoint; the lock; both records'
  stats (their parsed copies remembered by identity); the pod's quota and period read; the
  answer's cpus (kubelet's ∪ shared) and quota.
StopContainer: the record's stat; the facts; the lock; the container record journaled as releasing;
  the container cgroup's stat; the pod record's stat; the pod's quota read, lowered, the pod
  record's removal journaled (last member) and its descriptors closed; the container record's
  removal journaled; after the answer, as for a creation.

Its ratios to the Go plugin are the floor of a Python plugin that keeps the product's guarantees on
this framework; the product's ratios above them are what its structure costs.

    PYTHON nri_duties.py MIXED-CPUS-HOOK-ARGV...

The handlers are patched on the class before the plugin builds its method table.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class Refused(Exception):
    """A request the device does not handle (the product would answer it with its error)."""


def install() -> Dict[str, Any]:  # noqa: C901 - the closures are the device: one straight-line function per event
    """Replace the container handlers with the duties' straight-line work; returns the device's
    state (tracked containers, kept descriptors, remembered records), for its test."""
    from mixed_cpus_hook.core.bounds import (MAX_ANNOTATIONS, MAX_ANNOTATIONS_BYTES, MAX_CGROUPS_PATH,
                                             MAX_CPULIST_TEXT, MAX_ID, MAX_NAME, MAX_PERIOD, MAX_QUOTA, MAX_UID)
    from mixed_cpus_hook.core.cpuset import format_cpulist, parse_cpulist
    from mixed_cpus_hook.frontends.nri import handlers as h
    from mixed_cpus_hook.frontends.nri.wire import api
    from mixed_cpus_hook.node.facts import online_file, read_node_facts

    st: Dict[str, Any] = {"tracked": {}, "quota_fds": {}, "records": {}, "held": [], "ckpt": (None, None),
                          "journal": [], "jsize": 0, "overlay": {}}
    encoder = json.JSONEncoder(sort_keys=True)

    def setup(self: Any) -> Dict[str, Any]:
        if "cdir" not in st:
            config = self.config
            state = config.state_dir
            for sub in ("containers", "pods"):
                os.makedirs(os.path.join(state, sub), mode=0o755, exist_ok=True)
            st["state"] = state
            st["cdir"] = os.open(os.path.join(state, "containers"), DIR_FLAGS)
            st["pdir"] = os.open(os.path.join(state, "pods"), DIR_FLAGS)
            st["lock_path"] = os.path.join(state, "lock")
            st["lock"] = os.open(st["lock_path"], os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            st["online_fd"] = os.open(online_file(config.sys_root), os.O_RDONLY | os.O_CLOEXEC)
            st["shared"] = shared = read_node_facts(config).shared
            st["shared_text"] = format_cpulist(shared)
            st["share"] = len(shared)
            st["root"] = config.cgroup_root.rstrip("/")
            st["ckpt_path"] = config.kubelet_state_file
            st["prefix"] = config.annotation_prefix + "/"
            st["allowed"] = tuple(config.allowed_namespaces)
            st["online"] = (b"", frozenset())
        return st

    def plain(value: str, limit: int, what: str) -> str:
        if not value or len(value) > limit or not PLAIN.fullmatch(value):
            raise Refused(f"{what} {value[:80]!r}")
        return value

    def inside(root: str, rel: str) -> str:
        if len(rel) > MAX_CGROUPS_PATH or not rel.startswith("/"):
            raise Refused(f"cgroup path {rel[:80]!r}")
        for part in rel[1:].split("/"):
            if part in ("", ".", "..") or len(part) > 255:
                raise Refused(f"cgroup path {rel[:80]!r}")
        return root + rel

    def annotations(field: Any) -> Dict[str, str]:
        if len(field) > MAX_ANNOTATIONS:
            raise Refused("too many annotations")
        out = {e.key: e.value for e in field}
        if sum(map(len, out)) + sum(map(len, out.values())) > MAX_ANNOTATIONS_BYTES:
            raise Refused("annotations too long")
        return out

    def online(s: Dict[str, Any]) -> frozenset:
        text = os.pread(s["online_fd"], 4096, 0)
        if text != s["online"][0]:
            s["online"] = (text, parse_cpulist(text.decode("ascii").strip(), "online"))
        return s["online"][1]

    def checkpoint(s: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        try:
            sb = os.stat(s["ckpt_path"], follow_symlinks=False)
        except OSError:
            return None
        key = (sb.st_ino, sb.st_size, sb.st_mtime_ns)
        if s["ckpt"][0] != key:
            with open(s["ckpt_path"], "rb") as f:
                s["ckpt"] = (key, json.loads(f.read(1 << 20)).get("entries") or {})
        return s["ckpt"][1]

    def lock(s: Dict[str, Any]) -> None:
        if s["journal"]:  # still held for the last answer's records: done first
            done(s)
            return
        os.stat(s["lock_path"], follow_symlinks=False)
        fcntl.flock(s["lock"], fcntl.LOCK_EX)

    def unlock(s: Dict[str, Any]) -> None:
        if not s["journal"]:  # else held until the answer is sent (after_answer)
            fcntl.flock(s["lock"], fcntl.LOCK_UN)

    def journal(s: Dict[str, Any], entry: bytes, step: Tuple[Any, ...]) -> None:
        if not s["jsize"]:
            entry = b"mixed-cpus-hook journal 1\n" + entry
        s["jsize"] += os.pwrite(s["lock"], entry, s["jsize"])
        s["journal"].append(step)
        s["overlay"][step[1:3]] = step[4] if step[0] == "save" else None

    def done(s: Dict[str, Any]) -> None:
        for step in s["journal"]:
            if step[0] == "save":
                write(*step[1:])
            else:
                os.unlink(step[2], dir_fd=step[1])
                s["records"].pop((step[1], step[2]), None)
        s["journal"].clear()
        s["overlay"].clear()
        os.ftruncate(s["lock"], 0)
        s["jsize"] = 0

    def missing(dir_fd: int, name: str) -> bool:
        if st["overlay"] and (dir_fd, name) in st["overlay"]:  # journaled, not written yet
            return st["overlay"][(dir_fd, name)] is None
        try:
            os.close(os.open(name, READ_FLAGS, dir_fd=dir_fd))
            return False
        except FileNotFoundError:
            os.fstat(dir_fd)  # the kept directory's st_nlink: still there
            return True

    def load(dir_fd: int, name: str) -> Optional[Dict[str, Any]]:
        if st["overlay"] and (dir_fd, name) in st["overlay"]:
            return st["overlay"][(dir_fd, name)]
        try:
            sb = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        hit = st["records"].get((dir_fd, name))
        if hit is not None and hit[0] == (sb.st_ino, sb.st_size, sb.st_mtime_ns):
            return hit[1]
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
        try:
            doc = json.loads(os.read(fd, 1 << 20))
        finally:
            os.close(fd)
        return doc

    def save(dir_fd: int, name: str, doc: Dict[str, Any]) -> None:
        data = (encoder.encode(doc) + "\n").encode()
        journal(st, b"save records %s %d\n%s\n" % (name.encode(), len(data), data), ("save", dir_fd, name, data, doc))

    def remove(dir_fd: int, name: str) -> None:
        journal(st, b"remove records %s\n" % name.encode(), ("remove", dir_fd, name))

    def write(dir_fd: int, name: str, data: bytes, doc: Dict[str, Any]) -> None:
        tmp = f".{name}.{os.getpid()}.tmp"
        fd = os.open(tmp, WRITE_FLAGS, 0o644, dir_fd=dir_fd)
        try:
            os.write(fd, data)
            sb = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        st["records"][(dir_fd, name)] = ((sb.st_ino, sb.st_size, sb.st_mtime_ns), doc)

    def quota_fds(pod_dir: str) -> Tuple[int, int]:
        fds = st["quota_fds"].get(pod_dir)
        if fds is None:
            fds = st["quota_fds"][pod_dir] = (os.open(pod_dir + "/cpu.cfs_quota_us", os.O_RDWR | os.O_CLOEXEC),
                                              os.open(pod_dir + "/cpu.cfs_period_us", os.O_RDWR | os.O_CLOEXEC))
        return fds

    def create_container(self: Any, req: Any) -> Any:
        pod, ctr = req.pod, req.container
        try:
            pod_ann, ctr_ann = annotations(pod.annotations), annotations(ctr.annotations)
        except Refused:
            return api.CreateContainerResponse()
        s = setup(self)
        name = ctr.name
        if pod_ann.get(s["prefix"] + name) != "enable" and ctr_ann.get(s["prefix"] + name) != "enable":
            return api.CreateContainerResponse()
        if s["allowed"] and "*" not in s["allowed"] and pod.namespace not in s["allowed"]:
            return api.CreateContainerResponse()
        cid = plain(ctr.id, MAX_ID, "container id")
        plain(name, MAX_NAME, "container name")
        plain(pod.namespace, MAX_NAME, "namespace")
        plain(pod.name, MAX_NAME, "pod name")
        uid = pod.uid
        if not uid or len(uid) > MAX_UID or not PLAIN.fullmatch(uid):
            raise Refused(f"pod uid {uid[:80]!r}")
        root = s["root"]
        pod_cpu = inside(root + "/cpu", pod.linux.cgroup_parent)
        ctr_cpuset = inside(root + "/cpuset", ctr.linux.cgroups_path)
        cpu = ctr.linux.resources.cpu
        if len(cpu.cpus) > MAX_CPULIST_TEXT:
            raise Refused("cpus too long")
        now_online = online(s)
        exclusive = parse_cpulist(cpu.cpus, "cpus")
        if not exclusive <= now_online:
            raise Refused("cpus not online")
        quota, period = cpu.quota.value, cpu.period.value or 100000
        if quota > MAX_QUOTA or period > MAX_PERIOD:
            raise Refused("quota out of range")
        ckpt = checkpoint(s)
        os.stat(pod_cpu)
        lock(s)
        try:
            cdir, pdir = s["cdir"], s["pdir"]
            cname, pname = cid + ".json", "pod" + uid + ".json"
            missing(cdir, cname)
            assigned = ((ckpt or {}).get(uid) or {}).get(name)
            if assigned is None:
                for entry in os.listdir(cdir):
                    if entry.endswith(".json") and entry != cname:
                        other = load(cdir, entry)
                        if other is not None and set(other["exclusive"]) & exclusive:
                            raise Refused(f"CPUs held by {entry}")
            missing(pdir, pname)
            qfd, pfd = quota_fds(pod_cpu)
            pod_quota = int(os.pread(qfd, 64, 0))
            int(os.pread(pfd, 64, 0))
            phase = "applied" if os.path.isdir(ctr_cpuset) else "creating"
            shared = s["shared"]
            desired = exclusive | shared
            share = s["share"] * period
            raised = pod_quota + share if pod_quota > 0 else pod_quota
            pod_dirs = {"cpu": pod_cpu, "cpuset": root + "/cpuset" + pod.linux.cgroup_parent}
            save(pdir, pname, {"cgroup": pod_dirs, "key": "pod" + uid, "members": {cid: share},
                               "quota": {"applied": raised, "original": pod_quota, "ours": [raised]},
                               "version": 1})
            desired_text, excl_text = format_cpulist(desired), format_cpulist(exclusive)
            new_quota = quota + share if quota > 0 else quota
            save(cdir, cname, {"cgroup": {"cpu": root + "/cpu" + ctr.linux.cgroups_path, "cpuset": ctr_cpuset},
                               "desired": desired_text, "exclusive": sorted(exclusive), "id": cid,
                               "identity": {"container": name, "namespace": pod.namespace, "pod": pod.name,
                                            "pod_uid": uid}, "mode": "nri", "phase": phase,
                               "pod_cgroup": pod_dirs, "quota": {"applied": new_quota, "original": quota,
                                                                 "ours": [new_quota], "period": period},
                               "shared": s["shared_text"], "updated": "", "version": 1})
            if raised != pod_quota:
                os.pwrite(qfd, str(raised).encode(), 0)
                if int(os.pread(qfd, 64, 0)) != raised:
                    raise Refused("pod quota not written")
            s["tracked"][cid] = (pod_cpu, share, pname)
        finally:
            unlock(s)
        s["held"].append(f"container {cid} ({pod.namespace}/{pod.name}/{name}): mixed CPUs {desired_text} "
                         f"(exclusive {excl_text} + shared {s['shared_text']}), quota {new_quota}/{period}\n")
        reply = api.CreateContainerResponse()
        res = reply.adjust.linux.resources.cpu
        res.cpus = desired_text
        if quota > 0:
            res.quota.value = new_quota
        reply.adjust.env.add(key="OPENSHIFT_ISOLATED_CPUS", value=excl_text)
        reply.adjust.env.add(key="OPENSHIFT_SHARED_CPUS", value=s["shared_text"])
        return reply

    def update_container(self: Any, req: Any) -> Any:
        s = setup(self)
        cid = req.container.id
        held = s["tracked"].get(cid)
        if held is None or load(s["cdir"], cid + ".json") is None:
            return api.UpdateContainerResponse()
        res = req.linux_resources.cpu
        if len(res.cpus) > MAX_CPULIST_TEXT:
            raise Refused("cpus too long")
        online(s)
        checkpoint(s)
        lock(s)
        try:
            load(s["cdir"], cid + ".json")
            load(s["pdir"], held[2])
            qfd, pfd = quota_fds(held[0])
            int(os.pread(qfd, 64, 0))
            int(os.pread(pfd, 64, 0))
        finally:
            unlock(s)
        reply = api.UpdateContainerResponse()
        update = reply.update.add(container_id=cid)
        update.linux.resources.cpu.cpus = format_cpulist(parse_cpulist(res.cpus, "cpus") | s["shared"])
        if res.quota.value > 0:
            update.linux.resources.cpu.quota.value = res.quota.value + s["share"] * (res.period.value or 100000)
        return reply

    def release(self: Any, cid: str) -> None:
        s = setup(self)
        held = s["tracked"].get(cid)
        cname = cid + ".json"
        if held is None or load(s["cdir"], cname) is None:
            return
        online(s)
        checkpoint(s)
        lock(s)
        try:
            rec = load(s["cdir"], cname)
            if rec is None:
                return
            save(s["cdir"], cname, dict(rec, phase="releasing"))
            os.path.isdir(rec["cgroup"]["cpuset"])
            pod_cpu, share, pname = held
            load(s["pdir"], pname)
            qfd, pfd = quota_fds(pod_cpu)
            pod_quota = int(os.pread(qfd, 64, 0))
            int(os.pread(pfd, 64, 0))
            if pod_quota > 0:
                os.pwrite(qfd, str(pod_quota - share).encode(), 0)
            remove(s["pdir"], pname)
            for fd in s["quota_fds"].pop(pod_cpu):
                os.close(fd)
            remove(s["cdir"], cname)
            del s["tracked"][cid]
        finally:
            unlock(s)

    def stop_container(self: Any, req: Any) -> Any:
        release(self, req.container.id)
        return api.StopContainerResponse()

    def remove_container(self: Any, req: Any) -> Any:
        release(self, req.container.id)
        return api.RemoveContainerResponse()

    def after_answer(self: Any) -> None:
        if st["journal"]:
            done(st)
            fcntl.flock(st["lock"], fcntl.LOCK_UN)
        if st["held"]:
            sys.stderr.write("".join(st["held"]))
            sys.stderr.flush()
            st["held"].clear()

    for handler in (create_container, update_container, stop_container, remove_container, after_answer):
        setattr(h.Handlers, handler.__name__, handler)
    return st


def main(argv: List[str]) -> int:
    from nri_memory_records import run_plugin  # beside this script

    return run_plugin(argv, install, __doc__.split("\n\n")[-2].strip())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
