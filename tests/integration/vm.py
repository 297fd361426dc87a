"""Run a shell script inside a throwaway virtme-ng VM with pure cgroup v2.

The host of this project's CI has a hybrid cgroup layout (v1 controllers, an
empty cgroup2), on which crun refuses to work and no cgroup v2 controller can
be exercised.  virtme-ng boots the host's own Debian kernel under qemu with the
host's whole file system as a read-only root (plus throwaway overlays on /etc,
/usr, /var, /tmp, ...), which gives a guest with:

* pure cgroup v2 at /sys/fs/cgroup with the cpuset and cpu controllers;
* ``cpus`` vCPUs;
* the host's runc, crun, busybox, python interpreters and the project's venv,
  unchanged (they are read from the host file system).

Only the ``--rwdir`` directory is shared read-write with the host: the script
and everything it wants to hand back must live there.  The guest's console
output may be lost when the VM powers off, so :func:`run_in_vm` wraps the
script and redirects its stdout and stderr into ``output.log`` in ``rwdir``,
and records its exit status in ``exit-status``.

``--disable-kvm`` is always passed: /dev/kvm exists on the CI machines but a
KVM guest hangs at kernel entry there.  The guest is therefore emulated: a boot
takes ~40 s and everything inside is slow (a cold ``python3 -c 'import json'``
takes 3-5 s), so give commands inside generous timeouts.

Typical use from a test::

    reason = vm.skip_reason()
    if reason:
        pytest.skip(reason)
    with tempfile.TemporaryDirectory(prefix="vng-") as rwdir:
        result = vm.run_in_vm("cat /sys/fs/cgroup/cgroup.controllers", rwdir)
        assert result.returncode == 0, result.describe()
        assert "cpuset" in result.output
"""

import fcntl
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Union

__all__ = [
    "DEFAULT_VENV_DIR",
    "ScenarioRun",
    "VNG_REQUIREMENT",
    "VMError",
    "VMTimeoutError",
    "VMStallError",
    "VMResult",
    "ensure_vng",
    "find_kernel",
    "run_in_vm",
    "run_scenario",
    "link_tree",
    "skip_reason",
]

#: Repository root (tests/integration/vm.py -> parents[2]).
REPO_ROOT = Path(__file__).resolve().parents[2]

#: Where :func:`ensure_vng` installs virtme-ng by default (git-ignored).
DEFAULT_VENV_DIR = str(REPO_ROOT / ".venv-vng")

#: What pip installs into that venv.  1.42 is the version the harness was
#: verified with; the option names used here have been stable for long.
VNG_REQUIREMENT = "virtme-ng>=1.30"

#: Name of the files the wrapper writes into ``rwdir``.
SCRIPT_NAME = "script.sh"
WRAPPER_NAME = "vm-wrapper.sh"
OUTPUT_NAME = "output.log"
STATUS_NAME = "exit-status"

_PathLike = Union[str, "os.PathLike[str]"]


class VMError(RuntimeError):
    """The VM could not be started or did not behave as expected."""


class VMTimeoutError(VMError):
    """The VM did not power off within the allotted time (it was killed)."""

    def __init__(self, message: str, output: str, vng_output: str) -> None:
        super().__init__(message)
        #: What the script had written to ``output.log`` when it was killed.
        self.output = output
        #: What vng/qemu printed on its console until then.
        self.vng_output = vng_output


def format_console_tail(vng_output: str, lines: int = 30) -> str:
    """The last ``lines`` of vng/qemu's console, headed, for a failure's message."""
    return "--- vng console (tail) ---\n" + "\n".join(vng_output.splitlines()[-lines:])


class VMBootTimeoutError(VMTimeoutError):
    """The guest never started the script within the boot timeout (it was killed)."""


class VMStallError(VMTimeoutError):
    """The script wrote nothing in ``rwdir`` for the stall timeout (the guest hung; it was killed)."""


class VMResult:
    """Outcome of one :func:`run_in_vm` call."""

    def __init__(
        self,
        returncode: int,
        output: str,
        elapsed: float,
        vng_returncode: int,
        vng_output: str,
        command: List[str],
    ) -> None:
        #: Exit status of the script inside the guest (from ``exit-status``
        #: in rwdir; falls back to vng's own exit status if the wrapper could
        #: not record it, e.g. when the guest crashed).
        self.returncode = returncode
        #: The script's stdout and stderr (``output.log`` in rwdir).
        self.output = output
        #: Wall-clock seconds from starting vng to its exit (boot included).
        self.elapsed = elapsed
        #: vng's exit status (normally the same as ``returncode``).
        self.vng_returncode = vng_returncode
        #: vng/qemu console output (stdout and stderr merged), for diagnosis.
        self.vng_output = vng_output
        #: The vng command line that was run.
        self.command = command

    def describe(self) -> str:
        """Return a human-readable summary, handy as an assertion message."""
        return (
            "script exit status %d (vng %d) after %.1f s\n"
            "command: %s\n--- script output ---\n%s\n%s"
            % (
                self.returncode,
                self.vng_returncode,
                self.elapsed,
                " ".join(shlex.quote(c) for c in self.command),
                self.output,
                format_console_tail(self.vng_output),
            )
        )

    def __repr__(self) -> str:
        return "VMResult(returncode=%d, elapsed=%.1f, output=%d chars)" % (
            self.returncode,
            self.elapsed,
            len(self.output),
        )


def _venv_bin(venv_dir: _PathLike) -> Path:
    return Path(venv_dir) / "bin"


def _vng_ready(venv_dir: _PathLike) -> bool:
    bindir = _venv_bin(venv_dir)
    # vng calls virtme-run through PATH; both come from the virtme-ng wheel.
    return all(os.access(str(bindir / name), os.X_OK) for name in ("vng", "virtme-run", "python"))


def ensure_vng(
    venv_dir: _PathLike = DEFAULT_VENV_DIR,
    python: Optional[str] = None,
    timeout: float = 600,
) -> str:
    """Make sure virtme-ng is installed in a venv and return its ``vng`` path.

    Creates the venv at ``venv_dir`` with ``python`` (default: the running
    interpreter) and ``pip install``\\ s :data:`VNG_REQUIREMENT` into it, unless
    that is already done, in which case this returns immediately.  Concurrent
    callers (e.g. pytest-xdist workers) are serialised with a lock file in the
    venv directory.

    Note that ``vng`` runs ``virtme-run`` through ``PATH``: run it with the
    venv's ``bin`` directory first in ``PATH`` (:func:`run_in_vm` does).

    Raises :class:`VMError` when the venv or the installation fails.
    """
    venv = Path(venv_dir).absolute()
    vng = _venv_bin(venv) / "vng"
    if _vng_ready(venv):
        return str(vng)
    # The lock lives inside the venv dir (git-ignored with it); "python -m
    # venv" is fine with an existing directory.
    venv.mkdir(parents=True, exist_ok=True)
    lock_path = venv / ".vng-install.lock"
    with open(str(lock_path), "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            if _vng_ready(venv):
                return str(vng)
            steps = []  # type: List[List[str]]
            if not os.access(str(_venv_bin(venv) / "python"), os.X_OK):
                steps.append([python or sys.executable, "-m", "venv", str(venv)])
            steps.append(
                [
                    str(_venv_bin(venv) / "python"),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    VNG_REQUIREMENT,
                ]
            )
            for cmd in steps:
                try:
                    proc = subprocess.run(
                        cmd,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        universal_newlines=True,
                        timeout=timeout,
                    )
                except (OSError, subprocess.TimeoutExpired) as exc:
                    raise VMError("cannot run %s: %s" % (" ".join(cmd), exc)) from exc
                if proc.returncode != 0:
                    raise VMError("%s failed (exit %d):\n%s" % (" ".join(cmd), proc.returncode, proc.stdout[-4000:]))
            if not _vng_ready(venv):
                raise VMError("virtme-ng installed in %s but no bin/vng there" % venv)
            return str(vng)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _version_key(path: str) -> List[Union[int, str]]:
    """Natural sort key: ``vmlinuz-6.10.0`` sorts after ``vmlinuz-6.9.0``."""
    key = []  # type: List[Union[int, str]]
    for part in re.split(r"(\d+)", os.path.basename(path)):
        if part.isdigit():
            key.append(int(part))
        elif part:
            key.append(part)
    return key


def find_kernel(boot_dir: str = "/boot") -> str:
    """Return the path of the newest ``vmlinuz-*`` kernel in ``boot_dir``.

    "Newest" is by version number (natural sort of the file name).  Raises
    :class:`FileNotFoundError` when there is none.
    """
    candidates = [p for p in glob.glob(os.path.join(boot_dir, "vmlinuz-*")) if os.path.isfile(p)]
    if not candidates:
        raise FileNotFoundError("no %s/vmlinuz-* kernel (apt-get install linux-image-amd64)" % boot_dir)
    # Compare ints with ints only: keys of different shapes fall back to str.
    try:
        return max(candidates, key=_version_key)
    except TypeError:
        return max(candidates)


def _read_text(path: Path) -> str:
    try:
        with open(str(path), "r", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _kill_group(proc: "subprocess.Popen[str]", grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL, the process group led by ``proc`` (ours only)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            # The leader is gone; qemu may linger briefly in the same group.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


# Seconds for the emulated guest to boot and start the script (about 40 s on this machine kind,
# up to about 2 minutes beside a busy test run).
BOOT_TIMEOUT = 300


class _BootHung(Exception):
    pass


class _Stalled(Exception):
    pass


STALL_POLL = 2.0
# Seconds without a write in the rwdir after which a guest is taken as hung (run_in_vm's default). A
# scenario saves its results after every step: the longest gap between two saves measured 18 s (the
# NRI pool scenario's first kubelet step, 2026-12-07, on an idle 2-CPU Intel host; about three times
# that on a slower one); a short script writes output.log when it starts. The hook's v2 VM once
# stopped for 900 s.
STALL_TIMEOUT = 300.0


def compute_newest(rwdir: Path) -> int:
    """The newest modification time (ns) of the files directly in ``rwdir``: moves whenever the
    script writes its progress there."""
    newest = 0
    with os.scandir(rwdir) as it:
        for entry in it:
            try:
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime_ns)
            except OSError:
                continue
    return newest


def _wait_with_progress(proc: "subprocess.Popen[str]", rwdir: Path, deadline: float, stall_timeout: float,
                        clock: Callable[[], float] = time.monotonic) -> None:
    """proc.wait until ``deadline`` (subprocess.TimeoutExpired past it), and _Stalled as soon as no file in
    ``rwdir`` changed for ``stall_timeout`` seconds."""
    last, changed = compute_newest(rwdir), clock()
    while True:
        try:
            proc.wait(timeout=max(0.0, min(STALL_POLL, deadline - clock())))
            return
        except subprocess.TimeoutExpired:
            now = clock()
            if now >= deadline:
                raise
            newest = compute_newest(rwdir)
            if newest != last:
                last, changed = newest, now
            elif now - changed >= stall_timeout:
                raise _Stalled() from None


def _wait_for_script(proc: "subprocess.Popen[str]", output_path: Path, start: float, boot_timeout: float) -> None:
    """Return once the guest's wrapper has made ``output_path`` (the script runs) or the VM has
    exited; _BootHung when neither happened within ``boot_timeout`` seconds of ``start``."""
    while not output_path.exists() and proc.poll() is None:
        if time.monotonic() - start > boot_timeout:
            raise _BootHung()
        time.sleep(0.5)


def run_in_vm(
    script: str,
    rwdir: _PathLike,
    cpus: int = 4,
    memory: str = "1G",
    timeout: float = 900,
    kernel: Optional[str] = None,
    venv_dir: _PathLike = DEFAULT_VENV_DIR,
    extra_args: Sequence[str] = (),
    boot_timeout: float = BOOT_TIMEOUT,
    boot_retries: int = 1,
    stall_timeout: Optional[float] = STALL_TIMEOUT,
    stall_retries: int = 1,
) -> VMResult:
    """Boot a throwaway VM, run ``script`` with ``sh`` inside, and power off.

    ``script`` is POSIX shell source; it is written to ``rwdir/script.sh`` and
    run as root from ``rwdir`` (as its working directory) with its stdout and
    stderr redirected to ``rwdir/output.log``.  ``rwdir`` must be an existing
    absolute host directory (a ``tempfile`` dir under /tmp works); it is
    shared read-write at the same path in the guest, and it is the only place
    whose writes survive the VM.  Inside, ``$VM_RWDIR`` holds its path.  Use
    ``bash "$VM_RWDIR/x.sh"`` from the script if you need bash.

    The rest of the guest's file system is the host's, read-only, with
    throwaway writable overlays on /etc, /usr, /var, /tmp, /home, /opt, /srv
    and tmpfs on /run and /var/tmp.

    Runs ``vng --run KERNEL --cpus CPUS --memory MEMORY --disable-kvm
    --rwdir RWDIR --exec 'sh RWDIR/vm-wrapper.sh' EXTRA_ARGS`` in a new
    process group.  If it has not finished after ``timeout`` seconds, that
    process group (and only it) is killed and :class:`VMTimeoutError` is raised
    with the output so far.

    A guest that has not started the script after ``boot_timeout`` seconds
    (its ``output.log`` not made: the emulated boot hung; seen once in a CI run,
    where nothing of the script had run) is killed and booted again, at most
    ``boot_retries`` times, saying so on stderr; then :class:`VMBootTimeoutError`.
    ``timeout`` counts from each boot.

    A guest whose script wrote nothing in ``rwdir`` for ``stall_timeout`` seconds (None: no watchdog;
    a long script writes its progress there as it goes) is killed (:class:`VMStallError`) and run
    again from its start, at most ``stall_retries`` times, saying so on stderr (seen once in a CI run:
    the emulated guest stopped in the middle of a step that takes a second, and stayed so for 900 s).

    Returns a :class:`VMResult` with the script's exit status and output and
    the elapsed time (boot and power-off included).
    """
    boots, stalls = 0, 0
    while True:
        try:
            return _run_in_vm_once(script, rwdir, cpus, memory, timeout, kernel, venv_dir, extra_args, boot_timeout,
                                   stall_timeout)
        except VMBootTimeoutError as exc:
            if boots == boot_retries:
                raise
            boots += 1
            sys.stderr.write("vm.py: %s; booting again\n" % str(exc).splitlines()[0])
        except VMStallError as exc:
            if stalls == stall_retries:
                raise
            stalls += 1
            sys.stderr.write("vm.py: %s; running it again\n" % str(exc).splitlines()[0])


def _run_in_vm_once(script: str, rwdir: _PathLike, cpus: int, memory: str, timeout: float, kernel: Optional[str],
                    venv_dir: _PathLike, extra_args: Sequence[str], boot_timeout: float,
                    stall_timeout: Optional[float] = None) -> VMResult:
    rw = Path(rwdir)
    if not rw.is_absolute():
        rw = rw.absolute()
    if not rw.is_dir():
        raise VMError("rwdir %s is not a directory" % rw)
    rws = str(rw)
    if any(c in rws for c in " \t\n'\"\\$`,="):
        # vng splits --rwdir on '=' and the kernel command line on blanks.
        raise VMError("rwdir %r must not contain blanks, quotes, ',' or '='" % rws)

    vng = ensure_vng(venv_dir)
    kernel = kernel or find_kernel()

    script_path = rw / SCRIPT_NAME
    output_path = rw / OUTPUT_NAME
    status_path = rw / STATUS_NAME
    wrapper_path = rw / WRAPPER_NAME
    for stale in (output_path, status_path):
        if stale.exists():
            stale.unlink()
    script_path.write_text(script if script.endswith("\n") else script + "\n")
    q = shlex.quote
    wrapper_path.write_text(
        "#!/bin/sh\n"
        "# Written by tests/integration/vm.py: runs script.sh, keeps its output.\n"
        "VM_RWDIR=%(rw)s\n"
        "export VM_RWDIR\n"
        'cd "$VM_RWDIR" || exit 125\n'
        "sh %(script)s > %(out)s 2>&1 < /dev/null\n"
        "rc=$?\n"
        'echo "$rc" > %(status)s\n'
        "sync\n"
        'exit "$rc"\n'
        % {
            "rw": q(rws),
            "script": q(str(script_path)),
            "out": q(str(output_path)),
            "status": q(str(status_path)),
        }
    )

    command = [
        vng,
        "--run",
        kernel,
        "--cpus",
        str(cpus),
        "--memory",
        str(memory),
        "--disable-kvm",
        "--rwdir",
        rws,
        "--exec",
        "sh %s" % q(str(wrapper_path)),
    ] + list(extra_args)
    env = dict(os.environ)
    env["PATH"] = str(Path(vng).parent) + os.pathsep + env.get("PATH", os.defpath)

    start = time.monotonic()
    console = tempfile.TemporaryFile(mode="w+", errors="replace")  # vng's output: no pipe to fill while waiting
    try:
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                universal_newlines=True,
                errors="replace",
                cwd=rws,
                env=env,
                start_new_session=True,  # its own process group: killable as one
            )
        except OSError as exc:
            raise VMError("cannot start %s: %s" % (vng, exc)) from exc
        try:
            _wait_for_script(proc, output_path, start, min(boot_timeout, timeout))
            if stall_timeout is None:
                proc.wait(timeout=max(0.0, timeout - (time.monotonic() - start)))
            else:
                _wait_with_progress(proc, rw, start + timeout, stall_timeout)
        except (subprocess.TimeoutExpired, _BootHung, _Stalled) as exc:
            _kill_group(proc)
            proc.wait()
            console.seek(0)
            if isinstance(exc, _BootHung):
                raise VMBootTimeoutError("VM did not start the script within %s s of booting (killed)" % min(boot_timeout, timeout),
                                         output="", vng_output=console.read()) from None
            if isinstance(exc, _Stalled):
                raise VMStallError("VM script wrote nothing in %s for %s s (killed); script output so far:\n%s"
                                   % (rws, stall_timeout, _read_text(output_path)),
                                   output=_read_text(output_path), vng_output=console.read()) from None
            raise VMTimeoutError(
                "VM did not finish within %s s (killed); script output so far:\n%s" % (timeout, _read_text(output_path)),
                output=_read_text(output_path),
                vng_output=console.read(),
            ) from exc
        except BaseException:
            _kill_group(proc, grace=5.0)
            proc.wait()
            raise
        elapsed = time.monotonic() - start
        console.seek(0)
        vng_output = console.read()
    finally:
        console.close()

    status_text = _read_text(status_path).strip()
    returncode = int(status_text) if status_text.lstrip("-").isdigit() else proc.returncode
    return VMResult(
        returncode=returncode,
        output=_read_text(output_path),
        elapsed=elapsed,
        vng_returncode=proc.returncode,
        vng_output=vng_output or "",
        command=command,
    )


def skip_reason(venv_dir: _PathLike = DEFAULT_VENV_DIR) -> Optional[str]:
    """Return why VM tests cannot run here, or None when they can.

    Checks: Linux x86_64, running as root, ``qemu-system-x86_64`` on PATH, a
    readable ``/boot/vmlinuz-*``, and that virtme-ng is (or can be) installed
    with :func:`ensure_vng` (which may take ~10 s the first time).  Setting
    ``MIXED_CPUS_HOOK_NO_VM=1`` in the environment also skips.
    """
    if os.environ.get("MIXED_CPUS_HOOK_NO_VM"):
        return "MIXED_CPUS_HOOK_NO_VM is set"
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        return "VM tests need Linux on x86_64"
    if os.geteuid() != 0:
        return "VM tests need root (the guest runs as the host user)"
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
    try:
        kernel = find_kernel()
    except FileNotFoundError as exc:
        return str(exc)
    if not os.access(kernel, os.R_OK):
        return "kernel %s is not readable" % kernel
    try:
        ensure_vng(venv_dir)
    except VMError as exc:
        return "virtme-ng not installable: %s" % exc
    return None


class ScenarioRun(object):
    """What :func:`run_scenario` got: the VM's result (None after a timeout), the results document the
    scenario wrote (None when it wrote none), the timeout (or None)."""

    def __init__(self, result, doc, timeout) -> None:
        self.result, self.doc, self.timeout = result, doc, timeout

    def problem(self) -> Optional[str]:
        """Why there is nothing to assert (a timeout, no results file), or None."""
        if self.timeout is not None:
            return "%s\nsteps done: %s\n%s" % (
                self.timeout, (self.doc or {}).get("order"), format_console_tail(self.timeout.vng_output))
        if self.doc is None:
            return "the VM wrote no results file\n" + self.result.describe()
        return None


def run_scenario(scenario: str, inp: dict, rwdir: str, cpus: int = 4, timeout: float = 900,
                 keep_env: str = "MIXED_CPUS_HOOK_VM_RESULTS") -> ScenarioRun:
    """Run ``python -u SCENARIO INPUT.json RESULTS.json`` in a VM (this interpreter: the venv is visible
    there) with ``inp`` as INPUT.json in ``rwdir``; read RESULTS.json back (a copy goes to the file named by
    the environment variable ``keep_env`` when it is set). A guest that hangs is run again once
    (run_in_vm's watchdog; the scenario writes RESULTS.json afresh when it starts); a last stall is a
    timeout like any other (ScenarioRun.problem)."""
    import json

    with open(os.path.join(rwdir, "input.json"), "w") as f:
        json.dump(inp, f, indent=1)
    script = 'exec %s -u %s "$VM_RWDIR/input.json" "$VM_RWDIR/results.json"\n' % (sys.executable, scenario)
    try:
        result, timed_out = run_in_vm(script, rwdir, cpus=cpus, timeout=timeout), None
    except VMTimeoutError as exc:
        result, timed_out = None, exc
    path = os.path.join(rwdir, "results.json")
    doc = None
    if os.path.isfile(path):
        if os.environ.get(keep_env):
            shutil.copyfile(path, os.environ[keep_env])
        with open(path) as f:
            doc = json.load(f)
    return ScenarioRun(result, doc, timed_out)


def link_tree(src: str, dst: str) -> None:
    """A copy of the tree ``src`` at ``dst`` in the shared rwdir (the VM does not see the host's /var/cache):
    hard links when both are on one file system, else copies."""

    def link_or_copy(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link_or_copy)
