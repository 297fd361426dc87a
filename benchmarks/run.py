#!/usr/bin/env python3
"""Start-up cost of ``mixed-cpus-hook apply`` against the floor for any Python hook that reads JSON.

What runs (see benchmarks/README.md for how to read the output):

* a throwaway fresh venv of the *real* interpreter (``realpath(sys.executable)`` or
  ``--python``; never a pyenv shim), with the package copied into its site-packages and
  byte-compiled: a non-editable install shaped like the RPM's (no .pth finder);
* a launcher shaped like the RPM's ``/usr/bin/mixed-cpus-hook``: ``#!<python> -I`` then
  ``from mixed_cpus_hook.frontends.entry import entry; entry()``;
* a fake cgroup v1 node (``mixed_cpus_hook.testing.fakenode.FakeNode``) with a YAML config whose
  JSON cache is already warm, one asking container already applied (steady state: the hook
  reads everything and writes nothing) and one container of the same pod that does not ask
  (the pod's annotation names another container, so CRI-O's ``when`` still runs the hook);
* every command, the floor included, gets the OCI state on stdin from a file, stdout and
  stderr on /dev/null, and the same environment. Commands are interleaved in a shuffled
  order every round; wall time is measured around posix_spawn + wait4, CPU time (user+sys)
  from wait4's rusage.

Informational: it prints PASS/MISS against the targets and always exits 0 once it ran.
Python 3.9 compatible; it needs PyYAML in the interpreter that runs it (``make bench`` uses
the project venv) to fill the config cache, the way the first hook run on a node does.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_ROOT = os.path.join(REPO, "hook")
PACKAGE = "mixed_cpus_hook"

TARGETS = {"steady": 1.20, "not-asking": 1.15}  # issue 14 keeps apply at <= 1.2x the floor
FORBIDDEN = ("click", "yaml", "jsonschema", "psutil", "typing")
ASKING_ID = "a1" * 32
SIDECAR_ID = "5c" * 32
POD_UID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=os.path.realpath(sys.executable),
                   help="interpreter to measure (default: the real binary behind this one: %(default)s)")
    p.add_argument("--rounds", type=int, default=200, help="measured rounds, each runs every command once")
    p.add_argument("--warmup", type=int, default=10, help="rounds run first and discarded")
    p.add_argument("--importtime-runs", type=int, default=5, help="-X importtime runs per command (medians)")
    p.add_argument("--cgroup", type=int, choices=(1, 2), default=1, help="fake node's cgroup version")
    p.add_argument("--driver", choices=("cgroupfs", "systemd"), default="cgroupfs", help="fake node's cgroup driver")
    p.add_argument("--seed", type=int, default=1, help="seed for the round order and the bootstrap")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory and print its path")
    p.add_argument("--compare", action="append", default=[], metavar="NAME=DIR",
                   help="also time the hook from DIR (a directory holding a mixed_cpus_hook package, e.g. an"
                        " old checkout's hook/), interleaved with the rest; repeatable")
    args = p.parse_args(argv)
    args.compare = [f"{n}={os.path.abspath(d)}" for n, _, d in (spec.partition("=") for spec in args.compare)]
    return args


# --- set-up -----------------------------------------------------------------------------------


def make_install(python, tmp, source_root=SOURCE_ROOT, name="venv", bundle=True):
    """A fresh venv of ``python`` with the package copied into site-packages; returns (venv python, site dir).

    ``bundle``: also write the hook path's bundle, as ``make install`` and the image do (a
    source tree without ``ops/hookbundle.py``, an older checkout, gets none).
    """
    venv = os.path.join(tmp, name)
    subprocess.run([python, "-m", "venv", "--without-pip", venv], check=True)
    vpy = os.path.join(venv, "bin", "python")
    site = subprocess.run([vpy, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    dest = os.path.join(site, PACKAGE)
    shutil.copytree(os.path.join(source_root, PACKAGE), dest, ignore=shutil.ignore_patterns("__pycache__"))
    # The RPM ships byte-compiled modules; so does this install.
    subprocess.run([vpy, "-I", "-m", "compileall", "-q", dest], check=True)
    if bundle and os.path.exists(os.path.join(dest, "ops", "hookbundle.py")):
        subprocess.run([vpy, "-I", "-m", f"{PACKAGE}.ops.hookbundle", dest], check=True, stdout=subprocess.DEVNULL)
    return vpy, site


def write_launcher(vpy, tmp, name="mixed-cpus-hook"):
    path = os.path.join(tmp, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"#!{vpy} -I\nfrom mixed_cpus_hook.frontends.entry import entry\nentry()\n")
    os.chmod(path, 0o755)
    return path


def make_node(tmp, version, driver):
    """The fake node, its config (cache warmed) and the two state files."""
    sys.path.insert(0, SOURCE_ROOT)
    from mixed_cpus_hook.node.config import load_config  # noqa: PLC0415 - needs sys.path above
    from mixed_cpus_hook.testing.fakenode import FakeNode  # noqa: PLC0415

    node = FakeNode(os.path.join(tmp, "node"), version=version, online="0-7")
    config = node.write_config(shared="0-1")
    asking = node.add_container(ASKING_ID, name="app", pod_uid=POD_UID, cpus="2-3", quota=200000,
                                pod_quota=400000, pid=4242, driver=driver)
    sidecar = node.add_container(SIDECAR_ID, name="sidecar", pod_uid=POD_UID, cpus="4-5", quota=200000,
                                 pod_quota=400000, ask=None, pid=4243, driver=driver)
    if version == 2:
        # The fake kernel computes nothing: let the effective set follow what is written, as
        # a parent that grants the shared CPUs would.
        eff = os.path.join(node.cgroup_root, asking["rel"], "cpuset.cpus.effective")
        os.unlink(eff)
        os.symlink("cpuset.cpus", eff)
    # CRI-O copies the pod's annotations into every container: the sidecar carries the
    # request for "app", which matches hooks.d's "when", so the hook runs and must bow out.
    for path in (sidecar["state"], os.path.join(sidecar["bundle"], "config.json")):
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        doc["annotations"]["mixed-cpus.openshift.io/app"] = "enable"
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    # A live process: the hook finds the container through /proc/<pid>/cgroup, as on a node.
    for pid, info in ((4242, asking), (4243, sidecar)):
        os.makedirs(os.path.join(node.proc_root, str(pid)))
        with open(os.path.join(node.proc_root, str(pid), "cgroup"), "w", encoding="ascii") as f:
            if version == 1:
                f.write(f"12:cpuset:/{info['rel']}\n11:cpu,cpuacct:/{info['rel']}\n1:name=systemd:/{info['rel']}\n")
            else:
                f.write(f"0::/{info['rel']}\n")
    cache_dir = os.path.join(tmp, "config-cache")
    load_config(config, cache_dir=cache_dir)  # the YAML parse happens here, once, as on a node
    return node, config, cache_dir, asking, sidecar


# --- running ----------------------------------------------------------------------------------


def run_once(argv, stdin_path, env):
    """Wall seconds, child user+sys seconds and exit status of one run."""
    actions = [(os.POSIX_SPAWN_OPEN, 0, stdin_path, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
               (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)]
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    return wall, usage.ru_utime + usage.ru_stime, status


def run_captured(argv, stdin_path, env, extra=()):
    with open(stdin_path, "rb") as f:
        return subprocess.run([argv[0], *extra, *argv[1:]], stdin=f, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True)


def check(name, argv, stdin_path, env, want_output=False):
    res = run_captured(argv, stdin_path, env)
    if res.returncode != 0 or (not want_output and (res.stdout or res.stderr)):
        sys.exit(f"benchmark set-up: {name} exited {res.returncode}\nstdout: {res.stdout}\nstderr: {res.stderr}")
    return res.stdout


def measure(commands, rounds, warmup, seed):
    rng = random.Random(seed)
    names = list(commands)
    samples = {n: {"wall": [], "cpu": []} for n in names}
    gc.disable()
    try:
        for i in range(warmup + rounds):
            order = names[:]
            rng.shuffle(order)
            for n in order:
                argv, stdin_path, env = commands[n]
                wall, cpu, status = run_once(argv, stdin_path, env)
                if status != 0:
                    sys.exit(f"benchmark: {n} failed with wait status {status}")
                if i >= warmup:
                    samples[n]["wall"].append(wall)
                    samples[n]["cpu"].append(cpu)
    finally:
        gc.enable()
    return samples


# --- statistics -------------------------------------------------------------------------------


def p90(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def ratio_ci(num, den, rng, n=1000):
    """95% bootstrap interval of median(num) / median(den)."""
    ratios = []
    k, m = len(num), len(den)
    for _ in range(n):
        a = statistics.median([num[rng.randrange(k)] for _ in range(k)])
        b = statistics.median([den[rng.randrange(m)] for _ in range(m)])
        ratios.append(a / b)
    ratios.sort()
    return ratios[int(0.025 * n)], ratios[int(0.975 * n) - 1]


# --- -X importtime ----------------------------------------------------------------------------


def importtime(argv, stdin_path, env, runs):
    """Module -> (median self us, median cumulative us) over ``runs`` runs with -X importtime."""
    seen = {}
    for _ in range(runs):
        res = run_captured(argv, stdin_path, env, extra=("-X", "importtime"))
        for line in res.stderr.splitlines():
            if not line.startswith("import time:") or "imported package" in line:
                continue
            _, self_us, cum_us, name = (part.strip() for part in line.replace("import time:", "|", 1).split("|"))
            entry = seen.setdefault(name, ([], []))
            entry[0].append(int(self_us))
            entry[1].append(int(cum_us))
    return {name: (statistics.median(s), statistics.median(c)) for name, (s, c) in seen.items()}


def print_imports(label, hook, floor):
    extra = {name: t for name, t in hook.items() if name not in floor}
    own = sorted(n for n in extra if n == PACKAGE or n.startswith(PACKAGE + "."))
    stdlib = sorted((n for n in extra if n not in own), key=lambda n: -extra[n][0])
    total = sum(t[0] for t in extra.values())
    print(f"\n{label}: {len(extra)} modules beyond the floor's, {total / 1000:.1f} ms self time under -X importtime")
    print(f"  {'self ms':>8} {'cum ms':>8}  module")
    for name in sorted(extra, key=lambda n: -extra[n][0]):
        self_us, cum_us = extra[name]
        print(f"  {self_us / 1000:8.2f} {cum_us / 1000:8.2f}  {name}")
    print(f"  stdlib beyond the floor: {', '.join(stdlib) or 'none'}")
    bad = [m for m in FORBIDDEN if m in hook]
    print(f"  forbidden on the hook path ({', '.join(FORBIDDEN)}): {', '.join(bad) if bad else 'none imported'}")


# --- main -------------------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    python = os.path.realpath(args.python)
    tmp = tempfile.mkdtemp(prefix="mixed-cpus-hook-bench-")
    cwd = os.getcwd()
    try:
        return bench(args, python, tmp)
    finally:
        os.chdir(cwd)
        if args.keep:
            print(f"\n(kept {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def bench(args, python, tmp):
    try:
        import yaml  # noqa: F401, PLC0415 - only to fail early with a clear message
    except ImportError:
        sys.exit("benchmarks/run.py needs PyYAML to fill the config cache: run it with the project venv (make bench)")
    vpy, site = make_install(python, tmp)
    launcher = write_launcher(vpy, tmp)
    node, config, cache_dir, asking, sidecar = make_node(tmp, args.cgroup, args.driver)
    os.chdir(tmp)  # the children's working directory (-I keeps it off sys.path anyway)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "MIXED_CPUS_HOOK_CACHE_DIR": cache_dir}
    hook = [vpy, "-I", launcher, "--config", config, "apply"]
    commands = {
        "bare": ([vpy, "-I", "-c", "pass"], asking["state"], env),
        "floor": ([vpy, "-I", "-c", "import json"], asking["state"], env),
        "floor+_exit": ([vpy, "-I", "-c", "import json, os; os._exit(0)"], asking["state"], env),
        "steady": (hook, asking["state"], env),
        "not-asking": (hook, sidecar["state"], env),
    }

    # First apply writes the cgroups and the records; from then on the asking container is in sync.
    first = check("first apply", hook, asking["state"], env, want_output=True)
    record = os.path.join(node.state_dir, "containers", ASKING_ID + ".json")
    before = os.stat(record).st_mtime_ns
    check("steady apply", hook, asking["state"], env)
    check("not-asking apply", hook, sidecar["state"], env)
    # The same install without the hook path's bundle: what the bundle saves, in this run.
    plain_py, _ = make_install(python, tmp, name="venv-no-bundle", bundle=False)
    plain = [plain_py, "-I", write_launcher(plain_py, tmp, "mixed-cpus-hook-no-bundle"), "--config", config, "apply"]
    commands["steady/no-bundle"] = (plain, asking["state"], env)
    check("steady apply without the bundle", plain, asking["state"], env)
    if os.stat(record).st_mtime_ns != before:
        sys.exit("benchmark set-up: the steady-state apply rewrote the record")
    if os.path.exists(os.path.join(node.state_dir, "containers", SIDECAR_ID + ".json")):
        sys.exit("benchmark set-up: the not-asking container got a record")
    for spec in args.compare:
        name, _, source_root = spec.partition("=")
        if not name or not os.path.isdir(os.path.join(source_root, PACKAGE)):
            sys.exit(f"--compare {spec!r}: want NAME=DIR with DIR/{PACKAGE}/")
        other_py, _ = make_install(python, tmp, source_root, name=f"venv-{name}")
        other = [other_py, "-I", write_launcher(other_py, tmp, f"mixed-cpus-hook-{name}"), "--config", config, "apply"]
        commands[f"steady@{name}"] = (other, asking["state"], env)
        commands[f"not-asking@{name}"] = (other, sidecar["state"], env)
        check(f"steady apply from {source_root}", other, asking["state"], env)
        check(f"not-asking apply from {source_root}", other, sidecar["state"], env)
    if os.stat(record).st_mtime_ns != before:
        sys.exit("benchmark set-up: a steady-state apply rewrote the record")

    version = subprocess.run([vpy, "-I", "-c", "import sys; print(sys.version.split()[0])"], check=True,
                             stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    print("mixed-cpus-hook start-up benchmark")
    print(f"  interpreter : {python} (Python {version}), run as a fresh venv {vpy} (no other packages)")
    print(f"  install     : {PACKAGE} copied from hook/ into {site}, byte-compiled and bundled (make install's shape)")
    print(f"  launcher    : #!{vpy} -I / from mixed_cpus_hook.frontends.entry import entry / entry()")
    print("  hook        : python -I LAUNCHER --config CONFIG apply < STATE  (YAML config, warm JSON cache)")
    print(f"  node        : fake cgroup v{args.cgroup}, {args.driver} driver, container found via /proc/<pid>/cgroup")
    print(f"  first apply : {len(first.splitlines())} write(s); later runs write nothing (checked):")
    for line in first.splitlines():
        print(f"                {line.split(': ', 1)[-1].replace(node.cgroup_root + '/', '')}")
    print(f"  machine     : {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, {platform.platform()}")
    print(f"  rounds      : {args.rounds} measured (+{args.warmup} warm-up), commands shuffled in every round")
    print("  commands    :")
    print("    bare        python -I -c pass")
    print("    floor       python -I -c 'import json'")
    print("    floor+_exit python -I -c 'import json, os; os._exit(0)': the floor without the interpreter's")
    print("                teardown, which the hook skips too (entry._exit_now); reference only")
    print("    steady      hook apply, asking container already applied (reads all, writes nothing)")
    print("    not-asking  hook apply, same pod, another container's annotation (exits before the config)")
    print("    steady/no-bundle  steady, from an install without the hook path's bundle (reference: what")
    print("                the bundle saves; an install from pip or a source tree has none)")
    for spec in args.compare:
        print(f"    *@{spec.partition('=')[0]:<9} the same, hook from {spec.partition('=')[2]}")

    t0 = time.time()
    samples = measure(commands, args.rounds, args.warmup, args.seed)
    elapsed = time.time() - t0

    rng = random.Random(args.seed)
    med = {n: statistics.median(s["wall"]) for n, s in samples.items()}
    cpu = {n: statistics.median(s["cpu"]) for n, s in samples.items()}
    w = max(len(n) for n in commands)
    print(f"\nResults ({elapsed:.0f} s; milliseconds; wall = spawn to reap, cpu = child user+sys)")
    print(f"  {'command':<{w}} {'wall med':>9} {'wall p90':>9} {'cpu med':>8} {'wall/floor':>10} {'95% CI':>13}"
          f" {'cpu/floor':>9}")
    for n in commands:
        lo, hi = ratio_ci(samples[n]["wall"], samples["floor"]["wall"], rng)
        print(f"  {n:<{w}} {med[n] * 1e3:9.1f} {p90(samples[n]['wall']) * 1e3:9.1f} {cpu[n] * 1e3:8.1f}"
              f" {med[n] / med['floor']:10.2f} {f'{lo:.2f}-{hi:.2f}':>13} {cpu[n] / cpu['floor']:9.2f}")

    print("\nRatios (median wall time against the floor, python -I -c 'import json')")
    print(f"  floor / bare (python -I -c pass): {med['floor'] / med['bare']:.2f}  (reference, no target)")
    print(f"  like for like, both without teardown: steady / floor+_exit {med['steady'] / med['floor+_exit']:.2f},"
          f" not-asking / floor+_exit {med['not-asking'] / med['floor+_exit']:.2f}  (reference, no target)")
    for n in commands:
        target = TARGETS.get(n.partition("@")[0])
        if target is None:
            continue
        ratio = med[n] / med["floor"]
        lo, hi = ratio_ci(samples[n]["wall"], samples["floor"]["wall"], rng)
        verdict = "PASS" if ratio <= target else "MISS"
        if lo <= target < hi:
            verdict += " (within noise)"
        print(f"  {n:<{w}} {ratio:.2f}  target <= {target:.2f}  {verdict}"
              f"   [cpu ratio {cpu[n] / cpu['floor']:.2f}]")

    print("\nImports under -X importtime (medians over "
          f"{args.importtime_runs} runs; self time, inflated by -X importtime itself)")
    floor_imports = importtime(commands["floor"][0], asking["state"], env, args.importtime_runs)
    print_imports("steady", importtime(hook, asking["state"], env, args.importtime_runs), floor_imports)
    print_imports("not-asking", importtime(hook, sidecar["state"], env, args.importtime_runs), floor_imports)
    return 0


if __name__ == "__main__":
    sys.exit(main())
