"""Run the INSTALLED mixed-cpus-hook the way a node does, under the system python3 alone.

Executed by tests/integration/test_installed_tree.py with the target's own interpreter
(``/usr/bin/python3 -I``: no venv, no PYTHONPATH) where ``make install`` laid the tree down:
Debian 12's python3 over an overlay of /usr, or Debian bullseye's (Python 3.9) in a chroot.
Standard library only besides the installed package. It builds a fake node with the installed
``mixed_cpus_hook.testing.fakenode`` in a temporary directory, runs the installed ``/usr/bin/mixed-cpus-hook``
(its #! line picks the interpreter) and ``python3 -I -m mixed_cpus_hook.frontends.systemd.watches``, and prints one
JSON object: each step's argv, exit code, stdout and stderr, and the cgroup files it looked at.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

EXE = "/usr/bin/mixed-cpus-hook"


def main() -> int:
    import mixed_cpus_hook
    from mixed_cpus_hook.testing.fakenode import FakeNode

    tmp = tempfile.mkdtemp(prefix="mch-installed-")
    out = {"python": sys.version.split()[0], "executable": sys.executable, "package": mixed_cpus_hook.__file__,
           "shebang": open(EXE).readline().strip(), "steps": {}}
    try:
        node = FakeNode(os.path.join(tmp, "node"), version=1, online="0-3")
        config = node.write_config("0-1", extra={"allowed_namespaces": ["ran"]})
        paths = node.add_container("c1", quota=200000, pod_quota=200000)
        env = dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=os.path.join(tmp, "cache"), MIXED_CPUS_HOOK_NO_SYSLOG="1")

        def step(name, argv, stdin=""):
            proc = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  universal_newlines=True, env=env, timeout=120)
            out["steps"][name] = {"argv": argv, "rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

        with open(paths["state"]) as f:
            state = f.read()
        step("help", [EXE, "--help"])
        step("check", [EXE, "--config", config, "check", "--json", "--no-systemd", "--no-probe",
                       "--hooks-dir", os.path.join(tmp, "hooks.d")])
        step("apply", [EXE, "--config", config, "apply"], stdin=state)
        out["cpuset_after_apply"] = node.read(paths["rel"], "cpuset.cpus")
        node.write(paths["rel"], "cpuset.cpus", "2-3")  # kubelet's rewrite
        step("status", [EXE, "status", "--json", "--config", config])
        step("watches_reconcile", [sys.executable, "-I", "-m", "mixed_cpus_hook.frontends.systemd.watches", "--config", config,
                                   "reconcile", "c1"])
        out["cpuset_after_reconcile"] = node.read(paths["rel"], "cpuset.cpus")
        step("watches_sync", [sys.executable, "-I", "-m", "mixed_cpus_hook.frontends.systemd.watches", "--config", config, "sync"])
        step("nri_help", [EXE, "nri", "--help"])
        # The distribution's protobuf, and whether importing it brought in pkg_resources (protobuf
        # 3.x asks for it: frontends/nri/__init__.import_protobuf keeps it out).
        step("nri_import", [sys.executable, "-I", "-c", "import sys, mixed_cpus_hook.frontends.nri.plugin, google.protobuf; "
                            "print(google.protobuf.__version__, 'pkg_resources' in sys.modules)"])
        # Which loader a fresh `python3 -I` uses for the hook path: the bundle's finder when
        # make install wrote the bundle (mixed_cpus_hook/__init__.py), else the usual .pyc loader.
        step("hook_loader", [sys.executable, "-I", "-c", "import mixed_cpus_hook.usecases.apply as m; l = m.__spec__.loader; "
                             "print(l.__name__ if isinstance(l, type) else type(l).__name__)"])
        from mixed_cpus_hook.ops.hookbundle import read_bundle_status

        out["bundle"] = read_bundle_status(os.path.dirname(mixed_cpus_hook.__file__))[0]
        step("release", [EXE, "--config", config, "release"], stdin=state)
        out["records_after_release"] = sorted(os.listdir(os.path.join(node.state_dir, "containers")))
    finally:
        shutil.rmtree(tmp)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
