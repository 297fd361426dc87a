"""A private containerd (1.7 or 2.1) with NRI enabled, for the NRI plugin's integration tests.

The binaries are Debian's (``scripts/fetch-containerd.sh 1.7|2.1`` puts them in a cache per
version, see ``CACHES``; bookworm's 1.6 has no NRI plugins): trixie's 1.7.24 (config version 2)
or sid's 2.1.x (config version 3, see :func:`format_config`). Both run the system's runc (sid's
needs glibc 2.38, Debian 12 has 2.36). ``Containerd(version="2.1")`` picks one; the tests that
must hold on both parametrize over ``VERSIONS``. Everything
containerd keeps lives in one short temporary directory (unix socket paths are limited to 107
bytes): its config, ``root``, ``state``, the gRPC, ttrpc and NRI sockets, the CRI plugin's
(empty) CNI directories and its log. CRI runs runc with the cgroupfs driver
(``SystemdCgroup = false``), the overlayfs snapshotter, ``restrict_oom_score_adj = true`` (this
machine kind has no CAP_SYS_RESOURCE to lower OOM scores), and the pause image of
``images.py`` as ``sandbox_image``. Pods use the host network: there is no CNI here.

Teardown removes exactly what it started: the pods over CRI while containerd runs, then
containerd by its pid. Shims and containers outlive containerd, so :meth:`Containerd.cleanup`
then finds the ones left by pid: every ``init.pid`` under the state dir's task bundles, every
process in the cgroups the caller says are the test's (``owned_cgroups``) and the shims whose
command line names this containerd's socket (unique to this harness), kills only those, unmounts what
is mounted under the temporary directory (rootfs overlays, sandbox shm) deepest first, removes
the shims' sockets (their ``address`` files say where) and the directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import os
import signal
import subprocess
import tempfile
import time
from typing import Iterable, Iterator, List, Optional

try:
    from .cri import CriClient, CriError
    from .images import BUSYBOX_IMAGE, PAUSE_IMAGE, write_oci_archive
except ImportError:  # collected as top-level modules (rootdir-relative)
    from cri import CriClient, CriError  # type: ignore[no-redef]
    from images import BUSYBOX_IMAGE, PAUSE_IMAGE, write_oci_archive  # type: ignore[no-redef]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("MIXED_CPUS_HOOK_CONTAINERD_CACHE", "/var/cache/mixed-cpus-hook-test/containerd")
# containerd version -> its binaries' cache (scripts/fetch-containerd.sh's defaults)
CACHES = {"1.7": CACHE,
          "2.1": os.environ.get("MIXED_CPUS_HOOK_CONTAINERD21_CACHE", "/var/cache/mixed-cpus-hook-test/containerd-2.1")}
VERSIONS = tuple(CACHES)
FETCH = os.path.join(REPO, "scripts", "fetch-containerd.sh")
RUNC = "/usr/sbin/runc"
CGROUP_ROOT = "/sys/fs/cgroup"
NAMESPACE = "k8s.io"
TASKS = "io.containerd.runtime.v2.task"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
MNT_DETACH = 2
# Outside its private dir a containerd's shims make these (the shim sockets' dir and runc's root per
# namespace, /run/containerd/runc/<namespace>): removed once empty if this instance made them.
SHARED_RUN = "/run/containerd"
# containerd's log line after an NRI plugin's Synchronize: 1.7 msg="plugin \"10-name\" connected",
# 2.1 msg="plugin \"10-name\" connected and synchronized"
SYNCHRONIZED = ("\\\" connected\"", "\\\" connected and synchronized\"")
__all__ = ["BUSYBOX_IMAGE", "PAUSE_IMAGE", "Containerd", "CriError", "bin_dir", "ensure_binaries", "running"]


def bin_dir(cache: str = CACHE) -> str:
    return os.path.join(cache, "root", "usr", "bin")


def ensure_binaries(cache: str = CACHE, fetch: bool = True, release: str = "1.7") -> str:
    """The cache's bin dir, fetching containerd ``release`` first when it is not there (install-deps
    does it in CI)."""
    d = bin_dir(cache)
    if not all(os.access(os.path.join(d, b), os.X_OK) for b in ("containerd", "containerd-shim-runc-v2", "ctr")):
        if not fetch:
            raise RuntimeError(f"no containerd binaries in {d}")
        proc = subprocess.run(["sh", FETCH, release], env=dict(os.environ, CONTAINERD_CACHE=cache),
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{FETCH} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return d


def version(cache: str = CACHE) -> str:
    """The Debian package version the cache holds (the fetch script records it)."""
    with open(os.path.join(cache, "root", "VERSION"), encoding="ascii") as f:
        return f.read().strip()


def format_config(base: str, sandbox_image: str, runc: str = RUNC, request_timeout: str = "2s",
                  major: int = 1, cdi_dir: str = "") -> str:
    """containerd's config.toml: everything under ``base``, NRI on, CRI with runc/cgroupfs.

    ``major`` 1: config version 2 (containerd 1.7: the CRI plugin is one ``io.containerd.grpc.v1.cri``
    table); 2: config version 3 (containerd 2.x: images in ``io.containerd.cri.v1.images`` with the
    pause image pinned, runtimes in ``io.containerd.cri.v1.runtime``, the gRPC service in
    ``io.containerd.grpc.v1.cri``). ``cdi_dir``: enable CDI with this one spec dir (2.x has CDI on
    by default with /etc/cdi and /var/run/cdi: never the host's here); empty: CDI off.
    """
    nri = f"""[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = "{base}/nri.sock"
  plugin_path = "{base}/nri-plugins"
  plugin_config_path = "{base}/nri-conf.d"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "{request_timeout}"
"""
    cdi = f'enable_cdi = true\n  cdi_spec_dirs = ["{cdi_dir}"]' if cdi_dir else "enable_cdi = false"
    runtime_opts = f"""default_runtime_name = "runc"
    [RT.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [RT.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
"""
    common = f"""# written by tests/integration/containerd.py
version = {2 if major < 2 else 3}
root = "{base}/root"
state = "{base}/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{base}/c.sock"

[ttrpc]
  address = "{base}/c.sock.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"

{nri}
"""
    if major < 2:
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        return common + f"""[{cri}]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  {cdi}
  [{cri}.containerd]
    snapshotter = "overlayfs"
    {runtime_opts.replace("RT", cri)}  [{cri}.cni]
    bin_dir = "{base}/cni/bin"
    conf_dir = "{base}/cni/conf.d"
"""
    rt = "plugins.'io.containerd.cri.v1.runtime'"
    return common + f"""[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{sandbox_image}"

[{rt}]
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  {cdi}
  [{rt}.containerd]
    {runtime_opts.replace("RT", rt)}  [{rt}.cni]
    bin_dirs = ["{base}/cni/bin"]
    conf_dir = "{base}/cni/conf.d"

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def _pids_in(path: str) -> List[int]:
    try:
        with open(path, encoding="ascii") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def _cmdline(pid: int) -> List[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def shared_run_dirs(root: str = SHARED_RUN) -> List[str]:
    """The directories shims make below ``root`` that exist now, deepest first."""
    found = sorted(glob.glob(os.path.join(root, "runc", "*"))) + [os.path.join(root, "s"), os.path.join(root, "runc"), root]
    return [d for d in found if os.path.isdir(d)]


def mounts_under(prefix: str) -> List[str]:
    """Mount points at or below ``prefix`` in this mount namespace, deepest first."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            point = line.split(" ")[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix.rstrip("/") + "/"):
                points.append(point)
    return sorted(set(points), key=lambda p: (-p.count("/"), p))


class Containerd:
    """One private containerd: ``start``, ``stop`` (by pid), ``restart``, ``ctr``, ``cri``, ``cleanup``."""

    def __init__(self, owned_cgroups: Iterable[str] = (), cache: Optional[str] = None, runc: str = RUNC,
                 request_timeout: str = "2s", parent_dir: str = "/tmp", fetch: bool = True,
                 version: str = "1.7", cdi: bool = False) -> None:
        """``version``: "1.7" or "2.1" (its binaries from ``CACHES`` unless ``cache`` is given);
        ``cdi``: CDI on with the private spec dir :attr:`cdi_dir` (``<dir>/cdi``)."""
        if version not in CACHES:
            raise ValueError(f"containerd version {version!r}: one of {VERSIONS}")
        self.version = version
        self.bin = ensure_binaries(cache or CACHES[version], fetch, version)
        # parent_dir: a file system overlayfs accepts as upper (not an overlay itself: the VM's /tmp is)
        self.dir = tempfile.mkdtemp(prefix="mch-ctd-", dir=parent_dir)
        self.sock = os.path.join(self.dir, "c.sock")
        self.nri_sock = os.path.join(self.dir, "nri.sock")
        self.config = os.path.join(self.dir, "config.toml")
        self.log_path = os.path.join(self.dir, "containerd.log")
        self.state = os.path.join(self.dir, "state")
        self.owned_cgroups = list(owned_cgroups)  # e.g. "/mch-it-123-1": processes there are the test's
        self.cdi_dir = os.path.join(self.dir, "cdi")
        for d in ("cni/bin", "cni/conf.d", "nri-plugins", "nri-conf.d", "opt", "cdi"):
            os.makedirs(os.path.join(self.dir, d))
        with open(self.config, "w", encoding="utf-8") as f:
            f.write(format_config(self.dir, PAUSE_IMAGE, runc, request_timeout, major=int(version.split(".")[0]),
                                  cdi_dir=self.cdi_dir if cdi else ""))
        self.proc: Optional[subprocess.Popen] = None
        self.cri_timeout = 30.0  # seconds per CRI call (more in the emulated VM)
        self.start_timeout = START_TIMEOUT
        self._cri: Optional[CriClient] = None
        self.starts = 0
        self.run_dirs_before = set(shared_run_dirs())

    # processes -----------------------------------------------------------------------
    def env(self) -> dict:
        env = dict(os.environ)
        env["PATH"] = f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return env

    def start(self, timeout: Optional[float] = None) -> None:
        """Start containerd and wait until CRI answers RuntimeReady and the NRI socket exists."""
        timeout = timeout or self.start_timeout
        assert self.proc is None, "containerd already started"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([os.path.join(self.bin, "containerd"), "--config", self.config],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.env(),
                                         start_new_session=True)
        self.starts += 1
        deadline = time.monotonic() + timeout
        last = "no socket yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"containerd exited {self.proc.returncode} at start:\n{self.log_tail()}")
            if os.path.exists(self.sock) and os.path.exists(self.nri_sock):
                try:
                    ok, last = self.cri.ready()
                    if ok:
                        return
                except CriError as exc:
                    last = str(exc)
            time.sleep(0.1)
        raise RuntimeError(f"containerd not ready within {timeout} s ({last}):\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM containerd (by pid), SIGKILL after ``timeout``; its shims and containers stay."""
        if self._cri is not None:
            self._cri.close()
            self._cri = None
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    @property
    def cri(self) -> CriClient:
        if self._cri is None:
            self._cri = CriClient(self.sock, self.cri_timeout)
        return self._cri

    def ctr(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        argv = [os.path.join(self.bin, "ctr"), "--address", self.sock, "--namespace", NAMESPACE, *args]
        proc = subprocess.run(argv, env=self.env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def import_images(self, archive: str = "") -> List[str]:
        """Build the busybox and pause images (images.py) and import them; returns their names.
        ``archive``: one write_oci_archive wrote already (the VM scenarios get it built on the host)."""
        if archive:
            names = [BUSYBOX_IMAGE, PAUSE_IMAGE]
        else:
            archive = os.path.join(self.dir, "images.tar")
            names = write_oci_archive(archive)
        self.ctr("images", "import", archive)
        if archive.startswith(self.dir):
            os.unlink(archive)
        listed = self.ctr("images", "list", "-q").stdout.split()
        missing = [n for n in names if n not in listed]
        if missing:
            raise RuntimeError(f"ctr images import: {missing} not listed after import; listed {listed}")
        return names

    # logs ----------------------------------------------------------------------------
    def log_mark(self) -> int:
        """A position in containerd's log, for :meth:`log_since`."""
        return os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0

    def log_since(self, mark: int = 0) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(mark)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_since(0).splitlines()[-lines:])

    def plugin_synchronized(self, mark: int, name: str = "") -> bool:
        """containerd logged, after ``mark``, that an NRI plugin connected and was synchronized."""
        for line in self.log_since(mark).splitlines():
            if any(marker in line for marker in SYNCHRONIZED) and name in line:
                return True
        return False

    # teardown ------------------------------------------------------------------------
    def remove_pods(self) -> List[str]:
        """Stop and remove every pod sandbox (and with them their containers) over CRI."""
        problems = []
        if self.proc is None or self.proc.poll() is not None:
            return problems
        try:
            pods = self.cri.pods()
        except CriError as exc:
            return [f"ListPodSandbox: {exc}"]
        for pod in pods:
            for cid in self.cri.containers(pod):
                try:
                    self.cri.remove(cid)
                except CriError as exc:
                    problems.append(str(exc))
            for call in (self.cri.stop_pod, self.cri.remove_pod):
                try:
                    call(pod)
                except CriError as exc:
                    problems.append(str(exc))
        return problems

    def bundles(self) -> List[str]:
        base = os.path.join(self.state, TASKS)
        out = []
        if os.path.isdir(base):
            for ns in sorted(os.listdir(base)):
                for cid in sorted(os.listdir(os.path.join(base, ns))):
                    out.append(os.path.join(base, ns, cid))
        return out

    def shims(self) -> List[int]:
        """This containerd's shims: processes whose command line has ``-address <this socket>``.

        (containerd 1.7's runc v2 shim writes no pid file; the socket path is unique to this harness.)
        """
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                argv = _cmdline(int(entry))
                if "-address" in argv and self.sock in argv and argv[0].endswith("containerd-shim-runc-v2"):
                    out.append(int(entry))
        return out

    def leftover_processes(self) -> List[int]:
        """Container processes (each bundle's init.pid, the owned cgroups' procs), then the shims."""
        pids = set()
        for b in self.bundles():
            pids.update(_pids_in(os.path.join(b, "init.pid")))
        for top in self.owned_cgroups:
            for controller in ("", "/cpu", "/cpuset", "/pids", "/memory"):  # "": cgroup v2
                root = f"{CGROUP_ROOT}{controller}{top}"
                for cur, _dirs, _files in os.walk(root):
                    pids.update(_pids_in(os.path.join(cur, "cgroup.procs")))
        shims = set(self.shims())
        return sorted(p for p in pids - shims if _alive(p)) + sorted(p for p in shims if _alive(p))

    def kill_leftovers(self, timeout: float = 10.0) -> List[int]:
        """SIGKILL what :meth:`leftover_processes` finds (containers first); returns the pids killed."""
        killed = []
        deadline = time.monotonic() + timeout
        while True:
            left = self.leftover_processes()
            if not left or time.monotonic() > deadline:
                return killed
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)

    def shim_sockets(self) -> List[str]:
        out = []
        for b in self.bundles():
            try:
                with open(os.path.join(b, "address"), encoding="utf-8") as f:
                    addr = f.read().strip()
            except OSError:
                continue
            if addr.startswith("unix://"):
                out.append(addr[len("unix://"):])
        return out

    def cleanup(self) -> List[str]:
        """Remove everything this containerd made; returns the problems (an empty list when clean)."""
        problems = self.remove_pods()
        sockets = self.shim_sockets()
        self.stop()
        killed = self.kill_leftovers()
        if killed:
            problems.append(f"processes left after containerd stopped (killed): {sorted(set(killed))}")
        still = self.leftover_processes()
        if still:
            problems.append(f"processes still alive: {still}")
        sockets += self.shim_sockets()
        libc = ctypes.CDLL(None, use_errno=True)
        for point in mounts_under(self.dir):
            if libc.umount2(os.fsencode(point), 0) != 0 and libc.umount2(os.fsencode(point), MNT_DETACH) != 0:
                problems.append(f"umount {point}: errno {ctypes.get_errno()}")
        for s in set(sockets):
            if os.path.exists(s):
                try:
                    os.unlink(s)
                except OSError as exc:
                    problems.append(f"shim socket {s}: {exc}")
        # Deepest first. One that another instance still uses for a shim is not empty; an empty one is
        # made again by the next shim that needs it.
        for d in shared_run_dirs():
            if d not in self.run_dirs_before:
                try:
                    os.rmdir(d)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.ENOENT):
                        problems.append(f"{d}: {exc}")
        if mounts_under(self.dir):
            problems.append(f"mounts left under {self.dir}: {mounts_under(self.dir)}")
        else:
            subprocess.run(["rm", "-rf", "--one-file-system", self.dir], capture_output=True, timeout=120)
            if os.path.exists(self.dir):
                problems.append(f"{self.dir} could not be removed")
        return problems


@contextlib.contextmanager
def running(version: str = "1.7", archives: Iterable[str] = (), **kwargs) -> Iterator[Containerd]:
    """A started containerd ``version`` with the busybox and pause images and ``archives`` (image
    tarballs) imported; everything it made is removed on exit (an AssertionError names what was left)."""
    c = Containerd(version=version, **kwargs)
    try:
        c.start()
        c.import_images()
        for archive in archives:
            c.ctr("images", "import", archive, timeout=300)
    except BaseException:
        problems = c.cleanup()
        assert not problems, problems
        raise
    try:
        yield c
    finally:
        problems = c.cleanup()
        assert not problems, f"containerd cleanup: {problems}"
