"""Integration tests for the systemd-in-namespaces harness (systemd_ns.py).

They boot a real systemd 252 in private PID/mount/cgroup namespaces and check
that it works (path units on real cgroup files, journald) and that it leaves
the machine as it found it (cgroups, processes, the real /tmp).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from typing import Callable, List

import pytest

try:  # tests/integration as a package
    from . import systemd_ns
except ImportError:  # rootdir-relative import (no __init__.py)
    import systemd_ns  # type: ignore[no-redef]

SystemdNamespace = systemd_ns.SystemdNamespace

_SKIP = systemd_ns.skip_reason()

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(_SKIP is not None, reason="systemd harness: %s" % _SKIP),
]

PATH_UNIT = """\
[Unit]
Description=harness test: watch a cgroup file

[Path]
PathModified=/sys/fs/cgroup/cpu/testcg/cpu.cfs_quota_us
Unit=t.service
"""

SERVICE_UNIT = """\
[Unit]
Description=harness test: record that the path unit fired

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'cat /sys/fs/cgroup/cpu/testcg/cpu.cfs_quota_us >> /run/t.log'
"""


def wait_for(pred: Callable[[], bool], timeout: float = 10.0,
             what: str = "condition") -> None:
    """Poll pred until true; fail the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail("timed out after %.0fs waiting for %s" % (timeout, what))
        time.sleep(0.05)


def procs_in_pidns(ns_inode: str) -> List[int]:
    """Host pids of the processes in the PID namespace ns_inode."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/ns/pid" % entry) == ns_inode:
                pids.append(int(entry))
        except OSError:
            pass
    return pids


def read_inside(sd: SystemdNamespace, path: str) -> str:
    return sd.run(["sh", "-c", 'cat "$1" 2>/dev/null || true', "cat", path]
                  ).stdout


def test_skip_reason_is_none_here() -> None:
    assert systemd_ns.skip_reason() is None


def test_boot_isolation_and_clean_exit(tmp_path) -> None:
    # Hazard 1: the machine's real /tmp must survive systemd's boot.
    marker = "/tmp/mch-harness-marker-%s" % uuid.uuid4().hex
    with open(marker, "w") as f:
        f.write("keep me\n")
    etc_path = "/etc/mixed-cpus-hook-harness-test/config.yaml"
    assert not os.path.exists(etc_path)
    try:
        t0 = time.monotonic()
        with SystemdNamespace(
                tmp_path, etc_files={etc_path: "cpus: test\n"}) as sd:
            booted = time.monotonic() - t0
            pid = sd.pid
            ns = os.readlink("/proc/%d/ns/pid" % pid)
            assert ns != os.readlink("/proc/self/ns/pid")
            assert os.readlink("/proc/%d/ns/cgroup" % pid) != \
                os.readlink("/proc/self/ns/cgroup")
            roots = {h: sd.inner_root_on_host(h) for h in sd.hierarchies}
            assert all(os.path.basename(d) == sd.name for d in roots.values())

            state = sd.run(["systemctl", "is-system-running"],
                           check=False).stdout.strip()
            assert state in ("running", "degraded")
            assert sd.failed_units() == []
            assert sd.run(["cat", "/proc/1/comm"]).stdout.strip() == "systemd"

            # systemd sees only its subtree: the cgroup root inside is ours.
            own = sd.run(["cat", "/proc/self/cgroup"]).stdout
            assert ":/mch-harness" in own, own
            assert any(os.path.isdir(os.path.join(d, "init.scope"))
                       for d in roots.values())

            # Private /tmp, /run, /var/tmp, /etc/systemd/system, /dev.
            assert not read_inside(sd, marker)
            for p in ("/tmp", "/run", "/var/tmp", "/etc/systemd/system"):
                fstype = sd.run(["findmnt", "-n", "-o", "FSTYPE",
                                 "--mountpoint", p]).stdout.split()
                assert fstype[-1] == "tmpfs", (p, fstype)
            assert sd.run(["findmnt", "-n", "-o", "FSTYPE", "--mountpoint",
                           "/etc"]).stdout.split()[-1] == "overlay"
            # The workdir is shared at the same path.
            (tmp_path / "from-host").write_text("hi\n")
            assert read_inside(sd, str(tmp_path / "from-host")) == "hi\n"

            # etc_files and install_file land in the private /etc only.
            assert read_inside(sd, etc_path) == "cpus: test\n"
            sd.install_file("/etc/mixed-cpus-hook-harness-test/other.conf",
                            "x=1\n", mode=0o600)
            out = sd.run(["stat", "-c", "%a %s",
                          "/etc/mixed-cpus-hook-harness-test/other.conf"])
            assert out.stdout.split() == ["600", "4"]
            assert not os.path.exists(os.path.dirname(etc_path))
            with pytest.raises(ValueError):
                sd.install_file("/usr/local/mch-should-not-exist", "x")
            assert time.monotonic() - t0 < 60
        took = time.monotonic() - t0
        print("boot %.2fs (harness %.2fs), boot+shutdown %.2fs, shutdown %.2fs"
              " via %s" % (booted, sd.boot_seconds or 0, took,
                           sd.shutdown_seconds or 0, sd.shutdown_how))

        # After exit: pid 1 and every process of its namespace are gone ...
        assert not sd.is_alive()
        assert procs_in_pidns(ns) == []
        assert not os.path.exists("/proc/%d" % pid) or \
            os.readlink("/proc/%d/ns/pid" % pid) != ns
        # ... our child cgroups are removed ...
        for d in roots.values():
            assert not os.path.exists(d), d
        # ... and the real /tmp and /etc are untouched.
        with open(marker) as f:
            assert f.read() == "keep me\n"
        assert not os.path.exists(os.path.dirname(etc_path))
        assert not os.path.exists("/dev/log") or os.path.islink("/dev/log")
    finally:
        os.unlink(marker)


def test_path_unit_fires_on_cgroup_write(tmp_path) -> None:
    with SystemdNamespace(tmp_path) as sd:
        if "cpu" not in sd.hierarchies:
            pytest.skip("needs the cgroup v1 cpu hierarchy (this test uses "
                        "cpu.cfs_quota_us)")
        sd.install_file("/etc/systemd/system/t.path", PATH_UNIT)
        sd.install_file("/etc/systemd/system/t.service", SERVICE_UNIT)
        sd.systemctl("daemon-reload")
        # systemd prunes empty cgroups at boot and daemon-reload: make the
        # watched cgroup only now.
        sd.run(["mkdir", "/sys/fs/cgroup/cpu/testcg"])
        host_file = sd.host_cgroup_dir("cpu", "/testcg/cpu.cfs_quota_us")
        assert os.path.isfile(host_file)
        sd.systemctl("start", "t.path")
        assert sd.systemctl("is-active", "t.path").stdout.strip() == "active"

        # A write inside fires the path unit; the host sees the new value.
        sd.run(["sh", "-c",
                "echo 50000 > /sys/fs/cgroup/cpu/testcg/cpu.cfs_quota_us"])
        wait_for(lambda: "50000" in read_inside(sd, "/run/t.log"),
                 what="t.service after a write inside")
        with open(host_file) as f:
            assert f.read().strip() == "50000"
        # The path unit watches again only once the service it started is done: a write in
        # between is not seen (the log line is written before the oneshot ends).
        wait_for(lambda: sd.systemctl("show", "-p", "SubState", "--value", "t.path").stdout.strip() == "waiting",
                 what="t.path waiting again")

        # A write from the host (same kernfs file) fires it too.
        with open(host_file, "w") as f:
            f.write("70000")
        wait_for(lambda: "70000" in read_inside(sd, "/run/t.log"),
                 what="t.service after a write from the host")
        assert sd.failed_units() == []
        testcg = sd.host_cgroup_dir("cpu", "/testcg")
    assert not os.path.exists(testcg)


def test_journald_works(tmp_path) -> None:
    token = "hello-%s" % uuid.uuid4().hex
    with SystemdNamespace(tmp_path) as sd:
        sd.run(["logger", "-t", "mixed-cpus-hook", token])

        def logged() -> bool:
            out = sd.journal("-t", "mixed-cpus-hook", "-o", "cat",
                             check=False).stdout
            return token in out

        wait_for(logged, what="the logger message in the journal")
        # Volatile journal: nothing inside writes the host's /var/log/journal.
        conf = sd.run(["systemd-analyze", "cat-config",
                       "systemd/journald.conf"]).stdout
        assert "Storage=volatile" in conf
        assert sd.run(["sh", "-c", "ls /run/log/journal"]).stdout.strip()


def test_only_minimal_units_run(tmp_path) -> None:
    with SystemdNamespace(tmp_path) as sd:
        out = sd.systemctl("list-units", "--type=service", "--state=running",
                           "--plain", "--no-legend").stdout
        running = sorted(ln.split()[0] for ln in out.splitlines() if ln)
        assert running == ["systemd-journald.service"], running
        for unit in ("systemd-tmpfiles-setup.service",
                     "systemd-udevd.service", "systemd-sysctl.service",
                     "postgresql.service", "getty.target"):
            state = sd.systemctl("is-enabled", unit, check=False).stdout
            assert state.strip() == "masked", (unit, state)


def test_back_to_back_and_concurrent(tmp_path) -> None:
    names = []
    for i in range(2):
        with SystemdNamespace(tmp_path / ("seq%d" % i)) as sd:
            assert sd.wait_running(10) in ("running", "degraded")
            names.append(sd.inner_root_on_host("cpu"))
    assert names[0] != names[1]
    assert not any(os.path.exists(d) for d in names)

    with SystemdNamespace(tmp_path / "a") as a, \
            SystemdNamespace(tmp_path / "b") as b:
        a.run(["mkdir", "/sys/fs/cgroup/cpu/only-in-a"])
        assert os.path.isdir(a.host_cgroup_dir("cpu", "/only-in-a"))
        assert not os.path.exists(b.host_cgroup_dir("cpu", "/only-in-a"))
        assert b.run(["test", "-e", "/sys/fs/cgroup/cpu/only-in-a"],
                     check=False).returncode == 1
        dirs = [a.inner_root_on_host("cpu"), b.inner_root_on_host("cpu")]
    assert not any(os.path.exists(d) for d in dirs)


def test_sigkill_fallback_when_poweroff_hangs(tmp_path) -> None:
    # Processes systemd does not manage (like a runc container) that ignore
    # SIGTERM hold poweroff up for 90 s: with a tiny poweroff timeout the
    # harness must SIGKILL pid 1, resume the raw nsenter that
    # systemd-shutdown's SIGSTOP broadcast stopped, and still clean up.
    loop = ["sh", "-c", "trap '' TERM; while :; do sleep 1; done"]
    with SystemdNamespace(tmp_path, poweroff_timeout=0.5) as sd:
        tracked = sd.popen(loop)
        raw = subprocess.Popen(sd.nsenter_prefix() + loop)
        wait_for(lambda: len(procs_in_pidns(
            os.readlink("/proc/%d/ns/pid" % sd.pid))) >= 4,
            what="the background processes")
        ns = os.readlink("/proc/%d/ns/pid" % sd.pid)
        roots = [sd.inner_root_on_host(h) for h in sd.hierarchies]
    assert tracked.poll() is not None
    assert raw.wait(10) is not None
    assert procs_in_pidns(ns) == []
    assert not any(os.path.exists(d) for d in roots)
    assert sd.shutdown_how == "sigkill"
    assert sd.shutdown_seconds is not None and sd.shutdown_seconds < 15


def test_units_and_binds_provided_at_boot(tmp_path) -> None:
    # A unit given through etc_files and pulled in by a drop-in for the boot
    # target runs at boot and writes through a read-write bind of a host dir.
    shared = tmp_path / "shared"
    shared.mkdir()
    unit = ("[Unit]\nDescription=harness test: boot-time unit\n"
            "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            "ExecStart=/bin/sh -c 'echo booted > /run/mnt-shared/at-boot'\n")
    etc = {
        "/etc/systemd/system/at-boot.service": unit,
        "/etc/systemd/system/mch-test.target.d/at-boot.conf":
            "[Unit]\nWants=at-boot.service\n",
    }
    with SystemdNamespace(tmp_path / "wd", etc_files=etc,
                          binds=[(str(shared), "/run/mnt-shared")]) as sd:
        assert sd.systemctl("is-active", "at-boot.service").stdout.strip() \
            == "active"
        assert (shared / "at-boot").read_text() == "booted\n"
        sd.install_file("/run/mnt-shared/from-inside", "in\n")
        assert (shared / "from-inside").read_text() == "in\n"
        (shared / "from-host").write_text("out\n")
        assert read_inside(sd, "/run/mnt-shared/from-host") == "out\n"
    assert not os.path.exists("/etc/systemd/system/at-boot.service")
    with pytest.raises(ValueError):
        SystemdNamespace(tmp_path / "wd2",
                         binds=[(str(shared), "/opt/not-there-mch")]).start()
