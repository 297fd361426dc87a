"""Fixtures for the real-runtime integration tests: runc and podman on a cgroup v1 machine.

Everything a test creates is named with ``RUN_TAG`` (``mch-it-<pid>``) and removed in the
fixture's teardown, also when the test fails:

* runc containers: only the ids a test created, ``runc kill ID KILL`` then ``runc delete -f ID``;
* cgroups: one top cgroup ``/<RUN_TAG>-<n>`` per test, removed deepest first in every
  mounted hierarchy (runc creates the container's path in all of them), retrying briefly;
* podman: a private storage root, run root, tmpdir, lock dir and network config dir, all
  in the test's temporary directory (``lock_type = "file"`` so no /dev/shm segment is
  made); ``libpod_parent`` is removed when podman made it during the test. Containers run
  from a ``--rootfs`` directory with ``--network none`` and the CNI backend: an image
  import writes c/image's blob-info cache to /var/lib/containers/cache whatever ``--root``
  says, and netavark makes /etc/containers/networks and /run/containers/networks (both
  seen on this machine kind);
* the temporary directory.

Nothing here is autouse: the fixtures only act for the tests that ask for them.
The hook entries come from the shipped ``hooks.d`` files, parsed as JSON, with the
installed path replaced by this checkout's executable and ``--config`` added
(``render_hooks_d``), so the tests exercise the files that ship.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import pytest

try:
    from .helpers import hook_executable, read_file, write_file
except ImportError:  # collected as top-level modules (rootdir-relative)
    from helpers import hook_executable, read_file, write_file  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[2]
HOOKS_D = REPO / "hooks.d"
# Stage -> the shipped hooks.d file that injects the hook at that stage.
HOOK_FILES = {"createRuntime": "mixed-cpus-hook.json", "poststop": "mixed-cpus-hook-release.json"}
INSTALLED_PATH = "/usr/bin/mixed-cpus-hook"
CGROUP_ROOT = "/sys/fs/cgroup"
BUSYBOX = "/bin/busybox"
RUN_TAG = f"mch-it-{os.getpid()}"
SHARED_CPUS = "0"
CMD_TIMEOUT = 60
HOOK_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_serial = itertools.count(1)


# ---------------------------------------------------------------------------------------
# prerequisites


def require_real_v1(*tools: str) -> None:
    """Skip only when a prerequisite cannot exist here: root, cgroup v1 cpuset+cpu, the tools."""
    if os.geteuid() != 0:
        pytest.skip("needs root: creates cgroups and runs real containers")
    if not (os.path.isfile(f"{CGROUP_ROOT}/cpuset/cpuset.cpus") and os.path.isfile(f"{CGROUP_ROOT}/cpu/cpu.cfs_quota_us")):
        pytest.skip(f"needs cgroup v1 cpuset and cpu hierarchies at {CGROUP_ROOT}/{{cpuset,cpu}}")
    packages = {"runc": "runc", "podman": "podman", "conmon": "conmon"}
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (Debian package {packages.get(tool, tool)})")
    if not os.path.isfile(BUSYBOX):
        pytest.skip(f"{BUSYBOX} is missing (Debian package busybox-static)")
    with open(BUSYBOX, "rb") as f:
        if b"/ld-linux" in f.read(4096):  # PT_INTERP: dynamically linked, useless in a bare rootfs
            pytest.skip(f"{BUSYBOX} is dynamically linked (install Debian package busybox-static)")
    if not {0, 1} <= _parse_cpulist(online_cpus()):
        pytest.skip(f"needs CPUs 0 (shared) and 1 (exclusive) online; online: {online_cpus()}")


def _parse_cpulist(text: str) -> set:
    cpus = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def online_cpus() -> str:
    with open("/sys/devices/system/cpu/online", encoding="ascii") as f:
        return f.read().strip()


# ---------------------------------------------------------------------------------------
# cgroups


def cgroup_mounts() -> List[str]:
    """Mount points of every cgroup (v1 and v2) hierarchy under /sys/fs/cgroup."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype = right.split(" ", 1)[0]
            point = left.split(" ")[4].replace("\\040", " ")
            if fstype in ("cgroup", "cgroup2") and point.startswith(CGROUP_ROOT + "/") and point not in points:
                points.append(point)
    return points


def top_entries(name_prefix: str = "") -> Dict[str, List[str]]:
    """Per hierarchy, the cgroups directly below its root (optionally only those with a prefix)."""
    out = {}
    for m in cgroup_mounts():
        try:
            names = [e for e in os.listdir(m) if os.path.isdir(os.path.join(m, e)) and e.startswith(name_prefix)]
        except OSError:
            continue
        out[m] = sorted(names)
    return out


def rmdir_tree(path: str, timeout: float = 5.0) -> List[str]:
    """Remove a cgroup and its children deepest first, retrying while tasks exit.

    Returns the directories that could not be removed (an empty list when all is gone).
    """
    deadline = time.monotonic() + timeout
    while True:
        left = []
        if os.path.isdir(path):
            for cur, dirs, _files in os.walk(path, topdown=False):
                for d in dirs:
                    _try_rmdir(os.path.join(cur, d), left)
            _try_rmdir(path, left)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _try_rmdir(d: str, left: List[str]) -> None:
    try:
        os.rmdir(d)
    except FileNotFoundError:
        pass
    except OSError as exc:
        left.append(f"{d}: {errno.errorcode.get(exc.errno, exc.errno)} {exc.strerror}")


def cpus_allowed(pid: int) -> str:
    """Cpus_allowed_list of a process, read from the host."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    raise AssertionError(f"no Cpus_allowed_list in /proc/{pid}/status")


class Inotify:
    """IN_MODIFY watches on cgroupfs files, to prove that a command wrote nothing (ctypes, stdlib)."""

    IN_MODIFY = 0x00000002
    IN_NONBLOCK = 0o4000
    IN_CLOEXEC = 0o2000000

    def __init__(self, paths: Iterable[str]) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(self.IN_NONBLOCK | self.IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.paths: Dict[int, str] = {}
        for p in paths:
            wd = libc.inotify_add_watch(self.fd, os.fsencode(p), self.IN_MODIFY)
            if wd < 0:
                os.close(self.fd)
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {p}")
            self.paths[wd] = p

    def modified(self) -> List[str]:
        """Paths modified since the watch began (or since the last call)."""
        out: List[str] = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            off = 0
            while off + 16 <= len(data):
                wd, mask, _cookie, length = struct.unpack_from("iIII", data, off)
                off += 16 + length
                if mask & self.IN_MODIFY:
                    out.append(self.paths.get(wd, f"wd {wd}"))

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> "Inotify":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------
# hooks.d


def load_shipped_hooks() -> Dict[str, dict]:
    """The shipped hooks.d documents by stage (each file must name exactly that one stage)."""
    docs = {}
    for stage, name in HOOK_FILES.items():
        with open(HOOKS_D / name, encoding="utf-8") as f:
            doc = json.load(f)
        assert doc.get("stages") == [stage], f"{name}: stages {doc.get('stages')!r}, expected [{stage!r}]"
        docs[stage] = doc
    return docs


def render_hook(doc: dict, executable: str, config_path: str, env: List[str]) -> dict:
    """A shipped hooks.d document made runnable from this checkout.

    ``hook.path`` (the install path) becomes ``executable``; ``--config PATH`` is inserted
    before the subcommand; ``env`` is set (a hook with ``env`` inherits nothing).
    """
    out = json.loads(json.dumps(doc))
    hook = out["hook"]
    if hook["path"] != INSTALLED_PATH:
        raise AssertionError(f"hooks.d path is {hook['path']!r}, expected {INSTALLED_PATH!r}")
    args = list(hook["args"])
    hook["path"] = executable
    hook["args"] = [args[0], "--config", config_path] + args[1:]
    hook["env"] = list(env)
    return out


def render_hooks_d(dest_dir: str, executable: str, config_path: str, env: List[str]) -> Dict[str, dict]:
    """Write rendered copies of the shipped hooks.d files into ``dest_dir``; returns them by stage."""
    os.makedirs(dest_dir, exist_ok=True)
    rendered = {}
    for stage, doc in load_shipped_hooks().items():
        out = render_hook(doc, executable, config_path, env)
        with open(os.path.join(dest_dir, HOOK_FILES[stage]), "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)
        rendered[stage] = out
    return rendered


# ---------------------------------------------------------------------------------------
# the per-test node: tmp dir, hook config, cgroups


class Pod:
    """A kubelet-like pod cgroup (cgroupfs driver) in the cpuset and cpu hierarchies."""

    def __init__(self, rel: str, uid: str) -> None:
        self.rel = rel  # "/<top>/kubepods/pod<uid>"
        self.uid = uid
        self.cpuset = f"{CGROUP_ROOT}/cpuset{rel}"
        self.cpu = f"{CGROUP_ROOT}/cpu{rel}"

    def quota(self) -> int:
        return int(read_file(f"{self.cpu}/cpu.cfs_quota_us"))

    def container_path(self, name: str) -> str:
        return f"{self.rel}/{name}"


class Node:
    """One test's world: a tmp dir, a hook configuration and a top cgroup, all removed after.

    The module's helpers hang off it too, so test modules never import conftest.
    """

    read = staticmethod(read_file)
    cpus_allowed = staticmethod(cpus_allowed)
    watch = Inotify

    def __init__(self) -> None:
        self.serial = next(_serial)
        self.name = f"{RUN_TAG}-{self.serial}"
        self.tmp = tempfile.mkdtemp(prefix=f"{self.name}.")
        self.top = f"/{self.name}"
        self.exe = hook_executable()
        self.state_dir = os.path.join(self.tmp, "state")
        self.cache_dir = os.path.join(self.tmp, "config-cache")
        self.config_path = os.path.join(self.tmp, "config.yaml")
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write(f'# written by tests/integration/conftest.py\nshared_cpus: "{SHARED_CPUS}"\n'
                    f"state_dir: {self.state_dir}\nallowed_namespaces: [it-ns, crash-ns]\n")
        self.hook_env = [HOOK_PATH_ENV, f"MIXED_CPUS_HOOK_CACHE_DIR={self.cache_dir}"]
        self._made: List[str] = []

    # cgroups -------------------------------------------------------------------------
    def make_pod(self, quota: int = 200000, period: int = 100000) -> Pod:
        """``/<top>/kubepods/pod<uid>`` in cpuset and cpu, cpus/mems copied down, a CFS quota set."""
        uid = str(uuid.uuid4())
        rel = f"{self.top}/kubepods/pod{uid}"
        for controller in ("cpuset", "cpu"):
            cur = f"{CGROUP_ROOT}/{controller}"
            for part in rel.strip("/").split("/"):
                parent, cur = cur, f"{cur}/{part}"
                if not os.path.isdir(cur):
                    os.mkdir(cur)
                    self._made.append(cur)
                if controller == "cpuset":
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        if not read_file(f"{cur}/{f}"):
                            write_file(f"{cur}/{f}", read_file(f"{parent}/{f}"))
        pod = Pod(rel, uid)
        write_file(f"{pod.cpu}/cpu.cfs_period_us", str(period))
        write_file(f"{pod.cpu}/cpu.cfs_quota_us", str(quota))
        return pod

    def cgroup_dir(self, controller: str, rel: str) -> str:
        return f"{CGROUP_ROOT}/{controller}{rel}"

    # the hook's CLI --------------------------------------------------------------------
    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env["MIXED_CPUS_HOOK_CACHE_DIR"] = self.cache_dir
        env.pop("MIXED_CPUS_HOOK_CONFIG", None)
        return env

    def cli(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run([self.exe, "--config", self.config_path, *args], env=self.env(),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CMD_TIMEOUT)
        if check and proc.returncode != 0:
            raise AssertionError(f"mixed-cpus-hook {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc

    def records(self, kind: str = "containers") -> List[str]:
        d = os.path.join(self.state_dir, kind)
        if not os.path.isdir(d):
            return []
        return sorted(e[:-5] for e in os.listdir(d) if e.endswith(".json") and not e.startswith("."))

    def record(self, cid: str, kind: str = "containers") -> dict:
        with open(os.path.join(self.state_dir, kind, cid + ".json"), encoding="utf-8") as f:
            return json.load(f)

    def record_path(self, cid: str, kind: str = "containers") -> str:
        return os.path.join(self.state_dir, kind, cid + ".json")

    # teardown --------------------------------------------------------------------------
    def cleanup(self) -> List[str]:
        problems = []
        for m in cgroup_mounts():
            problems += rmdir_tree(f"{m}{self.top}")
        shutil.rmtree(self.tmp, ignore_errors=True)
        if os.path.exists(self.tmp):
            problems.append(f"{self.tmp} could not be removed")
        return problems


# ---------------------------------------------------------------------------------------
# runc


def make_rootfs(rootfs: str) -> None:
    """A busybox-static root file system: /bin/busybox and /bin/sh, plus empty dirs runc mounts on."""
    os.makedirs(os.path.join(rootfs, "bin"))
    shutil.copy2(BUSYBOX, os.path.join(rootfs, "bin", "busybox"))
    os.symlink("busybox", os.path.join(rootfs, "bin", "sh"))
    for d in ("proc", "dev", "sys", "tmp"):
        os.makedirs(os.path.join(rootfs, d), exist_ok=True)


class Runc:
    """runc with busybox bundles; remembers every id it created so teardown removes exactly those."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.ids: List[str] = []
        self.hooks = {stage: render_hook(doc, node.exe, node.config_path, node.hook_env)["hook"]
                      for stage, doc in load_shipped_hooks().items()}

    def new_id(self, what: str) -> str:
        cid = f"{self.node.name}-{what}"
        return cid

    def bundle(self, cid: str, cgroups_path: str, annotations: Dict[str, str],
               cpus: str = "1", quota: int = 100000, period: int = 100000,
               hooks: Optional[Dict[str, list]] = None) -> str:
        """A bundle whose config.json is ``runc spec`` edited as CRI-O would write it."""
        bundle = os.path.join(self.node.tmp, f"bundle-{cid}")
        make_rootfs(os.path.join(bundle, "rootfs"))
        subprocess.run(["runc", "spec"], cwd=bundle, check=True, timeout=CMD_TIMEOUT, capture_output=True)
        path = os.path.join(bundle, "config.json")
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        spec["process"]["terminal"] = False
        spec["process"]["args"] = ["/bin/busybox", "sleep", "600"]
        spec["linux"]["cgroupsPath"] = cgroups_path
        spec["linux"].setdefault("resources", {})["cpu"] = {"cpus": cpus, "quota": quota, "period": period}
        spec["annotations"] = dict(annotations)
        if hooks is None:
            hooks = {stage: [hook] for stage, hook in self.hooks.items()}
        spec["hooks"] = hooks
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, indent=1)
        return bundle

    def argv(self, *args: str) -> List[str]:
        """The command line for ``runc ARGS`` (a subclass runs it elsewhere, e.g. in namespaces)."""
        return ["runc", *args]

    def cmd(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.argv(*args), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=CMD_TIMEOUT)
        if check and proc.returncode != 0:
            raise AssertionError(f"runc {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def run(self, bundle: str, cid: str) -> subprocess.CompletedProcess:
        """``runc run -d``; the container's stdio go to files (a pipe would be held open by it)."""
        self.ids.append(cid)
        out = os.path.join(self.node.tmp, f"{cid}.out")
        err = os.path.join(self.node.tmp, f"{cid}.err")
        with open(out, "w") as fo, open(err, "w") as fe:
            rc = subprocess.run(self.argv("run", "-d", "--bundle", bundle, cid), stdin=subprocess.DEVNULL,
                                stdout=fo, stderr=fe, timeout=CMD_TIMEOUT).returncode
        with open(out) as fo, open(err) as fe:
            return subprocess.CompletedProcess(["runc", "run", cid], rc, fo.read(), fe.read())

    def state(self, cid: str) -> dict:
        return json.loads(self.cmd("state", cid, check=True).stdout)

    def pid(self, cid: str) -> int:
        return int(self.state(cid)["pid"])

    def stop(self, cid: str, timeout: float = 10.0) -> None:
        """SIGKILL the container and wait until runc reports it stopped."""
        self.cmd("kill", cid, "KILL", check=True)
        deadline = time.monotonic() + timeout
        while self.state(cid)["status"] != "stopped":
            if time.monotonic() > deadline:
                raise AssertionError(f"container {cid} did not stop within {timeout} s")
            time.sleep(0.05)

    def listed(self) -> List[str]:
        proc = self.cmd("list", "-q")
        return [line for line in proc.stdout.split() if line.startswith(RUN_TAG)]

    def cleanup(self) -> List[str]:
        problems = []
        for cid in self.ids:
            if self.cmd("state", cid).returncode != 0:
                continue
            self.cmd("kill", cid, "KILL")
            proc = self.cmd("delete", "-f", cid)
            if proc.returncode != 0 and self.cmd("state", cid).returncode == 0:
                problems.append(f"runc delete -f {cid}: {proc.stderr.strip()}")
        return problems


# ---------------------------------------------------------------------------------------
# podman


class Podman:
    """podman with private storage, run root, tmpdir, locks and network config; hooks.d rendered."""

    def __init__(self, node: Node) -> None:
        self.node = node
        base = os.path.join(node.tmp, "podman")
        self.hooks_dir = os.path.join(base, "hooks.d")
        self.rendered = render_hooks_d(self.hooks_dir, node.exe, node.config_path, node.hook_env)
        self.conf = os.path.join(base, "containers.conf")
        self.root, self.runroot, self.tmpdir = (os.path.join(base, d) for d in ("root", "runroot", "tmp"))
        self.netdir = os.path.join(base, "net")
        self.rootfs = os.path.join(base, "rootfs")
        make_rootfs(self.rootfs)
        # conmon runs `podman container cleanup` with a fixed set of flags and only the
        # environment in conmon_env_vars: pass CONTAINERS_CONF so it uses file locks too.
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write(
                "# written by tests/integration/conftest.py\n"
                "[engine]\n"
                'lock_type = "file"\n'
                'events_logger = "none"\n'
                'cgroup_manager = "cgroupfs"\n'
                'runtime = "runc"\n'
                f"tmp_dir = {json.dumps(self.tmpdir)}\n"
                f"conmon_env_vars = [{json.dumps(HOOK_PATH_ENV)}, {json.dumps('CONTAINERS_CONF=' + self.conf)}]\n"
                "[network]\n"
                'network_backend = "cni"\n'
                f"network_config_dir = {json.dumps(self.netdir)}\n")
        self.names: List[str] = []
        self.libpod_parent_existed = {m: os.path.isdir(f"{m}/libpod_parent") for m in cgroup_mounts()}

    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env["CONTAINERS_CONF"] = self.conf
        return env

    def base(self) -> List[str]:
        return ["podman", "--root", self.root, "--runroot", self.runroot, "--tmpdir", self.tmpdir,
                "--storage-driver", "vfs", "--runtime", "runc", "--cgroup-manager=cgroupfs",
                "--events-backend", "none", "--network-config-dir", self.netdir,
                "--hooks-dir", self.hooks_dir]

    def cmd(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.base() + list(args), env=self.env(), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=CMD_TIMEOUT)
        if check and proc.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def run(self, name: str, run_args: List[str], command: List[str]) -> subprocess.CompletedProcess:
        """``podman run`` of the busybox rootfs (no image: nothing lands in /var/lib/containers)."""
        self.names.append(name)
        return self.cmd("run", "--name", name, "--network", "none",
                        "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
                        *run_args, "--rootfs", self.rootfs, *command)

    def cleanup(self) -> List[str]:
        problems = []
        for name in self.names:
            if self.cmd("container", "exists", name).returncode == 0:
                proc = self.cmd("rm", "-f", "-t", "0", name)
                if proc.returncode != 0:
                    problems.append(f"podman rm -f {name}: {proc.stderr.strip()}")
        if os.path.isdir(self.root):
            left = self.cmd("ps", "-a", "-q").stdout.split()
            if left:
                problems.append(f"podman containers left: {left}")
        mounts = [line.split()[4] for line in open("/proc/self/mountinfo", encoding="utf-8")
                  if self.node.tmp in line.split()[4]]
        for point in sorted(mounts, reverse=True):
            subprocess.run(["umount", point], capture_output=True, timeout=CMD_TIMEOUT)
            problems.append(f"mount left behind (unmounted): {point}")
        for m, existed in self.libpod_parent_existed.items():
            if not existed and os.path.isdir(f"{m}/libpod_parent"):
                # Made by this test's podman; if another user's container lives there now, it stays.
                rmdir_tree(f"{m}/libpod_parent", timeout=2.0)
        return problems


# ---------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def mch_leak_check():
    """After the session: no cgroup and no runc container carrying this run's tag anywhere."""
    yield
    leaks = {m: names for m, names in top_entries(RUN_TAG).items() if names}
    listed = subprocess.run(["runc", "list", "-q"], capture_output=True, text=True,
                            timeout=CMD_TIMEOUT).stdout.split() if shutil.which("runc") else []
    ours = [i for i in listed if i.startswith(RUN_TAG)]
    assert not leaks and not ours, f"left behind: cgroups {leaks}, runc containers {ours}"


@pytest.fixture
def mch_node(mch_leak_check):
    node = Node()
    yield node
    problems = node.cleanup()
    assert not problems, f"cleanup failed: {problems}"


@pytest.fixture
def mch_runc(mch_node):
    require_real_v1("runc")
    runc = Runc(mch_node)
    yield runc
    problems = runc.cleanup()
    left = [i for i in runc.listed() if i in runc.ids]
    assert not problems and not left, f"runc cleanup failed: {problems} {left}"


@pytest.fixture
def mch_podman(mch_node):
    require_real_v1("runc", "podman", "conmon")
    podman = Podman(mch_node)
    yield podman
    problems = podman.cleanup()
    assert not problems, f"podman cleanup failed: {problems}"
