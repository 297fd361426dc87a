"""Inside the throwaway cgroup v2 VM: a mixed container's life with runc and with crun.

Run by tests/integration/test_v2_vm.py through vm.run_in_vm, with the project's venv
python (the VM sees the host's file system read-only, so the venv runs unchanged)::

    python v2_lifecycle.py INPUT.json RESULTS.json

INPUT (written by the host test) holds the hook entries rendered from the shipped hooks.d
files, the paths of the hook's configuration and state inside the VM, the CPUs and quotas,
and the runtimes to run. RESULTS is rewritten (atomically) after every step, so whatever
happens the host test sees how far the scenario got; the host test asserts each step.

This script asserts nothing itself: it performs the steps and records exact values
(cgroup files, Cpus_allowed_list, the hook's records and output, the runtimes' state).
Standard library only, no pytest: python start-up is slow under emulation.

Per runtime (runc; crun with ``--cgroup-manager=cgroupfs``), on a kubelet-like cgroupfs
layout ``/kubepods/pod<uid>/crio-<id>`` with ``+cpuset +cpu`` in the subtree_control of
every level above the pod:

1. ``pod``: the pod cgroup with cpu.max "<pod_quota> <period>".
2. ``create_a``: container A (cpus exclusive, quota/period) with the hook at createRuntime
   (apply) and poststop (release) in its config.json, plus a hook that saves the OCI state
   the runtime sends on stdin.
3. ``update_a``: ``<runtime> update --cpuset-cpus <exclusive> --cpu-quota <quota>`` (what
   kubelet's CPU manager rewrite amounts to).
4. ``reconcile_dry_run`` (nothing written), ``status_drift`` (``status --json``).
5. ``reconcile``, then ``reconcile_again`` (quiet, nothing written).
6. ``delete_a``: kill, delete (poststop: release).
7. ``create_b``: container B in the same pod; ``delete_b``; ``pod_removed``.
8. ``parent_denies``: a sibling partition root of kubepods takes the shared CPUs, so the
   kernel accepts the container's wider cpuset.cpus but cpuset.cpus.effective stays the
   exclusive CPUs; the hook's v2 verification must refuse and roll back, failing the
   container's creation. ``parent_denies_cleanup`` undoes the partition.

Every python start costs seconds under emulation, so the hook's CLI runs only where a step
needs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
import uuid

CGROUP_ROOT = "/sys/fs/cgroup"
KUBEPODS = "kubepods"
CMD_TIMEOUT = 300  # a hook takes seconds under emulation; runtimes wait for it
STOP_TIMEOUT = 60
HOOK_ENV_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_started = time.monotonic()


# ---------------------------------------------------------------------------------------
# results


class Results:
    """The results document, rewritten atomically after every step."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.doc = {"done": False, "env": {}, "setup": {}, "runtimes": {}, "error": None, "elapsed": 0.0}
        self.save()

    def save(self) -> None:
        self.doc["elapsed"] = round(time.monotonic() - _started, 2)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.doc, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, self.path)

    def runtime(self, name: str) -> dict:
        return self.doc["runtimes"].setdefault(name, {"steps": [], "error": None})

    def step(self, runtime: str, name: str, **values) -> dict:
        entry = {"step": name, "t": round(time.monotonic() - _started, 2), **values}
        self.runtime(runtime)["steps"].append(entry)
        self.save()
        return entry


# ---------------------------------------------------------------------------------------
# small helpers


def read(path: str):
    """A file's stripped text, or None when it does not exist / cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return None


def write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def run(argv, timeout: float = CMD_TIMEOUT, env=None, stdin_text=None) -> dict:
    """Run a command with stdout/stderr in files (a detached container would hold a pipe)."""
    work = os.environ["MCH_VM_WORK"]
    out_path, err_path = os.path.join(work, "cmd.out"), os.path.join(work, "cmd.err")
    t0 = time.monotonic()
    with open(out_path, "w") as fo, open(err_path, "w") as fe:
        try:
            if stdin_text is not None:
                proc = subprocess.run(argv, input=stdin_text, stdout=fo, stderr=fe, timeout=timeout,
                                      env=env, universal_newlines=True)
            else:
                proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, timeout=timeout,
                                      env=env)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        except OSError as exc:
            rc = f"oserror: {exc}"
    with open(out_path, errors="replace") as fo, open(err_path, errors="replace") as fe:
        return {"argv": list(argv), "rc": rc, "stdout": fo.read(), "stderr": fe.read(),
                "seconds": round(time.monotonic() - t0, 2)}


def cpus_allowed(pid) -> str:
    text = read(f"/proc/{pid}/status") or ""
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return None


def cgroup_files(d: str) -> dict:
    if not os.path.isdir(d):
        return None
    names = ("cpuset.cpus", "cpuset.cpus.effective", "cpu.max", "cgroup.subtree_control", "cgroup.procs")
    return {n: read(os.path.join(d, n)) for n in names}


def load_records(state_dir: str) -> dict:
    out = {}
    for kind in ("containers", "pods"):
        folder = os.path.join(state_dir, kind)
        recs = {}
        if os.path.isdir(folder):
            for name in sorted(os.listdir(folder)):
                if name.endswith(".json") and not name.startswith("."):
                    try:
                        with open(os.path.join(folder, name), encoding="utf-8") as f:
                            recs[name[:-5]] = json.load(f)
                    except (OSError, ValueError) as exc:
                        recs[name[:-5]] = {"unreadable": str(exc)}
        out[kind] = recs
    return out


def record_mtimes(state_dir: str) -> dict:
    out = {}
    for kind in ("containers", "pods"):
        folder = os.path.join(state_dir, kind)
        if os.path.isdir(folder):
            for name in sorted(os.listdir(folder)):
                out[f"{kind}/{name}"] = os.stat(os.path.join(folder, name)).st_mtime_ns
    return out


def rmdir_tree(path: str, timeout: float = 20.0) -> list:
    deadline = time.monotonic() + timeout
    while True:
        left = []
        if os.path.isdir(path):
            for cur, dirs, _files in os.walk(path, topdown=False):
                for d in dirs:
                    try:
                        os.rmdir(os.path.join(cur, d))
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        left.append(f"{os.path.join(cur, d)}: {exc.strerror}")
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                left.append(f"{path}: {exc.strerror}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------
# the world inside the VM


class Ctx:
    def __init__(self, inp: dict, results: Results) -> None:
        self.inp = inp
        self.results = results
        self.exe = inp["hook_executable"]
        self.config_path = inp["config_path"]
        self.state_dir = inp["state_dir"]
        self.cache_dir = inp["cache_dir"]
        self.work = os.environ["MCH_VM_WORK"]
        self.shared = inp["shared"]
        self.exclusive = inp["exclusive"]
        self.quota = inp["quota"]
        self.period = inp["period"]
        self.pod_quota = inp["pod_quota"]
        self.busybox = inp["busybox"]

    def cli(self, *args: str) -> dict:
        env = dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=self.cache_dir)
        env.pop("MIXED_CPUS_HOOK_CONFIG", None)
        return run([self.exe, "--config", self.config_path, *args], env=env)

    def records(self) -> dict:
        return load_records(self.state_dir)


class Pod:
    def __init__(self, ctx: Ctx, quota: int, cpus: str = "") -> None:
        self.uid = str(uuid.uuid4())
        self.rel = f"/{KUBEPODS}/pod{self.uid}"
        self.dir = CGROUP_ROOT + self.rel
        self.key = f"pod{self.uid}"
        os.mkdir(self.dir)
        if cpus:
            write(f"{self.dir}/cpuset.cpus", cpus)
        write(f"{self.dir}/cpu.max", f"{quota} {ctx.period}")

    def files(self) -> dict:
        return cgroup_files(self.dir)


class Runtime:
    def __init__(self, name: str) -> None:
        self.name = name
        self.base = ["runc"] if name == "runc" else ["crun", "--cgroup-manager=cgroupfs"]
        self.ids = []

    def cmd(self, *args: str, timeout: float = CMD_TIMEOUT) -> dict:
        return run(self.base + list(args), timeout=timeout)

    def state(self, cid: str):
        r = self.cmd("state", cid, timeout=60)
        if r["rc"] != 0:
            return None
        try:
            return json.loads(r["stdout"])
        except ValueError:
            return {"unparsable": r["stdout"]}

    def version(self) -> str:
        return self.cmd("--version", timeout=60)["stdout"].strip()

    def stop(self, cid: str) -> dict:
        r = self.cmd("kill", cid, "KILL", timeout=60)
        deadline = time.monotonic() + STOP_TIMEOUT
        status = None
        while time.monotonic() < deadline:
            st = self.state(cid)
            status = st.get("status") if st else None
            if status == "stopped":
                break
            time.sleep(0.2)
        r["status_after"] = status
        return r

    def cleanup(self) -> list:
        problems = []
        for cid in self.ids:
            if self.state(cid) is None:
                continue
            self.cmd("kill", cid, "KILL", timeout=60)
            r = self.cmd("delete", "-f", cid, timeout=CMD_TIMEOUT)
            if r["rc"] != 0 and self.state(cid) is not None:
                problems.append(f"{self.name} delete -f {cid}: {r['stderr'].strip()}")
        return problems


class Container:
    def __init__(self, ctx: Ctx, rt: Runtime, suffix: str, pod: Pod, name: str) -> None:
        self.ctx, self.rt, self.pod, self.name = ctx, rt, pod, name
        self.id = f"{rt.name}-{suffix}"
        self.cgroup = f"{pod.dir}/crio-{self.id}"
        self.bundle = os.path.join(ctx.work, f"bundle-{self.id}")
        self.captured = {stage: os.path.join(ctx.work, f"state-{self.id}-{stage}.json")
                         for stage in ("createRuntime", "poststop")}
        # runc quotes a failed hook's stderr in its own error; crun drops it unless told
        # where to put it (its run.oci.hooks.stderr annotation).
        self.hook_stderr = os.path.join(ctx.work, f"hooks-{self.id}.stderr")

    def annotations(self) -> dict:
        """What CRI-O puts in a container's OCI annotations: kube names plus the pod's annotations."""
        return {
            "io.kubernetes.container.name": self.name,
            "io.kubernetes.pod.namespace": "vm-ns",
            "io.kubernetes.pod.name": f"vm-pod-{self.rt.name}",
            "io.kubernetes.pod.uid": self.pod.uid,
            f"{self.ctx.inp['annotation_prefix']}/{self.name}": "enable",
        }

    def make_bundle(self) -> None:
        rootfs = os.path.join(self.bundle, "rootfs")
        os.makedirs(os.path.join(rootfs, "bin"))
        shutil.copy2(self.ctx.busybox, os.path.join(rootfs, "bin", "busybox"))
        os.symlink("busybox", os.path.join(rootfs, "bin", "sh"))
        for d in ("proc", "dev", "sys", "tmp"):
            os.makedirs(os.path.join(rootfs, d), exist_ok=True)
        # `<runtime> spec` writes config.json into the current directory.
        subprocess.run([self.rt.base[0], "spec"], cwd=self.bundle, check=True, timeout=60,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        path = os.path.join(self.bundle, "config.json")
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        spec["root"]["path"] = rootfs  # absolute: crun wants it so
        spec["process"]["terminal"] = False
        spec["process"]["args"] = ["/bin/busybox", "sleep", "600"]
        spec["linux"]["cgroupsPath"] = f"{self.pod.rel}/crio-{self.id}"
        spec["linux"].setdefault("resources", {})["cpu"] = {
            "cpus": self.ctx.exclusive, "quota": self.ctx.quota, "period": self.ctx.period}
        spec["annotations"] = self.annotations()
        if self.rt.name == "crun":
            spec["annotations"]["run.oci.hooks.stderr"] = self.hook_stderr
        hooks = {}
        for stage, hook in self.ctx.inp["hooks"].items():
            capture = {"path": "/bin/sh", "args": ["sh", "-c", 'cat > "$1"', "sh", self.captured[stage]],
                       "env": [HOOK_ENV_PATH], "timeout": 60}
            hooks[stage] = [capture, hook]
        spec["hooks"] = hooks
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, indent=1)

    def create(self) -> dict:
        self.make_bundle()
        self.rt.ids.append(self.id)
        return self.rt.cmd("run", "-d", "--bundle", self.bundle, self.id)

    def pid(self):
        st = self.rt.state(self.id)
        return st.get("pid") if st else None

    def captured_state(self, stage: str):
        text = read(self.captured[stage])
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return {"unparsable": text}

    def inside_cpus_allowed(self) -> dict:
        r = self.rt.cmd("exec", self.id, "/bin/busybox", "grep", "Cpus_allowed_list", "/proc/1/status",
                        "/proc/self/status", timeout=120)
        out = {}
        for line in r["stdout"].splitlines():
            path, _, rest = line.partition(":")
            out[path] = rest.split(":", 1)[-1].strip()
        return {"rc": r["rc"], "values": out, "stderr": r["stderr"]}

    def snapshot(self) -> dict:
        pid = self.pid()
        return {
            "container": cgroup_files(self.cgroup),
            "pod": self.pod.files(),
            "pid": pid,
            "host_cpus_allowed": cpus_allowed(pid) if pid else None,
            "records": self.ctx.records(),
        }


# ---------------------------------------------------------------------------------------
# the scenario


def lifecycle(ctx: Ctx, rt: Runtime) -> None:
    res = ctx.results
    step = res.step
    R = rt.name

    pod = Pod(ctx, ctx.pod_quota)
    step(R, "pod", key=pod.key, dir=pod.dir, files=pod.files(),
         parents={d: cgroup_files(d) for d in (CGROUP_ROOT, f"{CGROUP_ROOT}/{KUBEPODS}")})

    # -- container A ---------------------------------------------------------------------
    a = Container(ctx, rt, "a", pod, "du")
    r = a.create()
    step(R, "create_a", id=a.id, cgroup=a.cgroup, run=r, **a.snapshot(), inside=a.inside_cpus_allowed(),
         runtime_state=rt.state(a.id), hook_state=a.captured_state("createRuntime"))
    if r["rc"] != 0:
        return

    # -- kubelet's rewrite ---------------------------------------------------------------
    r = rt.cmd("update", "--cpuset-cpus", ctx.exclusive, "--cpu-quota", str(ctx.quota), a.id)
    step(R, "update_a", update=r, **a.snapshot())

    before = (cgroup_files(a.cgroup), pod.files(), record_mtimes(ctx.state_dir))
    r = ctx.cli("reconcile", "--dry-run")
    step(R, "reconcile_dry_run", cli=r,
         unchanged=(cgroup_files(a.cgroup), pod.files(), record_mtimes(ctx.state_dir)) == before, **a.snapshot())
    step(R, "status_drift", cli=ctx.cli("status", "--json"))

    # -- reconcile -----------------------------------------------------------------------
    r = ctx.cli("reconcile")
    step(R, "reconcile", cli=r, **a.snapshot(), inside=a.inside_cpus_allowed())
    before = (cgroup_files(a.cgroup), pod.files(), record_mtimes(ctx.state_dir))
    r = ctx.cli("reconcile")
    step(R, "reconcile_again", cli=r,
         unchanged=(cgroup_files(a.cgroup), pod.files(), record_mtimes(ctx.state_dir)) == before)

    # -- delete A (poststop: release) ----------------------------------------------------
    k = rt.stop(a.id)
    d = rt.cmd("delete", a.id)
    step(R, "delete_a", kill=k, delete=d, runtime_state=rt.state(a.id),
         container_cgroup_exists=os.path.isdir(a.cgroup), pod=pod.files(), records=ctx.records(),
         hook_state=a.captured_state("poststop"))

    # -- container B in the same pod -----------------------------------------------------
    b = Container(ctx, rt, "b", pod, "du")
    r = b.create()
    step(R, "create_b", id=b.id, cgroup=b.cgroup, run=r, **b.snapshot(), inside=b.inside_cpus_allowed(),
         runtime_state=rt.state(b.id), hook_state=b.captured_state("createRuntime"))
    if r["rc"] == 0:
        k = rt.stop(b.id)
        d = rt.cmd("delete", b.id)
        step(R, "delete_b", kill=k, delete=d, runtime_state=rt.state(b.id),
             container_cgroup_exists=os.path.isdir(b.cgroup), pod=pod.files(), records=ctx.records(),
             hook_state=b.captured_state("poststop"))
    step(R, "pod_removed", left=rmdir_tree(pod.dir))

    # -- the shared CPUs not granted: effective narrower than requested ------------------
    parent_denies(ctx, rt)


def parent_denies(ctx: Ctx, rt: Runtime) -> None:
    """A sibling partition root of kubepods takes the shared CPUs out of every effective set.

    kubepods and the pod keep an empty cpuset.cpus (nothing for the hook to widen), so the
    kernel accepts the container's cpuset.cpus "exclusive + shared" while its
    cpuset.cpus.effective stays the exclusive CPUs: only the hook's v2 verification sees it.
    """
    R = rt.name
    part = f"{CGROUP_ROOT}/mch-partition-{R}"
    kube = f"{CGROUP_ROOT}/{KUBEPODS}"
    problems, left = [], []
    os.mkdir(part)
    try:
        write(f"{part}/cpuset.cpus", ctx.shared)
        write(f"{part}/cpuset.cpus.partition", "root")
        pod = Pod(ctx, ctx.pod_quota)
        setup = {"partition": read(f"{part}/cpuset.cpus.partition"), "partition_cpus": read(f"{part}/cpuset.cpus"),
                 "root_effective": read(f"{CGROUP_ROOT}/cpuset.cpus.effective"),
                 "kubepods": cgroup_files(kube), "pod_before": pod.files()}
        c = Container(ctx, rt, "denied", pod, "du")
        r = c.create()
        ctx.results.step(R, "parent_denies", id=c.id, cgroup=c.cgroup, run=r, hook_stderr=read(c.hook_stderr),
                         **setup, pod=pod.files(), pod_key=pod.key,
                         container_cgroup_exists=os.path.isdir(c.cgroup), runtime_state=rt.state(c.id),
                         records=ctx.records())
        problems = rt.cleanup()
        left = rmdir_tree(pod.dir)
    finally:
        write(f"{part}/cpuset.cpus.partition", "member")
        left_part = rmdir_tree(part)
    ctx.results.step(R, "parent_denies_cleanup", problems=problems, left=left + left_part,
                     root_effective=read(f"{CGROUP_ROOT}/cpuset.cpus.effective"),
                     kubepods_effective=read(f"{kube}/cpuset.cpus.effective"))


def environment(ctx: Ctx, runtimes) -> dict:
    mounts = [line.split() for line in (read("/proc/self/mounts") or "").splitlines()]
    return {
        "kernel": os.uname().release,
        "cgroup_mount": [m for m in mounts if len(m) > 2 and m[1] == CGROUP_ROOT],
        "online": read("/sys/devices/system/cpu/online"),
        "controllers": read(f"{CGROUP_ROOT}/cgroup.controllers"),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "versions": {rt.name: rt.version() for rt in runtimes},
    }


def setup(ctx: Ctx) -> dict:
    """Enable cpuset and cpu at every level above the pods, write the hook's configuration."""
    kube = f"{CGROUP_ROOT}/{KUBEPODS}"
    write(f"{CGROUP_ROOT}/cgroup.subtree_control", "+cpuset +cpu")
    os.makedirs(kube, exist_ok=True)
    write(f"{kube}/cgroup.subtree_control", "+cpuset +cpu")
    os.makedirs(os.path.dirname(ctx.config_path), exist_ok=True)
    with open(ctx.config_path, "w", encoding="utf-8") as f:
        f.write(ctx.inp["config_text"])
    root = cgroup_files(CGROUP_ROOT)
    root.pop("cgroup.procs")
    return {"root": root, "kubepods": cgroup_files(kube)}


def main(argv) -> int:
    inp_path, out_path = argv[1], argv[2]
    with open(inp_path, encoding="utf-8") as f:
        inp = json.load(f)
    results = Results(out_path)
    work = inp["work_dir"]
    os.makedirs(work, exist_ok=True)
    os.environ["MCH_VM_WORK"] = work
    ctx = Ctx(inp, results)
    runtimes = [Runtime(name) for name in inp["runtimes"]]
    try:
        results.doc["env"] = environment(ctx, runtimes)
        results.doc["setup"] = setup(ctx)
        results.save()
        for rt in runtimes:
            entry = results.runtime(rt.name)
            t0 = time.monotonic()
            try:
                lifecycle(ctx, rt)
            except Exception:
                entry["error"] = traceback.format_exc()
            finally:
                entry["cleanup_problems"] = rt.cleanup()
                entry["seconds"] = round(time.monotonic() - t0, 2)
                results.save()
        results.doc["done"] = True
    except Exception:
        results.doc["error"] = traceback.format_exc()
    results.save()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
