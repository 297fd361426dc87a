"""Watches on fake nodes: pending marks, link directories, the sync, the settle, the unit files.

systemd itself is the integration tests' business (tests/integration/test_reapply_systemd.py);
here ``watches.Systemd`` is replaced by a stand-in that records the systemctl calls.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest

from mixed_cpus_hook.core.cgroup import Dirs
from mixed_cpus_hook.core.errors import CgroupError, RecordError
from mixed_cpus_hook.frontends.systemd import watches
from mixed_cpus_hook.node.config import CACHE_DIR_ENV, DEFAULT_CACHE_DIR, load_config
from mixed_cpus_hook.node.facts import read_node_facts
from mixed_cpus_hook.store import records
from mixed_cpus_hook.store.records import load_container
from mixed_cpus_hook.usecases import reconcile as reconcile_module
from mixed_cpus_hook.usecases.reconcile import reconcile

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "rpm" / "units"


@pytest.fixture(autouse=True)
def no_host_config_cache(tmp_path_factory: pytest.TempPathFactory, _fast_tmp_root: Any) -> Any:
    """After each test: the host's config cache holds no entry for a config file of this session's tests."""
    yield
    roots = [str(tmp_path_factory.getbasetemp())] + ([_fast_tmp_root] if _fast_tmp_root else [])
    encoded = [r.replace("%", "%25").replace("/", "%2F") for r in roots]
    try:
        entries = os.listdir(DEFAULT_CACHE_DIR)
    except FileNotFoundError:
        entries = []
    leaked = [e for e in entries if any(e.startswith(x) for x in encoded)]
    assert leaked == [], f"a test wrote the host's {DEFAULT_CACHE_DIR}: {leaked}"


class FakeSystemd:
    """watches.Systemd's interface: unit states and the calls made, no systemctl."""

    def __init__(self, states: Dict[str, str] = None) -> None:
        self.states = dict(states or {})
        self.calls: List[Tuple[str, Tuple[str, ...]]] = []

    def units(self) -> Dict[str, str]:
        self.calls.append(("list", ()))
        return dict(self.states)

    def act(self, verb: str, units: List[str]) -> None:
        if not units:
            return
        self.calls.append((verb, tuple(units)))
        for unit in units:
            if verb == "start":
                self.states[unit] = "active"
            elif verb == "stop":
                self.states[unit] = "failed" if self.states.get(unit) == "failed" else "inactive"
            elif verb == "reset-failed":
                self.states[unit] = "inactive"


def units_of(cid: str, pod: bool = True) -> Tuple[str, ...]:
    return (f"mixed-cpus-hook-watch@{cid}.path", f"mixed-cpus-hook-watch-quota@{cid}.path") + (
        (f"mixed-cpus-hook-watch-pod@{cid}.path",) if pod else ())


def apply(run_hook: Callable, node: Any, paths: Dict[str, str]) -> None:
    result = run_hook(["--config", node.config_path, "apply", "--state", paths["state"]])
    assert result.code == 0, result.err


def release(run_hook: Callable, node: Any, paths: Dict[str, str]) -> None:
    result = run_hook(["--config", node.config_path, "release", "--state", paths["state"]])
    assert result.code == 0, result.err


def pending(node: Any) -> List[str]:
    folder = os.path.join(node.state_dir, records.PENDING)
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def links(node: Any, cid: str) -> Dict[str, str]:
    folder = watches.watch_dir(node.state_dir, cid)
    if not os.path.isdir(folder):
        return {}
    return {name: os.readlink(os.path.join(folder, name)) for name in sorted(os.listdir(folder))}


def cgroup_dir(node: Any, rel: str, name: str) -> str:
    return os.path.dirname(os.path.realpath(node.path(rel, name)))


# -- marks and names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name,ok", [
    ("a" * 64, True), ("mch-it-1-2-x", True), ("x:y_z.1", True), ("a" * 200, True),
    ("a" * 201, False), ("", False), (".hidden", False), ("x+y", False), ("x.old", False),
    ("x.rpmnew", False), ("x~", False), ("a b", False), ("x.older", True),
])
def test_watchable(name: str, ok: bool) -> None:
    assert records.watchable(name) is ok


def test_apply_and_release_mark_the_container_dry_run_does_not(node: Any, run_hook: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    dry = run_hook(["--config", node.config_path, "apply", "--state", paths["state"], "--dry-run"])
    assert dry.code == 0 and pending(node) == []
    apply(run_hook, node, paths)
    assert pending(node) == ["abc"]
    os.unlink(os.path.join(node.state_dir, records.PENDING, "abc"))
    release(run_hook, node, paths)
    assert pending(node) == ["abc"]


def test_not_applicable_container_is_not_marked(fake_node: Callable, run_hook: Callable) -> None:
    node = fake_node()
    paths = node.add_container("abc", cpus="0-3")  # overlaps the shared CPUs: the shared pool
    apply(run_hook, node, paths)
    assert pending(node) == [] and node.records("containers") == {}


def test_a_mark_that_cannot_be_made_does_not_fail_apply(fake_node: Callable, run_hook: Callable) -> None:
    node = fake_node()
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    os.makedirs(node.state_dir)
    with open(os.path.join(node.state_dir, records.PENDING), "w") as f:  # a file where the dir should be
        f.write("x")
    apply(run_hook, node, paths)
    assert list(node.records("containers")) == ["abc"]
    assert records.mark_pending(node.state_dir, "abc") is False
    assert records.mark_pending(node.state_dir, "../x") is False


def test_take_pending_removes_every_mark_and_ignores_junk(tmp_path: Path) -> None:
    state = str(tmp_path)
    for name in ("b", "a", "x.old"):
        assert records.mark_pending(state, name) is (name != "x.old")
    Path(state, records.PENDING, "junk+name").write_text("")
    assert watches.take_pending(state) == ["a", "b"]
    assert os.listdir(os.path.join(state, records.PENDING)) == []
    assert watches.take_pending(str(tmp_path / "none")) == []


# -- links ---------------------------------------------------------------------------------------


def test_links_are_made_replaced_and_removed(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    a, b, pod = (str(tmp_path / n) for n in ("a", "b", "pod"))
    assert watches.ensure_links(state, "c1", {"cpus": a, "quota": a, "pod-quota": pod}) is True
    assert watches.ensure_links(state, "c1", {"cpus": a, "quota": a, "pod-quota": pod}) is False
    assert watches.ensure_links(state, "c1", {"cpus": b, "quota": a}) is True
    folder = watches.watch_dir(state, "c1")
    assert sorted(os.listdir(folder)) == ["cpus", "quota"]
    assert os.readlink(os.path.join(folder, "cpus")) == b
    assert watches.list_watch_dirs(state) == ["c1"]
    assert watches.remove_links(state, "c1") is True
    assert watches.remove_links(state, "c1") is False
    assert watches.list_watch_dirs(state) == []


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    return victim


LINKED = [
    pytest.param(lambda state, victim: os.symlink(victim, os.path.join(state, "watch", "c1")), "watch/c1",
                 id="watch-id-dir"),
    pytest.param(lambda state, victim: os.symlink(victim, os.path.join(state, "watch")), "watch", id="watch-dir"),
]


@pytest.mark.parametrize("plant,link", LINKED)
def test_symlinked_watch_dirs_are_refused_and_never_followed(tmp_path: Path, plant: Callable, link: str) -> None:
    state = tmp_path / "state"
    (state / "watch").mkdir(parents=True)
    victim = _victim(tmp_path)
    if link == "watch":
        (state / "watch").rmdir()
    plant(str(state), str(victim))
    for act in (lambda: watches.remove_links(str(state), "c1"),
                lambda: watches.ensure_links(str(state), "c1", {"cpus": str(tmp_path / "a")})):
        with pytest.raises(RecordError) as info:
            act()
        assert str(info.value) == (f"{state}/{link}: is a symbolic link to {victim}, outside the state directory; "
                                   "the watch links live in a real directory: refusing to use it")
    assert sorted(p.name for p in victim.iterdir()) == ["precious"]


def test_sync_with_a_symlinked_watch_dir_deletes_nothing(node: Any, run_hook: Callable, reporter: Any,
                                                         tmp_path: Path) -> None:
    a = node.add_container("aaa", quota=200000, pod_quota=200000)
    apply(run_hook, node, a)
    config = load_config(node.config_path)
    sd = FakeSystemd()
    watches.sync(config, reporter.reporter, systemd=sd)
    folder = watches.watch_dir(config.state_dir, "aaa")
    shutil.rmtree(folder)
    victim = _victim(tmp_path)
    os.symlink(victim, folder)
    records.mark_pending(config.state_dir, "aaa")
    watches.sync(config, reporter.reporter, systemd=sd)
    assert sorted(p.name for p in victim.iterdir()) == ["precious"]
    assert f"{folder}: is a symbolic link to {victim}, outside the state directory" in reporter.stream.getvalue()


def test_desired_links_follow_the_record(node: Any, run_hook: Callable) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)
    config = load_config(node.config_path)
    layout = read_node_facts(config).layout
    rec = load_container(config.state_dir, "abc")
    want = {"cpus": os.path.realpath(node.path(paths["rel"], "cpuset.cpus")),
            "quota": os.path.realpath(node.path(paths["rel"], node.quota_name())),
            "pod-quota": os.path.realpath(node.path(paths["pod_rel"], node.quota_name()))}
    assert watches.desired_links(layout, rec, "abc") == want
    outside = rec._replace(cgroup=Dirs("/etc", "/etc"))
    with pytest.raises(CgroupError, match="outside the cgroup root"):
        watches.desired_links(layout, outside, "abc")
    shutil.rmtree(os.path.dirname(want["cpus"]))
    assert watches.desired_links(layout, rec, "abc") is None


# -- sync ----------------------------------------------------------------------------------------


def test_sync_starts_and_stops_watches_from_the_marks(node: Any, run_hook: Callable, reporter: Any) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)
    config = load_config(node.config_path)
    sd = FakeSystemd()
    report = watches.sync(config, reporter.reporter, systemd=sd)
    assert report.started == ("abc",) and report.errors == ()
    assert sd.calls == [("start", units_of("abc"))]
    assert set(links(node, "abc")) == {"cpus", "quota", "pod-quota"}
    assert pending(node) == []
    assert any("container abc: watching its cgroup" in m for _p, m in reporter.sink.messages)
    # Nothing queued: nothing to do, no systemctl.
    assert watches.sync(config, reporter.reporter, systemd=sd) == watches.SyncReport()
    assert len(sd.calls) == 1

    release(run_hook, node, paths)
    report = watches.sync(config, reporter.reporter, systemd=sd)
    assert report.stopped == ("abc",)
    assert sd.calls[-1] == ("stop", units_of("abc"))
    assert links(node, "abc") == {} and pending(node) == []


def test_sync_catches_up_a_rewrite_made_before_the_watch(node: Any, run_hook: Callable, reporter: Any) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)
    node.write(paths["rel"], "cpuset.cpus", "2-3")
    watches.sync(load_config(node.config_path), reporter.reporter, systemd=FakeSystemd())
    assert node.read(paths["rel"], "cpuset.cpus") == "0-3"
    assert any("reapplied (caught up when its watch units started)" in m for _p, m in reporter.sink.messages)


def test_sync_forgets_a_container_whose_cgroup_is_gone(node: Any, run_hook: Callable, reporter: Any) -> None:
    a = node.add_container("aaa", name="a", quota=200000, pod_quota=200000)
    b = node.add_container("bbb", name="b", quota=200000)
    apply(run_hook, node, a)
    apply(run_hook, node, b)
    config = load_config(node.config_path)
    sd = FakeSystemd()
    watches.sync(config, reporter.reporter, systemd=sd)
    assert node.quota(a["pod_rel"]) == "600000"
    for d in {cgroup_dir(node, a["rel"], n) for n in ("cpuset.cpus", node.quota_name())}:
        shutil.rmtree(d)  # killed without poststop
    records.mark_pending(config.state_dir, "aaa")
    report = watches.sync(config, reporter.reporter, systemd=sd)
    assert report.forgotten == ("aaa",) and report.stopped == ("aaa",)
    assert sorted(node.records("containers")) == ["bbb"]
    assert node.quota(a["pod_rel"]) == "400000"  # a's share given back
    assert links(node, "aaa") == {}
    assert pending(node) == ["aaa"]  # the release marked it again: one more (idle) round
    assert watches.sync(config, reporter.reporter, systemd=sd).stopped == ("aaa",)
    assert pending(node) == []


def test_full_sync_compares_everything(node: Any, run_hook: Callable, reporter: Any) -> None:
    a = node.add_container("aaa", name="a", quota=200000, pod_quota=200000)
    b = node.add_container("bbb", name="b", quota=200000)
    apply(run_hook, node, a)
    apply(run_hook, node, b)
    config = load_config(node.config_path)
    watches.take_pending(config.state_dir)  # marks lost: only a full sync can know
    watches.ensure_links(config.state_dir, "stale", {"cpus": "/nowhere", "quota": "/nowhere"})
    sd = FakeSystemd({"mixed-cpus-hook-watch@bbb.path": "failed", "mixed-cpus-hook-watch-quota@bbb.path": "active",
                      "mixed-cpus-hook-watch@ghost.path": "active"})
    report = watches.sync(config, reporter.reporter, full=True, systemd=sd)
    assert report.errors == ()
    # "stale" was never loaded: nothing to stop
    assert sd.states == dict({u: "active" for u in units_of("aaa") + units_of("bbb")},
                             **{"mixed-cpus-hook-watch@ghost.path": "inactive"})
    assert ("reset-failed", ("mixed-cpus-hook-watch@bbb.path",)) in sd.calls
    assert ("start", ("mixed-cpus-hook-watch@aaa.path", "mixed-cpus-hook-watch-quota@aaa.path",
                      "mixed-cpus-hook-watch-pod@aaa.path", "mixed-cpus-hook-watch@bbb.path",
                      "mixed-cpus-hook-watch-pod@bbb.path")) in sd.calls
    assert report.restarted == ("bbb",)
    assert set(report.started) == {"aaa", "bbb"} and set(report.stopped) == {"ghost"}
    assert watches.list_watch_dirs(config.state_dir) == ["aaa", "bbb"]
    assert any(p == 4 and "bbb" in m and "had failed" in m for p, m in reporter.sink.messages)
    # In step now: a second full sync lists the units and changes nothing.
    calls = len(sd.calls)
    report = watches.sync(config, reporter.reporter, full=True, systemd=sd)
    assert report == watches.SyncReport() or (report.started, report.stopped) == ((), ())
    assert sd.calls[calls:] == [("list", ())]


def test_systemctl_failure_is_reported_not_raised(node: Any, run_hook: Callable, reporter: Any) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)

    class Broken(FakeSystemd):
        def act(self, verb: str, units: List[str]) -> None:
            raise watches.HookError("systemctl start failed: no bus", "systemctl")

    report = watches.sync(load_config(node.config_path), reporter.reporter, systemd=Broken())
    assert report.errors and "no bus" in report.errors[0]
    assert pending(node) == []  # never re-marked: that would loop the path unit


def test_systemd_parses_list_units(monkeypatch: pytest.MonkeyPatch) -> None:
    out = ("mixed-cpus-hook-watch@aaa.path loaded active waiting mixed-cpus-hook: watch the cpuset of container aaa\n"
           "● mixed-cpus-hook-watch-pod@bbb.path loaded failed failed mixed-cpus-hook: watch ...\n"
           "other.path loaded active waiting other\n")
    sd = watches.Systemd()
    monkeypatch.setattr(sd, "_run", lambda args: (0, out, ""))
    assert sd.units() == {"mixed-cpus-hook-watch@aaa.path": "active", "mixed-cpus-hook-watch-pod@bbb.path": "failed"}
    assert watches.unit_container("mixed-cpus-hook-watch-quota@x.y.path") == "x.y"
    assert watches.unit_container("mixed-cpus-hook-reconcile@x.service") is None
    monkeypatch.setattr(sd, "_run", lambda args: (1, "", "Failed to connect to bus"))
    with pytest.raises(watches.HookError, match="Failed to connect to bus"):
        sd.act("start", ["x.path"])


# -- reasons and the settle ----------------------------------------------------------------------


def test_settle_fixes_a_second_rewrite(node: Any, run_hook: Callable, reporter: Any) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)
    config = load_config(node.config_path)
    node.write(paths["rel"], "cpuset.cpus", "2-3")

    def second_rewrite() -> None:
        # kubelet's quota, a moment after the first pass restored the cpuset (waiting for that,
        # not for a fixed time: a busy machine can make the first pass slower than any sleep)
        deadline = time.monotonic() + 5
        while node.read(paths["rel"], "cpuset.cpus") != "0-3" and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.02)
        node.set_quota(paths["rel"], 200000)

    t = threading.Thread(target=second_rewrite)
    t.start()
    t0 = time.monotonic()
    results = reconcile(config, reporter.reporter, only="abc", reason="reapplied (test)", settle=0.3)
    took = time.monotonic() - t0
    t.join()
    assert [o.status for _c, o in results] == ["applied", "applied"]
    assert node.read(paths["rel"], "cpuset.cpus") == "0-3" and node.quota(paths["rel"]) == "400000"
    assert 0.3 <= took < 5.0
    assert any("reapplied (test); written again 1 time(s) while settling" in m for _p, m in reporter.sink.messages)


def test_settle_without_changes_writes_nothing(node: Any, run_hook: Callable, reporter: Any) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)
    config = load_config(node.config_path)
    before = node.freeze()
    t0 = time.monotonic()
    results = reconcile(config, reporter.reporter, only="abc", settle=0.05)
    assert [o.status for _c, o in results] == ["in-sync"]
    assert 0.05 <= time.monotonic() - t0 < 1.0
    assert node.changes(before) == []


def test_settle_gives_up_on_a_writer_that_never_stops(node: Any, run_hook: Callable, reporter: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)
    config = load_config(node.config_path)
    monkeypatch.setattr(reconcile_module, "MAX_SETTLE_ROUNDS", 2)
    stop = threading.Event()

    def fighter() -> None:
        # Rewrites the cpuset a little after each time the reapply put it back: every settle round
        # sees a change (a writer on a fixed beat races with the reapply's own passes on a busy machine).
        while not stop.is_set():
            if node.read(paths["rel"], "cpuset.cpus") == "0-3":
                time.sleep(0.05)
                node.write(paths["rel"], "cpuset.cpus", "2-3")
            time.sleep(0.002)

    t = threading.Thread(target=fighter)
    t.start()
    try:
        node.write(paths["rel"], "cpuset.cpus", "2-3")
        results = reconcile(config, reporter.reporter, only="abc", settle=0.3)
    finally:
        stop.set()
        t.join()
    assert results[-1][1].status == "error"
    assert any("still rewritten after 2 reapplies" in m for _p, m in reporter.sink.messages)


# -- the command line of the services -------------------------------------------------------------


def test_main_reconcile_and_sync(node: Any, run_hook: Callable, reporter: Any, monkeypatch: pytest.MonkeyPatch,
                                 config_cache_dir: str) -> None:
    # The services' entry resolves the configuration from ``environ`` only: without the test's
    # cache dir it would write the config cache into the host's /run/mixed-cpus-hook.
    env = {CACHE_DIR_ENV: config_cache_dir}
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)
    node.write(paths["rel"], "cpuset.cpus", "2-3")
    code = watches.main(["--config", node.config_path, "reconcile", "abc", "--settle", "0"],
                        reporter=reporter.reporter, environ=env)
    assert code == 0 and node.read(paths["rel"], "cpuset.cpus") == "0-3"
    assert any(m.startswith("container abc: reapplied (its cgroup was written, seen by its watch units): ")
               and m.endswith("cpuset.cpus: 2-3 -> 0-3 (cpuset: exclusive 2-3 + shared 0-1)")
               for _p, m in reporter.sink.messages), reporter.sink.messages
    node.write(paths["rel"], "cpuset.cpus", "2-3")
    assert watches.main(["--config", node.config_path, "reconcile", "abc", "--settle", "0", "--why", "a test"],
                        reporter=reporter.reporter, environ=env) == 0
    assert any(m.startswith("container abc: reapplied (a test): ") for _p, m in reporter.sink.messages)
    monkeypatch.setattr(watches, "Systemd", FakeSystemd)
    assert watches.main(["--config", node.config_path, "sync"], reporter=reporter.reporter, environ=env) == 0
    assert set(links(node, "abc")) == {"cpus", "quota", "pod-quota"}


@pytest.mark.parametrize("argv", [[], ["reconcile"], ["reconcile", "a", "--settle", "x"], ["sync", "--nope"],
                                  ["reconcile", "a", "--settle", "99"], ["frobnicate"]])
def test_main_usage_errors(argv: List[str], capsys: pytest.CaptureFixture) -> None:
    assert watches.main(argv) == 2
    assert "usage" in capsys.readouterr().err


def test_service_entry_stays_lean() -> None:
    """The reconcile service's imports: no click, yaml, jsonschema, psutil, typing, subprocess."""
    heavy = "{'click','yaml','jsonschema','psutil','typing','subprocess'}"
    # What the interpreter loads before any project code (a .pth file in a venv may import typing)
    # is not the service's doing: only what importing the modules adds counts.
    code = (f"import sys; before = set(sys.modules); "
            "import mixed_cpus_hook.frontends.systemd.watches, mixed_cpus_hook.usecases.apply, mixed_cpus_hook.frontends.hook.fastpath; "
            f"print(sorted({heavy} & (set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_cli_reconcile_sync_watches(node: Any, run_hook: Callable, run_cli: Callable,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)
    node.write(paths["rel"], "cpuset.cpus", "2-3")
    monkeypatch.setattr(watches, "Systemd", FakeSystemd)
    result = run_cli(["--config", node.config_path, "reconcile", "--sync-watches", "--why", "start-up"])
    assert result.code == 0, result.err
    assert "2-3 -> 0-3" in result.out
    assert any(m.startswith("container abc: reapplied (start-up): ") for _p, m in result.syslog)
    assert set(links(node, "abc")) == {"cpus", "quota", "pod-quota"}
    assert run_cli(["--config", node.config_path, "reconcile", "--sync-watches", "--dry-run"]).code == 2
    result = run_cli(["--config", node.config_path, "watches", "sync", "--full"])
    assert result.code == 0, result.err


# -- the unit files ------------------------------------------------------------------------------


def units() -> Dict[str, configparser.ConfigParser]:
    out = {}
    for path in sorted(UNITS.iterdir()):
        parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
        parser.optionxform = str  # type: ignore[assignment]
        # Repeated keys (PathModified=) would collide in configparser: number them.
        lines, seen = [], {}
        for line in path.read_text().splitlines():
            if "=" in line and not line.startswith(("#", "[")):
                key = line.split("=", 1)[0]
                seen[key] = seen.get(key, 0) + 1
                line = f"{key}#{seen[key]}={line.split('=', 1)[1]}"
            elif line.startswith("["):
                seen = {}
            lines.append(line)
        parser.read_string("\n".join(lines))
        out[path.name] = parser
    return out


def values(parser: configparser.ConfigParser, section: str, key: str) -> List[str]:
    return [v for k, v in parser.items(section) if k.split("#")[0] == key] if parser.has_section(section) else []


def test_unit_files_agree_with_the_code() -> None:
    u = units()
    assert sorted(u) == sorted([
        "mixed-cpus-hook.service", "mixed-cpus-hook-config.path", "mixed-cpus-hook-config.service",
        "mixed-cpus-hook-reconcile.service",
        "mixed-cpus-hook-reconcile.timer", "mixed-cpus-hook-reconcile@.service", "mixed-cpus-hook-sync.path",
        "mixed-cpus-hook-sync.service", "mixed-cpus-hook-watch@.path", "mixed-cpus-hook-watch-quota@.path",
        "mixed-cpus-hook-watch-pod@.path", "mixed-cpus-hook-nri.service"])
    state = "/run/mixed-cpus-hook"
    for link, template in watches.WATCH_TEMPLATES.items():
        watch = u[f"{template}{watches.WATCH_SUFFIX}"]
        # exactly one path per unit: see the unit files' comment
        assert values(watch, "Path", "PathModified") == [f"{state}/{watches.WATCH}/%i/{link}"]
        assert values(watch, "Path", "Unit") == [f"{watches.RECONCILE_PREFIX}%i.service"]
        assert values(watch, "Path", "TriggerLimitBurst") == ["50"]
        assert values(watch, "Path", "TriggerLimitIntervalSec") == ["10s"]
        assert not watch.has_section("Install")
    service = u["mixed-cpus-hook-reconcile@.service"]
    assert values(service, "Unit", "StartLimitIntervalSec") == ["0"]
    assert values(service, "Service", "ExecStart") == [
        "/usr/bin/python3 -I -m mixed_cpus_hook.frontends.systemd.watches reconcile %i --settle 0.1"]
    assert not service.has_section("Install")
    sync_path = u["mixed-cpus-hook-sync.path"]
    assert values(sync_path, "Path", "DirectoryNotEmpty") == [f"{state}/{records.PENDING}", f"{state}/{records.RECHECK}"]
    assert values(sync_path, "Path", "MakeDirectory") == ["yes"]
    assert values(u["mixed-cpus-hook-sync.service"], "Service", "ExecStart") == [
        "/usr/bin/python3 -I -m mixed_cpus_hook.frontends.systemd.watches sync"]
    # One service per trigger: systemd 252 gives a service the details of its first trigger only.
    for name, why in (("mixed-cpus-hook.service", "start-up"), ("mixed-cpus-hook-reconcile.service", '"periodic check"'),
                      ("mixed-cpus-hook-config.service", '"configuration or shared CPUs changed"')):
        assert values(u[name], "Service", "ExecStart") == [
            f"/usr/bin/mixed-cpus-hook reconcile --sync-watches --why {why}"], name
    assert values(u["mixed-cpus-hook-config.path"], "Path", "PathChanged") == [
        "/etc/mixed-cpus-hook/config.yaml", "/etc/mixed-cpus-hook/shared-cpus"]
    assert values(u["mixed-cpus-hook-config.path"], "Path", "Unit") == ["mixed-cpus-hook-config.service"]
    timer = u["mixed-cpus-hook-reconcile.timer"]
    assert values(timer, "Timer", "OnUnitInactiveSec") == ["30s"] and values(timer, "Timer", "AccuracySec") == ["1s"]
    # What the preset enables (NRI mode is opt-in: enableable, disabled by the preset); the services
    # they trigger are static, the templates never enabled.
    assert sorted(n for n, p in u.items() if p.has_section("Install")) == [
        "mixed-cpus-hook-config.path", "mixed-cpus-hook-nri.service", "mixed-cpus-hook-reconcile.timer",
        "mixed-cpus-hook-sync.path", "mixed-cpus-hook.service"]
    for parser in u.values():
        for section in parser.sections():
            for _k, v in parser.items(section):
                assert "/usr/local" not in v


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_unit_files_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    exe = shutil.which("mixed-cpus-hook", path=os.path.dirname(sys.executable)) or "/bin/true"
    for path in UNITS.iterdir():
        text = path.read_text().replace("/usr/bin/mixed-cpus-hook ", exe + " ").replace(
            "/usr/bin/python3 ", sys.executable + " ")
        (tmp_path / path.name).write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", *sorted(str(p) for p in tmp_path.iterdir())],
                          capture_output=True, text=True, timeout=120)
    complaints = [line for line in (proc.stdout + proc.stderr).splitlines() if "mixed-cpus-hook" in line]
    assert proc.returncode == 0 and complaints == [], proc.stdout + proc.stderr


# -- cost ----------------------------------------------------------------------------------------


class OpenCounter:
    """Files opened (audit event "open") and directories listed while active."""

    hooked = False
    current: Any = None

    def __init__(self) -> None:
        self.opened: List[str] = []
        self.listed = 0
        if not OpenCounter.hooked:
            sys.addaudithook(OpenCounter._hook)
            OpenCounter.hooked = True

    @staticmethod
    def _hook(event: str, args: tuple) -> None:
        me = OpenCounter.current
        if me is None:
            return
        if event == "open" and isinstance(args[0], (str, bytes)):
            me.opened.append(os.fsdecode(args[0]))
        elif event in ("os.listdir", "os.scandir"):
            me.listed += 1

    def __enter__(self) -> "OpenCounter":
        OpenCounter.current = self
        return self

    def __exit__(self, *exc: object) -> None:
        OpenCounter.current = None


@pytest.mark.parametrize("others", [0, 40])
def test_one_containers_reapply_does_not_touch_the_others(fake_node: Callable, run_hook: Callable, reporter: Any,
                                                         others: int) -> None:
    node = fake_node(online="0-7")
    for i in range(others):
        apply(run_hook, node, node.add_container(f"other{i}", pod_uid=f"00000000-0000-0000-0000-{i:012x}",
                                                 quota=200000, pod_quota=200000))
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)
    config = load_config(node.config_path)
    node.write(paths["rel"], "cpuset.cpus", "2-3")
    with OpenCounter() as count:
        reconcile(config, reporter.reporter, only="abc")
    assert node.read(paths["rel"], "cpuset.cpus") == "0-3"
    assert count.listed == 0
    assert not any("other" in p for p in count.opened), count.opened
    state_files = sorted(os.path.relpath(p, node.state_dir) for p in count.opened if p.startswith(node.state_dir))
    # Its record is saved once (through a temporary, opened by name in the kept descriptor of the
    # containers directory) with the time of this reapply; the cpuset grew back, so whether the
    # kernel keeps thread pins is looked up (check's finding). Its records are not even opened: this
    # process saved them (apply ran in it), and each still has the identity it had then
    # (store.records' remembered records: one stat).
    assert state_files == ["lock", "thread-affinity"]
    assert [p for p in count.opened if not os.path.isabs(p)] == [f".abc.{os.getpid()}.tmp"]
    cgroup_files = [p for p in count.opened if p.startswith(node.root) and not p.startswith(node.state_dir)]
    assert len(cgroup_files) <= 20, cgroup_files


def test_watch_triggered_reapply_queues_a_recheck_and_the_sync_does_it(node: Any, run_hook: Callable,
                                                                       reporter: Any) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)
    config = load_config(node.config_path)
    sd = FakeSystemd()
    watches.sync(config, reporter.reporter, systemd=sd)
    node.write(paths["rel"], "cpuset.cpus", "2-3")
    assert watches.reconcile_container(config, "abc", reporter.reporter, settle=0) == 0
    assert os.listdir(os.path.join(node.state_dir, records.RECHECK)) == ["abc"]
    # A write that came after the reapply's last read (its path unit was not watching yet).
    node.set_quota(paths["rel"], 200000)
    calls = len(sd.calls)
    report = watches.sync(config, reporter.reporter, systemd=sd)
    assert report.rechecked == ("abc",) and report.started == ()
    assert sd.calls[calls:] == []  # a re-check needs no systemctl
    assert node.quota(paths["rel"]) == "400000"
    assert any("seen by the re-check" in m for _p, m in reporter.sink.messages)
    assert os.listdir(os.path.join(node.state_dir, records.RECHECK)) == []
    # The re-check itself queues nothing: no loop.
    assert watches.sync(config, reporter.reporter, systemd=sd) == watches.SyncReport()


def test_a_gone_container_queues_no_recheck(node: Any, run_hook: Callable, reporter: Any) -> None:
    paths = node.add_container("abc", quota=200000, pod_quota=200000)
    apply(run_hook, node, paths)
    config = load_config(node.config_path)
    for d in {os.path.dirname(os.path.realpath(node.path(paths["rel"], n))) for n in ("cpuset.cpus", node.quota_name())}:
        shutil.rmtree(d)
    assert watches.reconcile_container(config, "abc", reporter.reporter, settle=0) == 0
    assert not os.path.exists(os.path.join(node.state_dir, records.RECHECK))
    assert pending(node) == ["abc"]  # forgotten: the sync stops its watch units


def test_a_systemctl_failure_is_one_plain_error_line(node: Any, run_cli: Callable, monkeypatch: Any,
                                                     tmp_path: Any) -> None:
    """No systemctl on PATH: `watches sync --full` says so once, as `error: systemd: ...` (never `error: error:`)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    res = run_cli(["--config", node.config_path, "watches", "sync", "--full"])
    assert res.code == 1
    (line,) = res.err_lines
    assert line.startswith("mixed-cpus-hook: error: systemd: systemctl list-units failed: "), line
    assert "error: error" not in line
