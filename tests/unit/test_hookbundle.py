"""The hook path's bundle: what it holds, that the hook runs from it, and that it never serves stale code.

An installed copy of the package (copied into a temporary site directory, byte-compiled,
the bundle written by ``python -m mixed_cpus_hook.ops.hookbundle`` as ``make install`` does)
runs the hook's fast path in a fresh ``python -I -S`` against a fake node; the probe reports
every package module it loaded and which loader loaded it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from mixed_cpus_hook.ops import hookbundle

SOURCE_PACKAGE = Path(__file__).resolve().parents[2] / "hook" / "mixed_cpus_hook"

PROBE = """
import json, os, sys
sys.path.insert(0, os.environ["PROBE_SITE"])
from mixed_cpus_hook.frontends import entry
code = entry.main(sys.argv[1:])
def loader_name(loader):
    return loader.__name__ if isinstance(loader, type) else type(loader).__name__
mods = {n: loader_name(m.__spec__.loader) for n, m in sys.modules.items()
        if n.startswith("mixed_cpus_hook") and getattr(m, "__spec__", None) is not None}
with open(os.environ["PROBE_OUT"], "w") as f:
    json.dump({"code": code, "modules": mods, "__future__": "__future__" in sys.modules,
               "annotation": repr(sys.modules["mixed_cpus_hook.core.cpuset"].parse_cpulist.__annotations__["text"])}, f)
"""


def install(site: Path, bundle: bool = True) -> Path:
    """The package copied into ``site``, byte-compiled and (``bundle``) bundled; its directory."""
    pkg = site / "mixed_cpus_hook"
    shutil.copytree(SOURCE_PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-I", "-m", "compileall", "-q", str(pkg)], check=True)
    if bundle:
        proc = subprocess.run([sys.executable, "-I", "-c",
                               "import sys; sys.path.insert(0, sys.argv[1]);"
                               " from mixed_cpus_hook.ops.hookbundle import main; sys.exit(main(sys.argv[2:]))",
                               str(site), str(pkg)], capture_output=True, text=True, check=True)
        assert "wrote" in proc.stdout
    return pkg


def probe(site: Path, tmp: Path, argv: List[str], state_file: str) -> Dict[str, Any]:
    out = tmp / "probe.json"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PROBE_SITE": str(site), "PROBE_OUT": str(out),
           "MIXED_CPUS_HOOK_CACHE_DIR": os.environ["MIXED_CPUS_HOOK_CACHE_DIR"]}
    with open(state_file, "rb") as stdin:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE, *argv], stdin=stdin, env=env,
                              capture_output=True, text=True, timeout=60)
    assert out.exists(), f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    result: Dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    result.update(stdout=proc.stdout, stderr=proc.stderr)
    return result


def run_scenarios(site: Path, tmp: Path, hook_pod: Dict[str, Any]) -> List[Dict[str, Any]]:
    """First apply, steady apply, not asking, a refused state, release: every hook outcome."""
    node, config = hook_pod["node"], hook_pod["node"].config_path
    bad_state = tmp / "bad-state.json"
    bad_state.write_text('{"ociVersion": "1.0.2", "id": "../etc"}', encoding="utf-8")
    runs = [probe(site, tmp, ["--config", config, "apply"], hook_pod["app"]["state"]),
            probe(site, tmp, ["--config", config, "apply"], hook_pod["app"]["state"]),
            probe(site, tmp, ["--config", config, "apply"], hook_pod["sidecar"]["state"]),
            probe(site, tmp, ["--config", config, "apply"], str(bad_state)),
            probe(site, tmp, ["--config", config, "release"], hook_pod["app"]["state"])]
    assert runs[0]["code"] == 0 and runs[0]["stdout"], runs[0]["stderr"]
    assert runs[1]["code"] == 0 and runs[1]["stdout"] == "", runs[1]["stderr"]
    assert runs[3]["code"] != 0 and "../etc" in runs[3]["stderr"]
    assert runs[4]["code"] == 0 and node.records("containers") == {}
    return runs


def test_the_list_is_what_the_hook_path_imports(hook_pod: Dict[str, Any], fast_tmp: Path) -> None:
    """Every module a hook run loads is in the bundle, and nothing in the bundle goes unused."""
    site = fast_tmp / "site"
    install(site)
    loaded = set()
    for run in run_scenarios(site, fast_tmp, hook_pod):
        loaded |= set(run["modules"])
        outside = sorted(n for n, loader in run["modules"].items()
                         if n != "mixed_cpus_hook" and loader != "BundleFinder")
        assert outside == [], f"loaded without the bundle: {outside}"
        # ``from __future__ import annotations`` became a compiler flag: the same string
        # annotations, and the standard library's __future__ module is not loaded.
        assert run["annotation"] == "'str'" and run["__future__"] is False
    assert sorted(set(hookbundle.HOOK_PATH_MODULES) - loaded) == []


def test_steady_apply_same_with_and_without_bundle(hook_pod: Dict[str, Any], fast_tmp: Path) -> None:
    plain = run_scenarios(install(fast_tmp / "plain", bundle=False).parent, fast_tmp, hook_pod)
    assert all(loader != "BundleFinder" for run in plain for loader in run["modules"].values())


def test_an_edited_source_is_loaded_from_itself(hook_pod: Dict[str, Any], fast_tmp: Path) -> None:
    """A source changed after the bundle was written (size or time) is imported the ordinary way."""
    site = fast_tmp / "site"
    pkg = install(site)
    edited = pkg / "core" / "quota.py"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nEDITED_ON_THE_NODE = True\n", encoding="utf-8")
    touched = pkg / "core" / "plan.py"
    st = touched.stat()
    os.utime(touched, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # same size, newer time
    gone = pkg / "node" / "kubelet.py"
    run = probe(site, fast_tmp, ["--config", hook_pod["node"].config_path, "apply"], hook_pod["app"]["state"])
    assert run["code"] == 0, run["stderr"]
    assert run["modules"]["mixed_cpus_hook.core.quota"] == "SourceFileLoader"
    assert run["modules"]["mixed_cpus_hook.core.plan"] == "SourceFileLoader"
    assert run["modules"]["mixed_cpus_hook.core.desired"] == "BundleFinder"
    assert "EDITED_ON_THE_NODE" in subprocess.run(
        [sys.executable, "-I", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
         " import mixed_cpus_hook.core.quota as q; print(dir(q))", str(site)],
        capture_output=True, text=True, check=True).stdout
    assert hookbundle.read_bundle_status(str(pkg)) == ("stale", ["mixed_cpus_hook.core.plan",
                                                                 "mixed_cpus_hook.core.quota"])
    gone.unlink()  # a module removed from the node is not served from the bundle either
    result = subprocess.run([sys.executable, "-I", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
                             " import mixed_cpus_hook.node.kubelet", str(site)], capture_output=True, text=True)
    assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr


@pytest.mark.parametrize("damage, state", [
    ("other-magic", "other-python"),
    ("truncated", "unreadable"),
    ("not-marshal", "unreadable"),
    ("other-format", "unreadable"),
    ("absent", "absent"),
], ids=lambda v: str(v))
def test_a_bundle_it_cannot_use_is_ignored(hook_pod: Dict[str, Any], fast_tmp: Path, damage: str, state: str) -> None:
    import marshal

    site = fast_tmp / "site"
    pkg = install(site)
    path = pkg / "__pycache__" / hookbundle.format_bundle_name()
    data = path.read_bytes()
    if damage == "other-magic":
        path.write_bytes(b"\x00\x00\r\n" + data[4:])
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "not-marshal":
        path.write_bytes(data[:4] + b"\xff" * 64)
    elif damage == "other-format":
        path.write_bytes(data[:4] + marshal.dumps((99, {})))
    else:
        path.unlink()
    assert hookbundle.read_bundle_status(str(pkg)) == (state, [])
    run = probe(site, fast_tmp, ["--config", hook_pod["node"].config_path, "apply"], hook_pod["app"]["state"])
    assert run["code"] == 0 and run["stdout"], run["stderr"]
    assert "BundleFinder" not in run["modules"].values()


def test_status_of_a_current_bundle_and_tracebacks_name_the_installed_files(fast_tmp: Path) -> None:
    site = fast_tmp / "site"
    pkg = install(site, bundle=False)
    hookbundle.write_bundle(str(pkg), ddir="/usr/lib/python3.9/site-packages/mixed_cpus_hook")
    assert hookbundle.read_bundle_status(str(pkg)) == ("current", [])
    out = subprocess.run([sys.executable, "-I", "-S", "-c",
                          "import sys; sys.path.insert(0, sys.argv[1]);"
                          " import mixed_cpus_hook.core.cpuset as c; print(c.parse_cpulist.__code__.co_filename);"
                          " print(c.__file__)", str(site)], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["/usr/lib/python3.9/site-packages/mixed_cpus_hook/core/cpuset.py", str(pkg / "core" / "cpuset.py")]


def test_a_bundled_module_runs_with_python_m(fast_tmp: Path) -> None:
    """runpy (``python -m``) asks the loader for the code: the finder gives it (and is_package)."""
    site = fast_tmp / "site"
    install(site)
    out = subprocess.run([sys.executable, "-I", "-S", "-c",
                          "import sys; sys.path.insert(0, sys.argv[1]); import importlib.util, runpy;"
                          " spec = importlib.util.find_spec('mixed_cpus_hook.core.cpuset');"
                          " print(spec.loader.__name__, spec.loader.is_package(spec.name),"
                          " spec.loader.is_package('mixed_cpus_hook.core'));"
                          " g = runpy.run_module('mixed_cpus_hook.core.cpuset', run_name='not_main');"
                          " print(g['format_cpulist'](frozenset({0, 1, 2, 5})))", str(site)],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["BundleFinder", "False", "True", "0-2,5"]


def test_write_refuses_a_module_it_cannot_find(fast_tmp: Path) -> None:
    pkg = install(fast_tmp / "site", bundle=False)
    with pytest.raises(hookbundle.BundleError, match="mixed_cpus_hook.core.nothing: no source under"):
        hookbundle.write_bundle(str(pkg), modules=("mixed_cpus_hook.core.nothing",))
    assert not (pkg / "__pycache__" / hookbundle.format_bundle_name()).exists()


@pytest.mark.parametrize("state, status, words", [
    ("current", "ok", "modules load from"),
    ("absent", "ok", "no bundle at"),
    ("stale", "warning", "1 module(s) changed since"),
    ("other-python", "warning", "written by another Python version"),
    ("unreadable", "warning", "unreadable or damaged"),
], ids=lambda v: str(v))
def test_check_reports_the_bundle(fast_tmp: Path, monkeypatch: pytest.MonkeyPatch, state: str, status: str,
                                  words: str) -> None:
    """``mixed-cpus-hook check`` (hook mode) says whether container starts load the hook from its bundle."""
    from mixed_cpus_hook.ops import doctor

    pkg = install(fast_tmp / "site", bundle=state != "absent")
    path = pkg / "__pycache__" / hookbundle.format_bundle_name()
    if state == "stale":
        with open(pkg / "core" / "quota.py", "a", encoding="utf-8") as f:
            f.write("\n")
    elif state == "other-python":
        path.write_bytes(b"\x00\x00\r\n" + path.read_bytes()[4:])
    elif state == "unreadable":
        path.write_bytes(path.read_bytes()[:100])
    facts = {"hook_bundle": doctor.read_hook_bundle_facts(str(pkg))}
    monkeypatch.setattr(doctor, "compute_mode", lambda f: "hook")
    (finding,) = doctor._hook_bundle_findings(facts)
    assert (finding.check, finding.status) == ("hook-bundle", status)
    assert words in finding.message and str(path) in finding.message
    assert bool(finding.fix) == (status == "warning")
    monkeypatch.setattr(doctor, "compute_mode", lambda f: "nri")
    assert doctor._hook_bundle_findings(facts) == []
