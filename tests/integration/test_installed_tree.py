"""`make install` for the system python3, run by the system python3 ALONE (no venv, `python3 -I`).

Two targets, each the installed tree plus the distribution's own packages of the dependencies:

* Debian 12: this machine's /usr/bin/python3 (3.11) with python3-click, -yaml, -jsonschema,
  -psutil and -protobuf (scripts/install-deps.sh installs them). The tree is installed into a
  temporary DESTDIR and laid over /usr with overlayfs in a private mount namespace, so
  /usr/bin/mixed-cpus-hook and /usr/lib/python3/dist-packages/mixed_cpus_hook are where the
  system python3 finds them, and the machine's /usr is never written.
* Debian bullseye (python3 3.9.2, click 7.1.2, PyYAML 5.3.1, jsonschema 3.2.0, psutil 5.8.0,
  protobuf 3.12.4): the stand-in for RHEL 9's platform Python 3.9 this archive offers. The cached
  rootfs of `scripts/fetch-bullseye.sh deps` is the lower layer of an overlay in a private mount
  namespace; `make install DESTDIR=<overlay> PYTHON3_RUN="chroot <overlay> /usr/bin/python3"` asks
  bullseye's own python3 for its site directory; the driver runs in a chroot with /proc mounted
  (psutil). The cache is never written, every mount ends with the namespace (and /proc is
  unmounted before), and the overlay's upper layer is a temporary directory.

In both, tests/integration/installed_tree_driver.py builds a fake node with the installed
package and runs --help, check, apply, status, the watches module, nri --help (and imports the
NRI plugin with the distribution's protobuf), and release.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().parent / "installed_tree_driver.py"
SYSTEM_PYTHON = "/usr/bin/python3"
DEPS = ("click", "yaml", "jsonschema", "psutil", "google.protobuf")


def need_root_tools() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (a private mount namespace with overlayfs)")
    for tool in ("unshare", "mount", "make", "chroot"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


def build_python() -> str:
    """Any python3 with pip, setuptools and wheel builds the wheel (the venv's here: never in the tree)."""
    return sys.executable


def in_namespace(script: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`sh -eu -c script` in a private mount namespace: every mount it makes ends with it."""
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-euc", script],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=timeout, check=False)


def mounts_under(path: Path) -> list:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return [line for line in f if f" {path}" in line]


def check_driver_output(result: Dict[str, Any], python: str, bundle: str) -> None:
    """The same verdict for every target: each step as a node would see it.

    ``bundle``: the hook path's bundle make install should have left ("current": written by the
    target's python3, which ran here; "absent": the target's python3 runs only in a chroot).
    """
    steps = result["steps"]
    assert result["bundle"] == bundle
    assert steps["hook_loader"]["stdout"].strip() == ("BundleFinder" if bundle == "current" else "SourceFileLoader"), \
        steps["hook_loader"]
    assert result["python"] == python, result["python"]
    assert result["executable"] == SYSTEM_PYTHON and result["shebang"] == f"#!{SYSTEM_PYTHON} -I"
    assert result["package"].startswith("/usr/lib/python3/dist-packages/mixed_cpus_hook/"), result["package"]
    for name in ("help", "apply", "watches_reconcile", "nri_help", "nri_import", "release"):
        assert steps[name]["rc"] == 0, (name, steps[name])
    # apply queued the container for its watch units: the sync starts them with systemctl, which
    # cannot work here (no systemd as PID 1, or no systemctl at all in the chroot): one error line.
    sync = steps["watches_sync"]
    assert sync["rc"] in (0, 1) and all(re.match(r"mixed-cpus-hook: error: (systemd: )?systemctl ", line)
                                        for line in sync["stderr"].splitlines()), sync["stderr"]
    assert "Exit codes" in steps["help"]["stdout"] and "--socket" in steps["nri_help"]["stdout"]
    findings = {f["check"]: f for f in json.loads(steps["check"]["stdout"])}
    assert steps["check"]["rc"] in (0, 1) and findings["config"]["status"] == "ok", steps["check"]
    assert findings["shared-cpus"]["status"] == "ok" and findings["thread-affinity"]["message"].startswith(
        "not probed (--no-probe)"), findings
    assert result["cpuset_after_apply"] == "0-3"
    status = steps["status"]
    assert status["rc"] == 3, status  # kubelet's rewrite: drift, until the watch's reapply
    (row,) = json.loads(status["stdout"])["rows"]
    assert (row["id"], row["actual"], row["desired"]) == ("c1", "2-3", "0-3")
    assert result["cpuset_after_reconcile"] == "0-3"
    assert result["records_after_release"] == []


def test_debian12_system_python(tmp_path: Path) -> None:
    """Debian 12's /usr/bin/python3 and Debian's packages of the dependencies, nothing else."""
    need_root_tools()
    missing = subprocess.run([SYSTEM_PYTHON, "-I", "-c", f"import {', '.join(DEPS)}"], stderr=subprocess.PIPE,
                             universal_newlines=True, check=False)
    if missing.returncode != 0:
        pytest.fail("Debian's python3-click/-yaml/-jsonschema/-psutil/-protobuf are not all installed "
                    f"(scripts/install-deps.sh): {missing.stderr.strip().splitlines()[-1]}")
    dest = tmp_path / "root"
    proc = subprocess.run(["make", "-C", str(REPO), "install", f"DESTDIR={dest}", f"PYTHON={build_python()}",
                           "PREFIX=/usr", "MODE=hook"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (dest / "usr/lib/python3/dist-packages/mixed_cpus_hook/frontends/hook/fastpath.py").is_file()
    proc = in_namespace(f"mount -t overlay overlay -o lowerdir={dest}/usr:/usr /usr\n"
                        f"exec {SYSTEM_PYTHON} -I {DRIVER}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import platform; print(platform.python_version())"],
                             stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.strip()
    result = json.loads(proc.stdout)
    check_driver_output(result, version, bundle="current")
    assert result["steps"]["nri_import"]["stdout"].split()[1:] == ["False"]  # no pkg_resources
    assert not mounts_under(dest)


def test_bullseye_python39_chroot(tmp_path: Path) -> None:
    """Debian bullseye's python3 3.9.2 and its packages (the stand-in for RHEL 9), in a chroot."""
    need_root_tools()
    fetched = subprocess.run(["sh", str(REPO / "scripts/fetch-bullseye.sh"), "deps"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True, timeout=900, check=False)
    if fetched.returncode != 0:
        pytest.fail(f"scripts/fetch-bullseye.sh deps failed: {fetched.stderr.strip()[-2000:]}")
    lower = Path(fetched.stdout.strip())
    before = sorted(p.name for p in lower.iterdir())
    upper, work, merged = tmp_path / "upper", tmp_path / "work", tmp_path / "merged"
    for d in (upper, work, merged):
        d.mkdir()
    run_in = f"chroot {merged} /usr/bin/python3"
    script = f"""
mount -t overlay overlay -o lowerdir={lower},upperdir={upper},workdir={work} {merged}
make -C {REPO} install DESTDIR={merged} PREFIX=/usr MODE=nri PYTHON={build_python()} PYTHON3=/usr/bin/python3 \
    PYTHON3_RUN="{run_in}" BYTECOMPILE= >&2
cp {DRIVER} {merged}/tmp/installed_tree_driver.py
mount -t proc proc {merged}/proc
rc=0
chroot {merged} /usr/bin/python3 -I /tmp/installed_tree_driver.py || rc=$?
umount {merged}/proc
umount {merged}
exit $rc
"""
    proc = in_namespace(script)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    check_driver_output(result, "3.9.2", bundle="absent")
    # protobuf 3.12's packages ask for pkg_resources; the plugin imports them without it (4.2 MiB).
    assert result["steps"]["nri_import"]["stdout"].strip() == "3.12.4 False"
    assert "mixed_cpus_hook" in {p.name for p in (upper / "usr/lib/python3/dist-packages").iterdir()}
    # The cached rootfs is the overlay's lower layer: untouched, and nothing is left mounted.
    assert sorted(p.name for p in lower.iterdir()) == before
    assert not (lower / "usr/lib/python3/dist-packages/mixed_cpus_hook").exists()
    assert not mounts_under(merged) and not mounts_under(lower)


def test_the_nri_benchmark_runs_the_plugin_on_bullseyes_own_userland() -> None:
    """benchmarks/nri_reference.py --rootfs: bullseye's python3 through its own loader and libraries
    (no chroot: the plugin must see this machine's containerd and cgroups) with the checkout's source,
    its distribution's protobuf (C++), and the plugin importing it without pkg_resources."""
    need_root_tools()
    fetched = subprocess.run(["sh", str(REPO / "scripts/fetch-bullseye.sh"), "deps"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True, timeout=900, check=False)
    if fetched.returncode != 0:
        pytest.fail(f"scripts/fetch-bullseye.sh deps failed: {fetched.stderr.strip()[-2000:]}")
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import nri_reference as ref
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    root = fetched.stdout.strip()
    python = ref.format_rootfs_python(root, str(REPO / "hook"))
    assert ref.read_rootfs_interpreter(python) == \
        f"{root}/usr/bin/python3 (Python 3.9.2, its distribution's protobuf 3.12.4, cpp)"
    probe = "import sys, mixed_cpus_hook.frontends.nri.plugin as p; print(p.__file__, 'pkg_resources' in sys.modules)"
    done = subprocess.run(["sh", "-c", f"exec {python} -c {shlex.quote(probe)}"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120, check=False, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(REPO / "hook/mixed_cpus_hook/frontends/nri/plugin.py"), "False"]
    helped = subprocess.run(["sh", "-c", f"exec {python} -m mixed_cpus_hook nri --help"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True, timeout=120, check=False, cwd="/")
    assert helped.returncode == 0 and "--socket" in helped.stdout, helped.stderr
