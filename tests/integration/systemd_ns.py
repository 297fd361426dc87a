"""Boot a real systemd in private PID, mount, cgroup, UTS and IPC namespaces.

Test harness for integration tests that need a real systemd (path units,
journald, ``systemctl``) acting on real cgroup files, without letting that
systemd touch the machine it runs on.

Usage::

    with SystemdNamespace(tmp_path) as sd:
        sd.install_file("/etc/systemd/system/t.service", UNIT)
        sd.systemctl("daemon-reload")
        sd.run(["logger", "-t", "mixed-cpus-hook", "hello"])
        print(open(sd.host_cgroup_dir("cpu", "/kubepods/cpu.cfs_quota_us")).read())

How the machine is protected (see /work/shared/notes/real-runtimes.md):

* cgroups: for every cgroup hierarchy mounted under /sys/fs/cgroup a fresh
  child (``mch-sd-<pid>-<n>``) of this process's own cgroup is made; the
  namespace's pid 1 is started in those children inside a new cgroup
  namespace, and the cgroup file systems are mounted afresh inside, so systemd
  only sees (and only ever prunes) that subtree.
* files: /run, /tmp, /var/tmp and /etc/systemd/system are tmpfs inside; /etc
  is an overlay whose upper layer lives in the private /run, so nothing inside
  can change the host's /etc; /dev is a private minimal tmpfs (no host ttys,
  no /dev/log symlink on the host); /sys and /proc/sys are read-only inside
  (except the cgroup file systems).
* units: all generators are masked (no fstab/sysv/getty/postgresql units),
  the host's enabled units are hidden by the /etc/systemd/system tmpfs, the
  static units that would act on the host (tmpfiles, udev, sysctl, modules,
  random-seed, utmp, timesyncd, ...) are masked, journald is volatile, and the
  boot target is a minimal ``mch-test.target`` (basic.target only).
* kernel: systemd's pid 1 runs without CAP_SYS_MODULE, CAP_SYS_TIME and a
  few other host-global capabilities (it would otherwise try to modprobe
  autofs4 etc. even in a container); UTS and IPC namespaces are private too.
* processes: only the pids this harness started are ever signalled (through
  pidfds); if the test process dies, the launcher's parent-death signal and
  ``unshare --kill-child`` take the whole namespace down.

Files outside the private mounts (/usr, /var, /work, $HOME, ...) are shared
with the host. The host's /tmp is invisible inside, except the ``workdir``
which is bind-mounted at the same path inside (``share_workdir=True``).

Notes for test authors:

* systemd removes empty cgroups below its root at boot and at every
  daemon-reload: create a test's cgroups after both (or keep a process in
  them).
* sd.run()/sd.popen() processes live in a leaf cgroup ``/mch-harness`` of the
  namespace's root (in every hierarchy), not in a systemd unit.
* Start background processes with sd.popen(), not a raw Popen of
  nsenter_prefix(): stop() kills them before powering off. (A raw nsenter
  parent is stopped by systemd-shutdown's SIGSTOP broadcast; stop() resumes
  it, but poweroff then waits for its child, up to poweroff_timeout.)
* Processes systemd does not manage (e.g. a runc container started with
  sd.run) hold poweroff up; stop() SIGKILLs pid 1 after poweroff_timeout.
* The launcher carries PR_SET_PDEATHSIG of the thread that called start():
  start and use the namespace from a thread that outlives it (e.g. the main
  thread).
"""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import tty
from typing import Dict, List, Optional, Sequence, Tuple, Union

SYSTEMD = "/lib/systemd/systemd"
CGROUP_ROOT = "/sys/fs/cgroup"
CHILD_PREFIX = "mch-sd-"
TARGET = "mch-test.target"
RUN_LEAF = "mch-harness"  # leaf cgroup (inside the namespace root) for sd.run()

_counter = itertools.count()

# Directories that are private (tmpfs/overlay) inside the namespace: creating
# files below them can never touch the host.
PRIVATE_PREFIXES = ("/etc", "/run", "/tmp", "/var/tmp", "/dev")

# Units whose only job is to act on the machine (kernel settings, devices,
# /var, the clock, ttys, ...) or that pull such units in. Masked with
# /dev/null symlinks in the private /etc/systemd/system. Most are not reached
# from mch-test.target anyway; this list is defence in depth, since any test
# service pulls in sysinit.target.
MASKED_UNITS = (
    # sysinit.target.wants (static, from /lib/systemd/system)
    "systemd-tmpfiles-setup.service",
    "systemd-tmpfiles-setup-dev.service",
    "systemd-tmpfiles-setup-dev-early.service",
    "systemd-tmpfiles-clean.service",
    "systemd-tmpfiles-clean.timer",
    "systemd-sysusers.service",
    "systemd-firstboot.service",
    "systemd-machine-id-commit.service",
    "systemd-random-seed.service",
    "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service",
    "systemd-journal-flush.service",
    "systemd-journal-catalog-update.service",
    "systemd-update-done.service",
    "systemd-hwdb-update.service",
    "ldconfig.service",
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "systemd-udev-settle.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-sysctl.service",
    "systemd-modules-load.service",
    "kmod-static-nodes.service",
    "systemd-binfmt.service",
    "proc-sys-fs-binfmt_misc.automount",
    "proc-sys-fs-binfmt_misc.mount",
    "dev-hugepages.mount",
    "sys-fs-fuse-connections.mount",
    "sys-kernel-config.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "systemd-pcrphase.service",
    "systemd-pcrphase-sysinit.service",
    "systemd-repart.service",
    "systemd-ask-password-console.path",
    "systemd-ask-password-wall.path",
    "systemd-journald-audit.socket",
    "systemd-remount-fs.service",
    "systemd-fsck-root.service",
    "systemd-quotacheck.service",
    "systemd-boot-system-token.service",
    "systemd-boot-random-seed.service",
    "systemd-pstore.service",
    "systemd-timesyncd.service",
    "systemd-logind.service",
    "systemd-user-sessions.service",
    "systemd-networkd.service",
    "systemd-resolved.service",
    "apparmor.service",
    "hwclock.service",
    "e2scrub_reap.service",
    "e2scrub_all.timer",
    "fstrim.timer",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "man-db.timer",
    "logrotate.timer",
    "postgresql.service",
    "podman.service",
    "podman.socket",
    "podman-auto-update.service",
    "podman-auto-update.timer",
    "podman-restart.service",
    "cron.service",
    "getty.target",
    "getty-static.service",
    "getty@.service",
    "serial-getty@.service",
    "console-getty.service",
    "container-getty@.service",
    "remote-fs.target",
)

TARGET_UNIT = """\
[Unit]
Description=mixed-cpus-hook integration test target (basic.target only)
Requires=basic.target
After=basic.target
AllowIsolate=yes
"""

JOURNALD_CONF = """\
[Journal]
Storage=volatile
RuntimeMaxUse=16M
RateLimitBurst=0
ForwardToConsole=no
ForwardToKMsg=no
ForwardToWall=no
"""

# Capabilities removed from systemd's bounding set: loading kernel modules,
# setting the clock, MAC policy, raw I/O, kernel log, audit, wake alarms.
# (CAP_SYS_BOOT stays: reboot() in a child PID namespace only ends it.)
DROPPED_CAPS = ("sys_module", "sys_time", "mac_admin", "mac_override",
                "sys_rawio", "syslog", "audit_control", "wake_alarm",
                "block_suspend")

BindSpec = Union[Tuple[str, str], Tuple[str, str, str]]


# --------------------------------------------------------------------------
# host inspection helpers


class CgroupMount:
    """One cgroup hierarchy as mounted on the host under /sys/fs/cgroup."""

    def __init__(self, mountpoint: str, root: str, fstype: str,
                 mount_opts: str, super_opts: str) -> None:
        self.mountpoint = mountpoint
        self.root = root  # the mount's root inside the hierarchy
        self.fstype = fstype  # "cgroup" or "cgroup2"
        self.mount_opts = mount_opts
        self.super_opts = super_opts
        rel = os.path.relpath(mountpoint, CGROUP_ROOT)
        self.name = "" if rel == "." else rel  # e.g. "cpu", "unified", ""

    @property
    def controllers(self) -> List[str]:
        """Controller/name options (v1) identifying the hierarchy."""
        skip = {"rw", "ro", "xattr", "clone_children", "noprefix",
                "cpuset_v2_mode", "nsdelegate", "memory_recursiveprot",
                "memory_localevents", "favordynmods"}
        return [o for o in self.super_opts.split(",")
                if o and o not in skip and not o.startswith("release_agent=")]

    def inner_mount_cmd(self, target: str) -> str:
        """Shell command mounting this hierarchy afresh at target."""
        flags = [f for f in self.mount_opts.split(",")
                 if f in ("nosuid", "nodev", "noexec", "ro")]
        if self.fstype == "cgroup2":
            opts = flags or ["rw"]
            return "mount -t cgroup2 -o %s cgroup2 %s" % (
                shlex.quote(",".join(opts)), shlex.quote(target))
        opts = flags + self.controllers
        return "mount -t cgroup -o %s cgroup %s" % (
            shlex.quote(",".join(opts)), shlex.quote(target))


def _unescape_mountinfo(s: str) -> str:
    return (s.replace("\\040", " ").replace("\\011", "\t")
            .replace("\\012", "\n").replace("\\134", "\\"))


def cgroup_mounts() -> List[CgroupMount]:
    """Cgroup hierarchies mounted at or under /sys/fs/cgroup, one per sb."""
    seen = set()
    out: List[CgroupMount] = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            fields = pre.split()
            post_fields = post.split()
            if len(fields) < 6 or len(post_fields) < 3:
                continue
            fstype = post_fields[0]
            if fstype not in ("cgroup", "cgroup2"):
                continue
            mnt = _unescape_mountinfo(fields[4])
            if mnt != CGROUP_ROOT and not mnt.startswith(CGROUP_ROOT + "/"):
                continue
            if fields[2] in seen:  # same hierarchy mounted twice
                continue
            seen.add(fields[2])
            out.append(CgroupMount(mnt, _unescape_mountinfo(fields[3]),
                                   fstype, fields[5], post_fields[2]))
    return out


def own_cgroup_dir(m: CgroupMount) -> str:
    """Host directory of this process's own cgroup in hierarchy m."""
    with open("/proc/self/cgroup") as f:
        lines = [ln.rstrip("\n").split(":", 2) for ln in f if ln.strip()]
    path = None
    for hid, ctrls, p in lines:
        if m.fstype == "cgroup2":
            if hid == "0" and ctrls == "":
                path = p
                break
        elif ctrls and set(ctrls.split(",")) <= set(m.controllers):
            path = p
            break
    if path is None:
        raise RuntimeError("no /proc/self/cgroup entry for %s" % m.mountpoint)
    rel = os.path.relpath(path, m.root)
    if rel.startswith(".."):
        raise RuntimeError("own cgroup %s is outside the mount of %s"
                           % (path, m.mountpoint))
    return os.path.normpath(os.path.join(m.mountpoint, rel))


def skip_reason() -> Optional[str]:
    """None when SystemdNamespace can run here, else why not."""
    if os.name != "posix" or not os.path.exists("/proc/self/mountinfo"):
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (mounts, namespaces, cgroups)"
    if not os.access(SYSTEMD, os.X_OK):
        return "%s not installed" % SYSTEMD
    for tool in ("unshare", "nsenter", "setpriv", "mount", "umount", "mknod"):
        if shutil.which(tool) is None:
            return "%s not found" % tool
    try:
        mounts = cgroup_mounts()
    except OSError as e:
        return "cannot read mountinfo: %s" % e
    if not mounts:
        return "no cgroup v1 or v2 file system mounted under %s" % CGROUP_ROOT
    try:
        for m in mounts:
            d = own_cgroup_dir(m)
            if not os.access(d, os.W_OK):
                return "cannot create cgroups under %s" % d
    except (OSError, RuntimeError) as e:
        return "cannot locate own cgroup: %s" % e
    with open("/proc/filesystems") as f:
        fss = f.read().split()
    for fs in ("overlay", "tmpfs", "devpts"):
        if fs not in fss:
            return "%s file system not available" % fs
    return None


def _pid_alive(pid: int) -> bool:
    return os.path.exists("/proc/%d" % pid)


def cleanup_stale_cgroups() -> List[str]:
    """Remove empty mch-sd-<pid>-<n> cgroups left behind by dead harnesses.

    Only directories of that name directly below this process's own cgroup
    whose <pid> no longer exists are touched, and only with rmdir (which fails
    on cgroups that still hold processes). Returns the removed directories.
    """
    removed: List[str] = []
    for m in cgroup_mounts():
        try:
            parent = own_cgroup_dir(m)
            names = os.listdir(parent)
        except (OSError, RuntimeError):
            continue
        for name in names:
            if not name.startswith(CHILD_PREFIX):
                continue
            parts = name[len(CHILD_PREFIX):].split("-")
            if len(parts) != 2 or not parts[0].isdigit():
                continue
            if _pid_alive(int(parts[0])):
                continue
            d = os.path.join(parent, name)
            if _rmdir_tree(d, timeout=0):
                removed.append(d)
    return removed


def _rmdir_tree(top: str, timeout: float) -> bool:
    """rmdir a cgroup directory tree deepest first; retry until timeout."""
    deadline = time.monotonic() + timeout
    while True:
        if not os.path.isdir(top):
            return True
        busy = False
        for dirpath, dirnames, _ in os.walk(top, topdown=False):
            for d in dirnames:
                p = os.path.join(dirpath, d)
                if os.path.islink(p):
                    continue
                try:
                    os.rmdir(p)
                except FileNotFoundError:
                    pass
                except OSError:
                    busy = True
        try:
            os.rmdir(top)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            busy = True
        if busy and time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _ns_inode(pid: Union[int, str], ns: str) -> str:
    return os.readlink("/proc/%s/ns/%s" % (pid, ns))


# --------------------------------------------------------------------------
# the harness


def _code_binds(inside: Sequence[str]) -> List[Tuple[str, str, str]]:
    """Read-only binds of the checkout and the environment running the tests, when they sit
    under a directory that is private inside (a CI clone in /tmp): units and hooks run them."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out: List[Tuple[str, str, str]] = []
    for path in (repo, os.path.realpath(sys.prefix)):
        covered = list(inside) + [b[1] for b in out]
        if _under(path, ("/tmp", "/run", "/var/tmp")) and not _under(path, covered):
            out.append((path, path, "ro"))
    return out


class SystemdNamespace:
    """A real systemd booted in private namespaces, rooted at child cgroups.

    Parameters:
        workdir: host directory for the harness's files (console log, staged
            /etc files). Bind-mounted at the same path inside when
            share_workdir is true (the default), so tests can exchange files
            through it even when it lives under the host's /tmp.
        etc_files: {"/etc/...": content} written into the private /etc overlay
            before systemd starts (str or bytes; mode 0644). Unit files (and
            wants/ symlinks' targets) under /etc/systemd/system are allowed:
            they are present at boot.
        binds: extra bind mounts, (host_path, inside_path[, "ro"|"rw"]);
            read-write by default. inside_path must exist on the host or lie
            under a private directory (/etc, /run, /tmp, /var/tmp).
        target: unit to boot (default the minimal mch-test.target; the
            recipe's "multi-user.target" also works).
        extra_masks: more unit names to mask inside.
        boot_timeout: seconds to wait for "running"/"degraded".
        poweroff_timeout: seconds to wait for a clean poweroff before SIGKILL.
        readonly_sys: make /sys (but not the cgroup mounts) and /proc/sys
            read-only inside.
    """

    def __init__(self, workdir: Union[str, "os.PathLike[str]"],
                 etc_files: Optional[Dict[str, Union[str, bytes]]] = None,
                 binds: Sequence[BindSpec] = (),
                 target: str = TARGET,
                 extra_masks: Sequence[str] = (),
                 boot_timeout: float = 60.0,
                 poweroff_timeout: float = 10.0,
                 share_workdir: bool = True,
                 readonly_sys: bool = True,
                 systemd_args: Sequence[str] = ()) -> None:
        self.workdir = os.path.abspath(os.fspath(workdir))
        self.name = "%s%d-%d" % (CHILD_PREFIX, os.getpid(), next(_counter))
        self.etc_files = dict(etc_files or {})
        self.binds: List[Tuple[str, str, str]] = []
        for b in binds:
            mode = b[2] if len(b) > 2 else "rw"  # type: ignore[misc]
            self.binds.append((os.path.abspath(b[0]), b[1], mode))
        if share_workdir:
            self.binds.insert(0, (self.workdir, self.workdir, "rw"))
        self.binds.extend(_code_binds([b[1] for b in self.binds]))
        self.target = target
        self.extra_masks = list(extra_masks)
        self.boot_timeout = boot_timeout
        self.poweroff_timeout = poweroff_timeout
        self.readonly_sys = readonly_sys
        self.systemd_args = list(systemd_args)
        self.log_path = os.path.join(self.workdir, self.name + ".console.log")
        self.pid: int = 0  # host pid of the namespace's pid 1
        self.boot_seconds: Optional[float] = None
        self.shutdown_seconds: Optional[float] = None
        self.shutdown_how: Optional[str] = None  # "poweroff" or "sigkill"
        self._mounts: List[CgroupMount] = []
        self._children: Dict[str, str] = {}  # hierarchy name -> host dir
        self._created: List[str] = []  # host cgroup dirs we made
        self._launcher: Optional[subprocess.Popen] = None
        self._pidfd: Optional[int] = None
        self._popens: List[subprocess.Popen] = []
        self._pty_master: Optional[int] = None
        self._pty_slave: Optional[int] = None
        self._pty_name = ""
        self._reader: Optional[threading.Thread] = None

    # ---------------------------------------------------------------- paths

    def inner_root_on_host(self, hierarchy: str) -> str:
        """Host directory that is /sys/fs/cgroup/<hierarchy> inside.

        hierarchy is the directory name under /sys/fs/cgroup ("cpu",
        "cpuset", "systemd", "unified", ...; "" for a pure cgroup2 mount at
        /sys/fs/cgroup itself). Symlinked names ("cpu" -> "cpu,cpuacct")
        are resolved as on the host.
        """
        name = hierarchy.strip("/")
        if name.startswith("sys/fs/cgroup"):
            name = name[len("sys/fs/cgroup"):].strip("/")
        if name not in self._children:
            real = os.path.realpath(os.path.join(CGROUP_ROOT, name))
            name = os.path.relpath(real, CGROUP_ROOT)
            name = "" if name == "." else name
        try:
            return self._children[name]
        except KeyError:
            raise KeyError("no cgroup hierarchy %r (have %s)"
                           % (hierarchy, sorted(self._children))) from None

    def host_cgroup_dir(self, hierarchy: str, inner_path: str = "/") -> str:
        """Host path of cgroup path inner_path of hierarchy as seen inside.

        host_cgroup_dir("cpuset", "/kubepods/pod1") is the host directory that
        is /sys/fs/cgroup/cpuset/kubepods/pod1 inside. inner_path may also
        name a file ("/kubepods/cpu.cfs_quota_us").
        """
        root = self.inner_root_on_host(hierarchy)
        rel = os.path.normpath("/" + inner_path).lstrip("/")
        return os.path.join(root, rel) if rel else root

    @property
    def hierarchies(self) -> List[str]:
        """Hierarchy names (directories under /sys/fs/cgroup inside)."""
        return sorted(self._children)

    # --------------------------------------------------------------- running

    def nsenter_prefix(self) -> List[str]:
        """argv prefix that runs a command inside the namespaces."""
        self._require_running()
        return ["nsenter", "-t", str(self.pid), "-m", "-p", "-C", "-u", "-i",
                "--wd=/", "--"]

    def command(self, args: Sequence[str]) -> List[str]:
        """Host argv that runs args inside, in the mch-harness leaf cgroup.

        The process joins a leaf cgroup (mch-harness) of the namespace's
        cgroup root on the host side first, so /proc/self/cgroup inside looks
        as on a normal system, then enters the namespaces with nsenter.
        """
        procs = self._prepare_run_leaf()
        script = "for f in %s; do echo $$ > \"$f\"; done; exec \"$@\"" % (
            " ".join(shlex.quote(p) for p in procs))
        return ["sh", "-c", script, "mch-run"] + self.nsenter_prefix() + \
            [str(a) for a in args]

    @staticmethod
    def _env(env: Optional[Dict[str, str]]) -> Dict[str, str]:
        full_env = dict(os.environ if env is None else env)
        full_env.setdefault("SYSTEMD_PAGER", "")
        full_env.setdefault("PAGER", "cat")
        full_env.setdefault("SYSTEMD_COLORS", "0")
        return full_env

    def run(self, args: Sequence[str], check: bool = True,
            timeout: Optional[float] = 60, input: Optional[str] = None,
            env: Optional[Dict[str, str]] = None
            ) -> subprocess.CompletedProcess:
        """Run args inside (nsenter -t PID -m -p -C -u -i); text, captured.

        Raises CalledProcessError (with stdout/stderr) if check and it fails,
        subprocess.TimeoutExpired after timeout seconds.
        """
        res = subprocess.run(self.command(args), input=input,
                             capture_output=True, text=True, timeout=timeout,
                             env=self._env(env))
        res.args = list(args)
        if check and res.returncode != 0:
            raise subprocess.CalledProcessError(
                res.returncode, list(args), res.stdout, res.stderr)
        return res

    def popen(self, args: Sequence[str], env: Optional[Dict[str, str]] = None,
              **kwargs: object) -> subprocess.Popen:
        """Start args inside without waiting (subprocess.Popen kwargs).

        Such processes are killed (SIGKILL, inside) when the namespace stops,
        before systemd powers off. Prefer this to a raw Popen of
        nsenter_prefix(), whose nsenter parent would otherwise be left stopped
        by systemd-shutdown's SIGSTOP broadcast.
        """
        p = subprocess.Popen(self.command(args), env=self._env(env),
                             **kwargs)  # type: ignore[call-overload]
        self._popens.append(p)
        return p

    def sh(self, script: str, check: bool = True,
           timeout: Optional[float] = 60, input: Optional[str] = None
           ) -> subprocess.CompletedProcess:
        """Run a shell script inside (sh -c script)."""
        return self.run(["sh", "-c", script], check=check, timeout=timeout,
                        input=input)

    def systemctl(self, *args: str, check: bool = True,
                  timeout: Optional[float] = 60
                  ) -> subprocess.CompletedProcess:
        """Run systemctl inside, e.g. sd.systemctl("start", "t.path")."""
        return self.run(["systemctl", "--no-pager", "--no-ask-password"]
                        + list(args), check=check, timeout=timeout)

    def journal(self, *args: str, check: bool = True
                ) -> subprocess.CompletedProcess:
        """Run journalctl inside (after flushing journald's queue).

        E.g. sd.journal("-t", "mixed-cpus-hook", "-o", "cat").stdout.
        """
        self.run(["journalctl", "--sync"], check=False, timeout=10)
        return self.run(["journalctl", "--no-pager"] + list(args),
                        check=check)

    def install_file(self, path_inside: str, content: Union[str, bytes],
                     mode: int = 0o644, allow_shared: bool = False) -> None:
        """Write a file inside (mkdir -p its directory; chmod mode).

        Refuses paths outside the private mounts (/etc, /run, /tmp, /var/tmp,
        /dev) unless allow_shared, since those would be written on the host.
        """
        p = os.path.normpath(path_inside)
        if not p.startswith("/"):
            raise ValueError("path_inside must be absolute: %r" % path_inside)
        if not allow_shared and not _under(p, PRIVATE_PREFIXES) \
                and not _under(p, [b[1] for b in self.binds]):
            raise ValueError("%s is not under a private mount %s; pass "
                             "allow_shared=True to write to the shared file "
                             "system" % (p, PRIVATE_PREFIXES))
        data = content.encode() if isinstance(content, str) else content
        args = ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1" '
                '&& chmod "$2" "$1"', "install", p, "%o" % mode]
        res = subprocess.run(self.command(args), input=data,
                             capture_output=True, timeout=60,
                             env=self._env(None))
        if res.returncode != 0:
            raise subprocess.CalledProcessError(res.returncode, args,
                                                res.stdout, res.stderr)

    def wait_running(self, timeout: float = 60.0) -> str:
        """Wait for `systemctl is-system-running` to say running/degraded.

        Returns the state. Raises RuntimeError if systemd dies or ends up in
        another final state, TimeoutError after timeout seconds.
        """
        deadline = time.monotonic() + timeout
        state = ""
        while True:
            self._require_running()
            res = self.run(["systemctl", "is-system-running"], check=False,
                           timeout=max(5.0, deadline - time.monotonic()))
            state = res.stdout.strip()
            if state in ("running", "degraded"):
                return state
            if state in ("maintenance", "stopping", "offline"):
                raise RuntimeError("systemd inside is %r\n%s"
                                   % (state, self._diagnostics()))
            if time.monotonic() >= deadline:
                raise TimeoutError("systemd inside not running after %.0fs "
                                   "(state %r)\n%s"
                                   % (timeout, state, self._diagnostics()))
            time.sleep(0.05)

    def failed_units(self) -> List[str]:
        """Names of failed units inside."""
        res = self.systemctl("list-units", "--failed", "--plain",
                             "--no-legend", check=False)
        return [ln.split()[0] for ln in res.stdout.splitlines() if ln.split()]

    def console_log(self) -> str:
        """What pid 1 wrote to its console (status lines, log messages)."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read().replace("\r\n", "\n")
        except OSError:
            return ""

    def is_alive(self) -> bool:
        """Whether the namespace's pid 1 is still running."""
        return self._launcher is not None and self._launcher.poll() is None

    # ------------------------------------------------------------- lifecycle

    def __enter__(self) -> "SystemdNamespace":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Create the child cgroups, boot systemd, wait for it to run."""
        reason = skip_reason()
        if reason:
            raise RuntimeError("cannot boot systemd here: " + reason)
        if self._launcher is not None:
            raise RuntimeError("already started")
        cleanup_stale_cgroups()
        t0 = time.monotonic()
        try:
            os.makedirs(self.workdir, exist_ok=True)
            self._check_binds()
            self._stage_etc_files()
            self._make_cgroups()
            self._launch()
            self.wait_running(max(1.0, self.boot_timeout
                                  - (time.monotonic() - t0)))
        except BaseException:
            self.stop()
            raise
        self.boot_seconds = time.monotonic() - t0

    def stop(self) -> None:
        """Power off (SIGKILL pid 1 if that hangs), then remove cgroups.

        Only the namespace's pid 1 (through a pidfd) and the launcher this
        object started are ever signalled; killing pid 1 makes the kernel kill
        everything else in the PID namespace.
        """
        t0 = time.monotonic()
        errors: List[str] = []
        try:
            if self._launcher is not None:
                self._shutdown()
                self.shutdown_seconds = time.monotonic() - t0
        finally:
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            # Remove our child cgroups, deepest first, retrying while the
            # last processes of the namespace exit.
            for d in reversed(self._created):
                if not _rmdir_tree(d, timeout=15.0):
                    errors.append(d)
            self._created = [d for d in self._created if os.path.isdir(d)]
            self._close_console()
        if errors:
            raise RuntimeError("could not remove cgroups %s" % errors)

    # -------------------------------------------------------------- internal

    def _require_running(self) -> None:
        if not self.pid or not self.is_alive():
            raise RuntimeError("systemd namespace is not running\n"
                               + self.console_log()[-3000:])

    def _diagnostics(self) -> str:
        parts = []
        if self.is_alive():
            for cmd in (["systemctl", "list-jobs", "--no-pager"],
                        ["systemctl", "--failed", "--no-pager"]):
                try:
                    r = self.run(cmd, check=False, timeout=10)
                    parts.append("$ %s\n%s%s" % (" ".join(cmd), r.stdout,
                                                 r.stderr))
                except Exception as e:  # pragma: no cover - diagnostics
                    parts.append("%s: %s" % (cmd, e))
        parts.append("console log tail:\n" + self.console_log()[-3000:])
        return "\n".join(parts)

    def _check_binds(self) -> None:
        for host, inside, mode in self.binds:
            if mode not in ("rw", "ro"):
                raise ValueError("bind mode must be 'rw' or 'ro': %r" % mode)
            if not os.path.exists(host):
                raise ValueError("bind source %s does not exist" % host)
            if not inside.startswith("/"):
                raise ValueError("bind target must be absolute: %r" % inside)
            if not _under(inside, PRIVATE_PREFIXES) \
                    and not os.path.exists(inside):
                raise ValueError(
                    "bind target %s is neither under a private mount %s nor "
                    "an existing path (it would have to be created on the "
                    "host)" % (inside, PRIVATE_PREFIXES))

    def _stage_dir(self) -> str:
        return os.path.join(self.workdir, self.name + ".stage")

    def _stage_etc_files(self) -> None:
        stage = self._stage_dir()
        if os.path.isdir(stage):
            shutil.rmtree(stage)
        for path, content in self.etc_files.items():
            p = os.path.normpath(path)
            if not _under(p, ("/etc",)) or p == "/etc":
                raise ValueError("etc_files keys must be under /etc: %r"
                                 % path)
            dst = os.path.join(stage, p.lstrip("/"))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst, "wb") as f:
                f.write(content.encode() if isinstance(content, str)
                        else content)
            os.chmod(dst, 0o644)

    def _make_cgroups(self) -> None:
        self._mounts = cgroup_mounts()
        for m in self._mounts:
            parent = own_cgroup_dir(m)
            child = os.path.join(parent, self.name)
            os.mkdir(child)
            self._created.append(child)
            self._children[m.name] = child
            if m.fstype == "cgroup" and os.path.exists(
                    os.path.join(child, "cpuset.cpus")):
                for fname in ("cpuset.cpus", "cpuset.mems"):
                    with open(os.path.join(parent, fname)) as f:
                        value = f.read().strip()
                    with open(os.path.join(child, fname), "w") as f:
                        f.write(value)

    def _prepare_run_leaf(self) -> List[str]:
        """mkdir the mch-harness leaf in every hierarchy; its cgroup.procs."""
        procs = []
        for m in self._mounts:
            root = self._children[m.name]
            leaf = os.path.join(root, RUN_LEAF)
            try:
                os.mkdir(leaf)
            except FileExistsError:
                pass
            if m.fstype == "cgroup" and os.path.exists(
                    os.path.join(leaf, "cpuset.cpus")):
                for fname in ("cpuset.cpus", "cpuset.mems"):
                    with open(os.path.join(leaf, fname)) as f:
                        if f.read().strip():
                            continue
                    with open(os.path.join(root, fname)) as f:
                        value = f.read().strip()
                    with open(os.path.join(leaf, fname), "w") as f:
                        f.write(value)
            procs.append(os.path.join(leaf, "cgroup.procs"))
        return procs

    def _boot_script(self) -> str:
        q = shlex.quote
        H = "/run/mch-harness"
        lines = [
            "set -eu",
            "log() { echo \"mch-boot: $*\" >&2; }",
            # -n: never write (or mkdir) the host's /run/mount/utab
            "mount() { command mount -n \"$@\"; }",
            "umount() { command umount -n \"$@\"; }",
            # 1. private /run first: everything else is staged there.
            "mount -t tmpfs -o mode=755,nosuid,nodev,size=20% tmpfs /run",
            "mkdir -p %s/etc-upper %s/etc-work %s/binds %s/dev" % (H, H, H, H),
            # 2. /etc: an overlay, writes land in the private /run.
            "mount -t overlay overlay -o lowerdir=/etc,upperdir=%s/etc-upper,"
            "workdir=%s/etc-work /etc" % (H, H),
        ]
        # hazard 1: the host's enabled units must not exist for systemd.
        lines.append("mount -t tmpfs -o mode=755 tmpfs /etc/systemd/system")
        if self.etc_files:  # may include units in /etc/systemd/system
            lines.append("cp -a %s/etc/. /etc/" % q(self._stage_dir()))
        # 3. stash bind sources while the host's /tmp is still visible.
        for i, (host, _inside, _mode) in enumerate(self.binds):
            s = "%s/binds/%d" % (H, i)
            if os.path.isdir(host):
                lines.append("mkdir %s" % s)
            else:
                lines.append(": > %s" % s)
            lines.append("mount --bind %s %s" % (q(host), s))
        # 4. private /dev; /dev/console is the harness's pty (-> log_path).
        D = H + "/dev"
        lines += [
            "mount -t tmpfs -o mode=755,nosuid,size=4m tmpfs %s" % D,
            "mknod -m 666 %s/null c 1 3" % D,
            "mknod -m 666 %s/zero c 1 5" % D,
            "mknod -m 666 %s/full c 1 7" % D,
            "mknod -m 666 %s/random c 1 8" % D,
            "mknod -m 666 %s/urandom c 1 9" % D,
            "mknod -m 666 %s/tty c 5 0" % D,
            "mkdir -m 755 %s/pts %s/mqueue %s/hugepages" % (D, D, D),
            "mkdir -m 1777 %s/shm" % D,
            "mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 "
            "devpts %s/pts" % D,
            "ln -s pts/ptmx %s/ptmx" % D,
            "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs %s/shm" % D,
            "ln -s /proc/self/fd %s/fd" % D,
            "ln -s /proc/self/fd/0 %s/stdin" % D,
            "ln -s /proc/self/fd/1 %s/stdout" % D,
            "ln -s /proc/self/fd/2 %s/stderr" % D,
            ": > %s/console" % D,
            "mount --bind %s %s/console" % (q(self._pty_name), D),
            "mount --move %s /dev" % D,
            # 5. hazard 1: tmpfs over /tmp and /var/tmp.
            "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp",
            "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /var/tmp",
        ]
        # 6. read-only kernel interfaces (per-mount flag: remount,bind).
        # The host's cgroup mounts leave this mount namespace (its copies
        # only: propagation is private), so systemd cannot see them at all.
        lines.append("umount -R %s" % CGROUP_ROOT)
        if self.readonly_sys:
            lines += [
                # a new mount stacked on /sys; only its flags change
                "mount --rbind /sys /sys",
                "mount -o remount,bind,ro,nosuid,nodev,noexec /sys",
                "mount --bind /proc/sys /proc/sys",
                "mount -o remount,bind,ro,nosuid,nodev,noexec /proc/sys",
                "if [ -e /proc/sysrq-trigger ]; then "
                "mount --bind /proc/sysrq-trigger /proc/sysrq-trigger && "
                "mount -o remount,bind,ro /proc/sysrq-trigger; fi",
            ]
        # 7. hazard 2: fresh cgroup mounts (this cgroup namespace's view).
        if any(m.name == "" for m in self._mounts):
            # pure cgroup v2 at /sys/fs/cgroup itself
            m = [m for m in self._mounts if m.name == ""][0]
            lines.append(m.inner_mount_cmd(CGROUP_ROOT))
        else:
            lines.append("mount -t tmpfs -o mode=755,nosuid,nodev,noexec,"
                         "size=1m tmpfs %s" % CGROUP_ROOT)
            for m in self._mounts:
                target = os.path.join(CGROUP_ROOT, m.name)
                lines.append("mkdir -p %s" % q(target))
                lines.append(m.inner_mount_cmd(target))
            # mirror symlinks such as cpu -> cpu,cpuacct
            for name in sorted(os.listdir(CGROUP_ROOT)):
                p = os.path.join(CGROUP_ROOT, name)
                if os.path.islink(p):
                    lines.append("ln -s %s %s" % (q(os.readlink(p)), q(p)))
        # 8. systemd configuration in the private /run and /etc.
        lines += [
            "mkdir -p /run/systemd/system /run/systemd/system-generators "
            "/run/systemd/journald.conf.d",
            "cat > /run/systemd/journald.conf.d/50-mch-harness.conf <<'EOF'\n"
            + JOURNALD_CONF + "EOF",
            "cat > /etc/systemd/system/%s <<'EOF'\n%sEOF" % (TARGET,
                                                            TARGET_UNIT),
            # Mask every generator (fstab, sysv, getty, postgresql, ...).
            "for d in /usr/local/lib/systemd/system-generators "
            "/usr/lib/systemd/system-generators /lib/systemd/system-generators "
            "/etc/systemd/system-generators; do [ -d \"$d\" ] || continue; "
            "for g in \"$d\"/*; do [ -e \"$g\" ] || continue; "
            "ln -sfn /dev/null /run/systemd/system-generators/\"${g##*/}\"; "
            "done; done",
        ]
        masks = [u for u in list(MASKED_UNITS) + self.extra_masks
                 if u != self.target]
        # (a unit the test provides through etc_files wins over its mask)
        lines.append("for u in %s; do f=/etc/systemd/system/\"$u\"; "
                     "[ -e \"$f\" ] || [ -L \"$f\" ] || "
                     "ln -s /dev/null \"$f\"; done"
                     % " ".join(q(u) for u in masks))
        # 9. bind mounts, now that the tmpfs mounts are in place.
        for i, (_host, inside, mode) in enumerate(self.binds):
            s = "%s/binds/%d" % (H, i)
            if _under(inside, PRIVATE_PREFIXES):
                lines.append("if [ -d %s ]; then mkdir -p %s; else mkdir -p "
                             "\"$(dirname %s)\"; [ -e %s ] || : > %s; fi"
                             % (s, q(inside), q(inside), q(inside), q(inside)))
            lines.append("mount --bind %s %s" % (s, q(inside)))
            if mode == "ro":
                lines.append("mount -o remount,bind,ro %s" % q(inside))
            lines.append("umount %s" % s)
        # 10. systemd itself, with a clean environment.
        argv = [SYSTEMD, "--system", "--unit=" + self.target,
                "--show-status=yes", "--log-target=console",
                "--log-color=no", "--log-level=info"] + self.systemd_args
        lines.append("log 'namespace ready, exec systemd'")
        # systemd's pid 1 loads kernel modules (kmod_setup) and may set the
        # clock even in a container: drop the capabilities for host-global
        # actions from the bounding set of pid 1 and everything it starts.
        lines.append("exec setpriv --bounding-set %s -- "
                     "env -i container=other "
                     "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                     "/sbin:/bin LANG=C.UTF-8 %s </dev/null"
                     % (",".join("-" + c for c in DROPPED_CAPS),
                        " ".join(q(a) for a in argv)))
        return "\n".join(lines) + "\n"

    def _launch(self) -> None:
        procs = [os.path.join(self._children[m.name], "cgroup.procs")
                 for m in self._mounts]
        # The namespace's pid 1 moves itself ("0" = the writer) into the
        # child cgroups and only then unshares the cgroup namespace, so the
        # child cgroups become its root. The outer unshare (the launcher)
        # stays in the caller's cgroups: nothing foreign in systemd's tree.
        inner = ("for f in %s; do echo 0 > \"$f\"; done; "
                 "exec unshare --cgroup -- sh -c \"$1\" mch-boot"
                 % " ".join(shlex.quote(p) for p in procs))
        self._open_console()
        # setpriv --pdeathsig: if the test process dies, the launcher gets
        # SIGKILL and --kill-child takes the namespace's pid 1 down with it.
        self._launcher = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "--",
             "unshare", "--pid", "--fork", "--kill-child", "--mount",
             "--mount-proc", "--propagation", "private", "--uts", "--ipc",
             "--", "sh", "-c", inner, "mch-launch", self._boot_script()],
            stdin=subprocess.DEVNULL, stdout=self._pty_slave,
            stderr=subprocess.STDOUT, start_new_session=True, cwd="/")
        self.pid = self._find_pid1()
        # Wait until the boot script has exec'ed systemd.
        deadline = time.monotonic() + 30
        while True:
            if not self.is_alive():
                raise RuntimeError("namespace exited during setup (rc %s):\n%s"
                                   % (self._launcher.returncode,
                                      self.console_log()[-3000:]))
            try:
                exe = os.readlink("/proc/%d/exe" % self.pid)
            except OSError:
                exe = ""
            if os.path.basename(exe) == "systemd":
                return
            if time.monotonic() >= deadline:
                raise TimeoutError("systemd not exec'ed in namespace:\n"
                                   + self.console_log()[-3000:])
            time.sleep(0.01)

    def _open_console(self) -> None:
        """A pty whose slave is the launcher's stdout/stderr and, bind-mounted,
        /dev/console inside; a thread copies what arrives to log_path."""
        master, slave = os.openpty()
        tty.setraw(slave)  # no \r\n translation, no echo
        self._pty_master, self._pty_slave = master, slave
        self._pty_name = os.ttyname(slave)
        out = open(self.log_path, "ab", buffering=0)

        def pump() -> None:
            with out:
                while True:
                    try:
                        data = os.read(master, 65536)
                    except OSError:  # EIO: every slave fd closed
                        return
                    if not data:
                        return
                    try:
                        out.write(data)
                    except OSError:
                        pass  # keep draining so writers never block

        self._reader = threading.Thread(target=pump, name=self.name + "-console",
                                        daemon=True)
        self._reader.start()

    def _close_console(self) -> None:
        if self._pty_slave is not None:
            os.close(self._pty_slave)
            self._pty_slave = None
        if self._reader is not None:
            # Drains until the last writer (gone with the namespace) closes.
            self._reader.join(5)
            if self._reader.is_alive():
                # Still blocked in read(): leave the master open rather than
                # let the thread read from a reused fd number.
                return
            self._reader = None
        if self._pty_master is not None:
            os.close(self._pty_master)
            self._pty_master = None

    def _find_pid1(self) -> int:
        assert self._launcher is not None
        lpid = self._launcher.pid
        my_pidns = _ns_inode("self", "pid")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self._launcher.poll() is not None:
                raise RuntimeError("launcher exited (rc %s):\n%s"
                                   % (self._launcher.returncode,
                                      self.console_log()[-3000:]))
            try:
                with open("/proc/%d/task/%d/children" % (lpid, lpid)) as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                kids = []
            for kid in kids:
                try:
                    if _ns_inode(kid, "pid") == my_pidns:
                        continue
                    fd = _pidfd_open(kid)
                    # Re-check after opening: the pidfd now pins our child.
                    with open("/proc/%d/stat" % kid) as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    if ppid != lpid:
                        if fd is not None:
                            os.close(fd)
                        continue
                except OSError:
                    continue
                self._pidfd = fd
                return kid
            time.sleep(0.005)
        raise TimeoutError("namespace pid 1 did not appear")

    def _signal_pid1(self, sig: int) -> None:
        """Signal the namespace's pid 1 (our launcher's child) only."""
        if not self.is_alive():
            return
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)  # type: ignore
            else:  # no pidfd support: the launcher still waits for pid 1
                os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def _kill_popens(self) -> None:
        """SIGKILL the inner processes of our still-running popen()s."""
        for p in self._popens:
            if p.poll() is not None:
                continue
            for kid in _children(p.pid):  # nsenter's child, inside
                _kill_if_child(kid, p.pid, signal.SIGKILL)
        for p in self._popens:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()  # our own nsenter; its child dies with the namespace
                p.wait(5)
        self._popens = []

    def _our_nsenters(self) -> List[int]:
        """Pids of this process's children that are `nsenter -t <pid 1>`."""
        out = []
        for kid in _children(os.getpid()):
            try:
                with open("/proc/%d/cmdline" % kid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if os.path.basename(argv[0]) == b"nsenter" and \
                    b"-t" in argv and str(self.pid).encode() in argv:
                out.append(kid)
        return out

    def _unstick_nsenters(self, kill: bool) -> None:
        """Resume our nsenter parents stopped by systemd-shutdown's SIGSTOP.

        nsenter stops itself when its child is stopped and then never reaps
        it, which keeps the dying PID namespace (and pid 1) from ever exiting.
        """
        for pid in self._our_nsenters():
            try:
                with open("/proc/%d/stat" % pid) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state in ("T", "t") or kill:
                _kill_if_child(pid, os.getpid(),
                               signal.SIGKILL if kill else signal.SIGCONT)

    def _wait_launcher(self, timeout: float, kill_nsenters: bool) -> bool:
        assert self._launcher is not None
        deadline = time.monotonic() + timeout
        while self._launcher.poll() is None:
            if time.monotonic() >= deadline:
                return False
            self._unstick_nsenters(kill_nsenters)
            time.sleep(0.05)
        return True

    def _shutdown(self) -> None:
        launcher = self._launcher
        assert launcher is not None
        self._kill_popens()
        if launcher.poll() is None and self.pid:
            # SIGRTMIN+4 = poweroff for systemd (like `systemctl poweroff`,
            # but needs no working bus/socket).
            self._signal_pid1(signal.SIGRTMIN + 4)
            if self._wait_launcher(self.poweroff_timeout, False):
                self.shutdown_how = "poweroff"
        if launcher.poll() is None and self.pid:
            # The kernel kills the rest of the PID namespace with pid 1.
            self._signal_pid1(signal.SIGKILL)
            self.shutdown_how = "sigkill"
            if not self._wait_launcher(5, False):
                self._wait_launcher(15, True)
        if launcher.poll() is None:
            # Never got a pid 1, or it is stuck: kill our own launcher;
            # --kill-child then kills pid 1 (which may stay a zombie of the
            # machine's init).
            launcher.kill()
            self.shutdown_how = self.shutdown_how or "launcher-kill"
            launcher.wait(10)


def _children(pid: int) -> List[int]:
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _kill_if_child(pid: int, parent: int, sig: int) -> None:
    """Signal pid only if it is (still) a child of parent, via a pidfd."""
    try:
        fd = _pidfd_open(pid)
    except OSError:
        return  # already gone
    try:
        with open("/proc/%d/stat" % pid) as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        if ppid != parent:
            return
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)  # type: ignore[attr-defined]
        else:
            os.kill(pid, sig)
    except (OSError, ValueError, IndexError):
        pass
    finally:
        if fd is not None:
            os.close(fd)


def _under(path: str, prefixes: Sequence[str]) -> bool:
    p = os.path.normpath(path)
    return any(p == pre or p.startswith(pre.rstrip("/") + "/")
               for pre in prefixes)


def _pidfd_open(pid: int) -> Optional[int]:
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined]
    except OSError as e:
        if e.errno in (38,):  # ENOSYS: old kernel
            return None
        raise
