"""Smoke test of the virtme-ng VM harness (tests/integration/vm.py).

Boots ONE throwaway VM (~40 s or more: the guest is emulated) and checks what
the cgroup v2 integration tests rely on: pure cgroup v2 with the cpuset and cpu
controllers, 4 vCPUs, the host's Python environment visible read-only, results
handed back through the shared rwdir, and the script's exit status and output
coming back to the host.
"""

import os
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Dict

import pytest

try:  # collected as part of a package (tests/integration/__init__.py) or not
    from . import vm  # type: ignore
except ImportError:  # pragma: no cover - depends on how pytest imports us
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import vm  # type: ignore  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.vm]

#: The exit status the guest script ends with, to check it is propagated.
SCRIPT_EXIT = 3


def _parse_kv(output: str) -> Dict[str, str]:
    """Collect ``key=value`` lines printed by the guest script."""
    result = {}  # type: Dict[str, str]
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isidentifier():
            result[key] = value
    return result


@pytest.fixture(scope="module")
def vm_ready() -> None:
    """Skip unless a VM can be booted here (installs virtme-ng if needed)."""
    reason = vm.skip_reason()
    if reason:
        pytest.skip(reason)


def test_vm_boots_with_cgroup_v2_and_host_files(vm_ready: None, record_property) -> None:
    """One boot: cgroup v2 controllers, nproc, host venv, rwdir round trip."""
    prefix = sys.prefix  # the venv (or installation) running these tests
    script = """
echo "controllers=$(cat /sys/fs/cgroup/cgroup.controllers)"
echo "fstype=$(stat -f -c %T /sys/fs/cgroup)"
echo "nproc=$(nproc)"
echo "uid=$(id -u)"
echo "pwd=$(pwd)"
if [ -r {prefix}/bin/python3 ] || [ -r {prefix}/bin/python ]; then
    echo "venv_readable=yes"
else
    echo "venv_readable=no"
fi
echo "venv_python=$({exe} -c 'import sys; print(sys.prefix)')"
echo "hello from the guest" > "$VM_RWDIR/guest-file.txt"
echo "to stderr" >&2
exit {rc}
""".format(prefix=shlex.quote(prefix), exe=shlex.quote(sys.executable), rc=SCRIPT_EXIT)
    with tempfile.TemporaryDirectory(prefix="mch-vm-") as rwdir:
        result = vm.run_in_vm(script, rwdir, cpus=4, memory="1G", timeout=900)
        record_property("vm_elapsed_s", round(result.elapsed, 1))
        print("VM run took %.1f s" % result.elapsed)

        assert result.returncode == SCRIPT_EXIT, result.describe()
        assert result.vng_returncode == SCRIPT_EXIT, result.describe()
        facts = _parse_kv(result.output)
        controllers = facts.get("controllers", "").split()
        assert "cpuset" in controllers, result.describe()
        assert "cpu" in controllers, result.describe()
        assert facts.get("fstype") == "cgroup2fs", result.describe()
        assert facts.get("nproc") == "4", result.describe()
        assert facts.get("uid") == "0", result.describe()
        assert facts.get("pwd") == rwdir, result.describe()
        assert facts.get("venv_readable") == "yes", result.describe()
        assert facts.get("venv_python") == prefix, result.describe()
        assert "to stderr" in result.output, result.describe()
        with open(os.path.join(rwdir, "guest-file.txt")) as f:
            assert f.read() == "hello from the guest\n"
        assert result.elapsed > 0


# The stall watchdog, on a plain process (no VM): what run_in_vm's stall_timeout rests on.
def test_a_script_that_keeps_writing_is_waited_for(tmp_path) -> None:
    proc = subprocess.Popen(["sh", "-c", f"for i in 1 2 3 4 5 6 7 8; do touch {tmp_path}/f$i; sleep 0.5; done"])
    try:
        vm._wait_with_progress(proc, tmp_path, time.monotonic() + 60, stall_timeout=1.5)
        assert proc.returncode == 0
    finally:
        proc.kill()
        proc.wait()


def test_a_script_that_writes_nothing_is_found_stalled(tmp_path) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        start = time.monotonic()
        with pytest.raises(vm._Stalled):
            vm._wait_with_progress(proc, tmp_path, start + 60, stall_timeout=1.0)
        assert time.monotonic() - start < 10 and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_the_deadline_still_ends_the_wait(tmp_path) -> None:
    proc = subprocess.Popen(["sh", "-c", f"while :; do touch {tmp_path}/f; sleep 0.2; done"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            vm._wait_with_progress(proc, tmp_path, time.monotonic() + 3, stall_timeout=1.0)
    finally:
        proc.kill()
        proc.wait()
