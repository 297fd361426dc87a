"""Shared fixtures: fake nodes, in-process and subprocess runs of the hook, captured logs.

Roots are always passed in (a fake node's cgroup_root, sys_root, proc_root and state_dir
go into its config file); nothing here patches the package's globals for roots.
"""

from __future__ import annotations

import inspect
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

import pytest

from mixed_cpus_hook.node.log import Reporter
from mixed_cpus_hook.testing.fakenode import FakeNode, container_rel

REPO = Path(__file__).resolve().parents[1]
SCHEMA_DIR = REPO / "schemas"
SHM = os.environ.get("MCH_TESTS_SHM", "/dev/shm")  # benchmarks/nri_reference.py --busy: its own
# A fixed, old mtime: after freeze(), any write (even of the same value) shows up.
FROZEN_NS = 1_000_000_000 * 10**9


class Result(NamedTuple):
    """What one run of the hook did: exit code, stdout, stderr and the syslog lines."""

    code: int
    out: str
    err: str
    syslog: List[Tuple[int, str]]

    @property
    def err_lines(self) -> List[str]:
        return self.err.splitlines()


class SyslogCapture:
    """A ``Reporter`` sink that keeps (priority, message) pairs instead of calling syslog."""

    def __init__(self) -> None:
        self.messages: List[Tuple[int, str]] = []

    def __call__(self, priority: int, message: str) -> None:
        self.messages.append((priority, message))


class CapturedReporter(NamedTuple):
    reporter: Reporter
    stream: io.StringIO
    sink: SyslogCapture


def make_reporter(verbose: bool = False) -> CapturedReporter:
    stream, sink = io.StringIO(), SyslogCapture()
    return CapturedReporter(Reporter(stream=stream, sink=sink, verbose=verbose), stream, sink)


Snapshot = Dict[str, Tuple[bytes, int]]


class Node(FakeNode):
    """A FakeNode with a config file and the helpers tests need.

    On cgroup v2 the fake kernel does not compute ``cpuset.cpus.effective``; for containers
    added with ``grant=True`` it is a symlink to ``cpuset.cpus`` so that the parent grants
    whatever is asked (``grant=False`` keeps it static: the parent grants nothing new).
    """

    def __init__(self, root: str, version: int = 1, online: str = "0-3", shared: str = "0-1",
                 config: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(root, version=version, online=online)
        self.shared = shared
        self.config_path = self.write_config(shared, config)
        self.shared_file = os.path.join(self.etc, "shared-cpus")

    def configure(self, shared: Optional[str] = None, **extra: Any) -> str:
        """Rewrite the config file (roots always point at this node) with extra settings.

        The shared-CPU file is rewritten only when ``shared`` is given.
        """
        if shared is not None:
            self.shared = shared
            self.config_path = self.write_config(shared, extra)
            return self.config_path
        doc: Dict[str, Any] = {"shared_cpus_file": self.shared_file, "cgroup_root": self.cgroup_root,
                               "state_dir": self.state_dir, "proc_root": self.proc_root, "sys_root": self.sys_root,
                               "kubelet_state_file": self.kubelet_state, "cdi_spec_dirs": list(self.cdi_dirs),
                               "allowed_namespaces": ["ran"]}
        doc.update(extra)
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write("".join(f"{k}: {json.dumps(v)}\n" for k, v in doc.items()))
        return self.config_path

    # -- containers -------------------------------------------------------------------
    def add_container(self, cid: str, grant: bool = True, **kwargs: Any) -> Dict[str, str]:
        """FakeNode.add_container, except that an existing pod cgroup keeps its quota.

        (FakeNode sets the pod's quota on every call; a second container must not undo
        what the hook wrote for the first.)
        """
        defaults = inspect.signature(FakeNode.add_container).parameters
        opt = {k: kwargs.get(k, defaults[k].default) for k in ("driver", "pod_uid", "qos")}
        pod_rel = os.path.dirname(container_rel(opt["driver"], opt["pod_uid"], cid, opt["qos"]))
        names = ["cpu.cfs_quota_us", "cpu.cfs_period_us"] if self.version == 1 else ["cpu.max"]
        kept = {n: self.read(pod_rel, n) for n in names} if os.path.exists(self.path(pod_rel, names[0])) else {}
        paths = super().add_container(cid, **kwargs)
        for name, value in kept.items():
            self.write(pod_rel, name, value)
        if self.version == 2 and grant:
            self.grant_effective(paths["rel"])
        pid = kwargs.get("pid", 0)
        if pid:
            self.set_proc(pid, paths["rel"] + ("/container" if kwargs.get("crun_subgroup") else ""))
        return paths

    def grant_effective(self, rel: str) -> None:
        eff = os.path.join(self.cgroup_root, rel, "cpuset.cpus.effective")
        os.unlink(eff)
        os.symlink("cpuset.cpus", eff)

    def set_proc(self, pid: int, rel: str) -> str:
        """Write <proc_root>/<pid>/cgroup placing the process in cgroup ``rel``."""
        rel = "/" + rel.strip("/")
        if self.version == 1:
            text = f"12:cpuset:{rel}\n5:cpu,cpuacct:{rel}\n3:memory:{rel}\n1:name=systemd:{rel}\n0::/\n"
        else:
            text = f"0::{rel}\n"
        path = os.path.join(self.proc_root, str(pid), "cgroup")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="ascii") as f:
            f.write(text)
        return path

    def quota_name(self) -> str:
        return "cpu.cfs_quota_us" if self.version == 1 else "cpu.max"

    def quota(self, rel: str) -> str:
        """The quota as the plain number (or "max"/"-1"), whatever the version."""
        return self.read(rel, self.quota_name()).split()[0]

    # -- state and spec ---------------------------------------------------------------
    @staticmethod
    def load_json(path: str) -> Dict[str, Any]:
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    @staticmethod
    def save_json(path: str, doc: Any) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)

    def edit_spec(self, paths: Dict[str, str], edit: Callable[[Dict[str, Any]], None]) -> None:
        spec_path = os.path.join(paths["bundle"], "config.json")
        spec = self.load_json(spec_path)
        edit(spec)
        self.save_json(spec_path, spec)

    # -- records ----------------------------------------------------------------------
    def records(self, kind: str) -> Dict[str, Dict[str, Any]]:
        """Every record of one kind ("containers" or "pods"), by name."""
        folder = os.path.join(self.state_dir, kind)
        if not os.path.isdir(folder):
            return {}
        return {name[:-5]: self.load_json(os.path.join(folder, name))
                for name in sorted(os.listdir(folder)) if name.endswith(".json") and not name.startswith(".")}

    def state_files(self) -> List[str]:
        """Every file in the state directory except the lock, relative to it."""
        out = []
        for dirpath, _dirs, files in os.walk(self.state_dir):
            for name in files:
                rel = os.path.relpath(os.path.join(dirpath, name), self.state_dir)
                if rel != "lock":
                    out.append(rel)
        return sorted(out)

    # -- "nothing was written" ---------------------------------------------------------
    def _files(self) -> Iterator[str]:
        """Regular files under the cgroup root and the state directory (the lock is no record)."""
        lock = os.path.join(self.state_dir, "lock")
        for top in (self.cgroup_root, self.state_dir):
            for dirpath, _dirs, files in os.walk(top):
                for name in files:
                    path = os.path.join(dirpath, name)
                    if path != lock and not os.path.islink(path):
                        yield path

    def freeze(self) -> Snapshot:
        """Set every cgroup and state file's mtime far in the past and snapshot them."""
        for path in self._files():
            os.utime(path, ns=(FROZEN_NS, FROZEN_NS))
        return self.snapshot()

    def snapshot(self) -> Snapshot:
        snap: Snapshot = {}
        for path in self._files():
            with open(path, "rb") as f:
                snap[path] = (f.read(), os.stat(path).st_mtime_ns)
        return snap

    def changes(self, before: Snapshot, mtimes: bool = True) -> List[str]:
        """Files created, removed, or changed since ``before``.

        ``mtimes=True``: any write counts, even of the same bytes ("nothing was written").
        ``mtimes=False``: only a different value counts, compared as a kernel prints it
        (surrounding whitespace ignored) -- "everything was restored" after a rollback.
        """
        after = self.snapshot()
        changed = []
        for path in sorted(set(before) | set(after)):
            if path not in before or path not in after:
                changed.append(path)
            elif mtimes and before[path] != after[path]:
                changed.append(path)
            elif before[path][0].strip() != after[path][0].strip():
                changed.append(path)
        return changed


@pytest.fixture(scope="session")
def _session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("config-cache"))


@pytest.fixture(autouse=True)
def config_cache_dir(_session_cache_dir: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The config cache for tests, so nothing touches /run; and no stray config path.

    One directory for the session is safe: entries are per config path (every test's own
    tmp_path) and keyed by the file's identity. Tests about the cache pass their own.
    """
    monkeypatch.setenv("MIXED_CPUS_HOOK_CACHE_DIR", _session_cache_dir)
    monkeypatch.delenv("MIXED_CPUS_HOOK_CONFIG", raising=False)
    return _session_cache_dir


@pytest.fixture(autouse=True)
def remembered_records_parse_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record a save remembers (store.records: the next load of those bytes returns it
    without parsing them) must be exactly what parsing those bytes gives: checked on every save
    of every test, in this process."""
    from mixed_cpus_hook.store import records

    remember = records._remember

    def checked(path: str, data: bytes, rec: Any, key: Any = None) -> Any:
        kind = os.path.basename(os.path.dirname(path))
        name = os.path.basename(path)[:-len(".json")]
        doc = records.parse_document(data, path)
        parsed = (records.parse_container_record(doc, name, path) if kind == "containers"
                  else records.parse_pod_record(doc, name, path))
        assert parsed == rec, f"{path}: saved {rec}, parses back as {parsed}"
        return remember(path, data, rec, key)

    monkeypatch.setattr(records, "_remember", checked)


@pytest.fixture(scope="session")
def _fast_tmp_root() -> Iterator[Optional[str]]:
    """A session directory on tmpfs, when there is one with room to spare.

    Fake nodes are many small files; on a busy disk creating and removing them took most of
    the unit suite's time. Removed at the end of the session.
    """
    root = None
    try:
        st = os.statvfs(SHM)
        if os.path.isdir(SHM) and st.f_bavail * st.f_frsize >= 256 << 20:
            root = os.path.realpath(tempfile.mkdtemp(prefix="mixed-cpus-hook-tests-", dir=SHM))
    except OSError:
        root = None
    yield root
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fast_tmp(_fast_tmp_root: Optional[str], tmp_path: Path) -> Iterator[Path]:
    """A per-test directory on tmpfs (removed after the test), else ``tmp_path``."""
    if _fast_tmp_root is None:
        yield tmp_path
        return
    path = tempfile.mkdtemp(dir=_fast_tmp_root)
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def node_class() -> type:
    """The Node class, for fixtures of a wider scope than ``fake_node`` (a module-wide plugin process)."""
    return Node


@pytest.fixture(scope="session")
def session_cache_dir(_session_cache_dir: str) -> str:
    """The session's config cache directory (``config_cache_dir`` is per test)."""
    return _session_cache_dir


@pytest.fixture(scope="session")
def fast_tmp_root(_fast_tmp_root: Optional[str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The session's tmpfs directory (else a session temporary directory), for wider-scoped fixtures."""
    return _fast_tmp_root or str(tmp_path_factory.mktemp("fast"))


@pytest.fixture
def fake_node(fast_tmp: Path) -> Callable[..., Node]:
    """Factory: ``fake_node(version=1, online="0-3", shared="0-1", config=None)`` -> Node."""
    count = [0]

    def make(version: int = 1, online: str = "0-3", shared: str = "0-1",
             config: Optional[Dict[str, Any]] = None) -> Node:
        count[0] += 1
        return Node(str(fast_tmp / f"node{count[0]}-v{version}"), version=version, online=online, shared=shared,
                    config=config)

    return make


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def node(request: pytest.FixtureRequest, fake_node: Callable[..., Node]) -> Node:
    """One fake node per cgroup version."""
    return fake_node(version=request.param)


@pytest.fixture
def hook_pod(node: Node, config_cache_dir: str) -> Dict[str, Any]:
    """One pod on ``node``: "app" asks, "sidecar" does not; the config's JSON cache is warm.

    CRI-O copies the pod's annotations into every container, so the sidecar carries the
    request for "app" too: hooks.d's "when" matches it and the hook runs, and must bow out.
    The config is loaded once here (PyYAML runs in the test process), as on a node after its
    first container. Returns the node, the cache directory and each container's paths.
    """
    from mixed_cpus_hook.node.config import load_config

    pod_uid = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"
    app = node.add_container("a1" * 32, name="app", pod_uid=pod_uid, cpus="2-3", quota=200000, pid=4242)
    sidecar = node.add_container("5c" * 32, name="sidecar", pod_uid=pod_uid, cpus="2-3", ask=None, pid=4243)
    for path in (sidecar["state"], os.path.join(sidecar["bundle"], "config.json")):
        doc = node.load_json(path)
        doc["annotations"]["mixed-cpus.openshift.io/app"] = "enable"
        node.save_json(path, doc)
    load_config(node.config_path, cache_dir=config_cache_dir)
    return {"node": node, "app": app, "sidecar": sidecar, "cache": config_cache_dir}


@pytest.fixture
def reporter() -> CapturedReporter:
    """A Reporter writing to a StringIO and a SyslogCapture."""
    return make_reporter()


@pytest.fixture
def run_hook(config_cache_dir: str) -> Callable[..., Result]:
    """Run the fast path (apply/release) in-process: ``run_hook(argv, stdin=None)``."""
    from mixed_cpus_hook.frontends.hook.fastpath import parse_fast_args
    from mixed_cpus_hook.frontends.hook.fastpath import run_hook as _run_hook

    def run(argv: List[str], stdin: Optional[str] = None, verbose: bool = False) -> Result:
        args = parse_fast_args(argv)
        assert args is not None, f"not a fast-path command line: {argv}"
        cap = make_reporter(verbose)
        out = io.StringIO()
        code = _run_hook(args, stdin=io.StringIO(stdin or ""), stdout=out, reporter=cap.reporter,
                         environ={"MIXED_CPUS_HOOK_CACHE_DIR": config_cache_dir})
        return Result(code, out.getvalue(), cap.stream.getvalue(), cap.sink.messages)

    return run


@pytest.fixture
def syslog_capture(monkeypatch: pytest.MonkeyPatch) -> SyslogCapture:
    """Intercept the real syslog module, for code that builds its own default Reporter (click CLI)."""
    import syslog

    cap = SyslogCapture()
    monkeypatch.setattr(syslog, "openlog", lambda *a, **k: None)
    monkeypatch.setattr(syslog, "syslog", lambda priority, message=None: cap(priority, message))
    return cap


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture, syslog_capture: SyslogCapture) -> Callable[..., Result]:
    """Run ``mixed_cpus_hook.frontends.entry.main`` (fast path, else click) in-process: ``run_cli(argv)``."""
    from mixed_cpus_hook.frontends.entry import main

    def run(argv: List[str]) -> Result:
        capsys.readouterr()
        del syslog_capture.messages[:]
        code = main(argv)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err, list(syslog_capture.messages))

    return run


@pytest.fixture
def run_exe(config_cache_dir: str) -> Callable[..., Result]:
    """Run the installed package as a process (``python -m mixed_cpus_hook``); syslog is not captured."""

    def run(argv: List[str], stdin: Optional[str] = None, timeout: float = 60) -> Result:
        env = dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=config_cache_dir)
        env.pop("MIXED_CPUS_HOOK_CONFIG", None)
        proc = subprocess.run([sys.executable, "-m", "mixed_cpus_hook", *argv], input=stdin or "",
                              capture_output=True, text=True, env=env, timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr, [])

    return run


@pytest.fixture(scope="session")
def schemas() -> Dict[str, Dict[str, Any]]:
    """Every JSON Schema in schemas/, by file name without ``.schema.json``."""
    out = {}
    for path in sorted(SCHEMA_DIR.glob("*.schema.json")):
        with open(path, encoding="utf-8") as f:
            out[path.name[: -len(".schema.json")]] = json.load(f)
    return out


# -- the host's own state is never touched ----------------------------------------------------

HOST_STATE_DIRS = ("/run/mixed-cpus-hook", "/etc/mixed-cpus-hook", "/var/lib/kubelet")


def _host_state() -> Dict[str, int]:
    """Every file below the product's production paths, with its modification time."""
    seen: Dict[str, int] = {}
    for top in HOST_STATE_DIRS:
        for folder, _dirs, files in os.walk(top):
            for name in files + [""]:
                path = os.path.join(folder, name)
                try:
                    seen[path] = os.lstat(path).st_mtime_ns
                except OSError:
                    pass
    return seen


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_HOST_STATE_KEY] = _host_state()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test wrote the host's /run/mixed-cpus-hook (or /etc, kubelet's dir)."""
    before = session.config.stash.get(_HOST_STATE_KEY, None)
    if before is None or hasattr(session.config, "workerinput"):
        return
    after = _host_state()
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    if changed:
        sys.stderr.write("\nerror: the tests changed the host's own state (they must use temporary dirs):\n  "
                         + "\n  ".join(changed[:20]) + "\n")
        session.exitstatus = 1


_HOST_STATE_KEY = pytest.StashKey[Dict[str, int]]()
