"""benchmarks/nri_request_counts.py reads valgrind's and strace's summaries: what it parses."""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
import nri_request_counts as counts  # noqa: E402

STRACE_C = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 31.52    0.010215           3      3061      1040 newfstatat
 12.05    0.003905           2      1386           pread64
  0.00    0.000000           0         2           getpid
------ ----------- ----------- --------- --------- ----------------
100.00    0.032410           4      7623      1375 total
"""

CALLGRIND = [
    ("collected", "==12== Events    : Ir\n==12== Collected : 1082474611\n==12==\n==12== I   refs:      1,082\n",
     1082474611),
    ("the-last-of-two", "==1== Collected : 5\n==2== Collected : 7\n", 7),
    ("none", "valgrind: failed to start tool 'callgrind'\n", None),
]


@pytest.mark.parametrize("text,expected", [c[1:] for c in CALLGRIND], ids=[c[0] for c in CALLGRIND])
def test_parse_callgrind_total(text: str, expected: Optional[int]) -> None:
    assert counts.parse_callgrind_total(text) == expected


STRACE = [
    ("table", STRACE_C, {"newfstatat": 3061, "pread64": 1386, "getpid": 2}),
    ("empty", "", {}),
    ("header-only", STRACE_C.split("------")[0], {}),
]


@pytest.mark.parametrize("text,expected", [c[1:] for c in STRACE], ids=[c[0] for c in STRACE])
def test_parse_strace_summary(text: str, expected: Dict[str, int]) -> None:
    assert counts.parse_strace_summary(text) == expected


def test_format_sections_orders_counts_and_leaves_out_per_connection_calls() -> None:
    """nri_reference.py --sections' table: the framework first, then each event's call, handler and
    the handler's sections (per event: the mean of its calls, the median of its sum), the Go work's
    column empty where its handlers have no such section, and what runs once per connection
    (Configure) left out."""
    import nri_reference as ref

    ms = 1_000_000
    product = {"CreateContainer / records saved": [1 * ms, 3 * ms, 2 * ms, 4 * ms],
               "CreateContainer / records saved (calls)": [2, 2, 2, 2],
               "Configure call (decode, handler, encode)": [ms],
               "CreateContainer call (decode, handler, encode)": [9 * ms] * 4,
               "CreateContainer handler": [8 * ms] * 4, "frame read (recv, demux)": [ms] * 16}
    go = {"CreateContainer handler": [2 * ms] * 4, "frame read (recv, demux)": [ms] * 16}
    lines = ref.format_sections(product, go)
    rows = [line[2:48].strip() for line in lines[2:]]
    assert rows == ["frame read (recv, demux)", "CreateContainer call (decode, handler, encode)",
                    "CreateContainer handler", "records saved"]
    assert lines[2].split()[-4:] == ["4.00", "1000.0", "4.00", "1000.0"]
    assert lines[4].split()[-4:] == ["1.00", "8000.0", "1.00", "2000.0"]
    assert lines[5].split()[-2:] == ["2.00", "2500.0"]  # no Go column: its handlers save nothing


# benchmarks/nri_cache_footprint.py: callgrind's output file, and the per-cycle difference.
import nri_cache_footprint as footprint  # noqa: E402

CALLGRIND_FILES = [
    ("summary", "version: 1\nevents: Ir I1mr D1mr D1mw ILmr DLmr DLmw\nfn=(1) x\n0 1 2\nsummary: 100 1 2 3 4 5 6\n",
     {"Ir": 100, "I1mr": 1, "D1mr": 2, "D1mw": 3, "ILmr": 4, "DLmr": 5, "DLmw": 6}),
    ("totals", "events: Ir ILmr DLmr DLmw\ntotals: 7 1 2 3\n", {"Ir": 7, "ILmr": 1, "DLmr": 2, "DLmw": 3}),
    ("short-counts", "events: Ir ILmr\nsummary: 9\n", {"Ir": 9, "ILmr": 0}),
    ("no-events", "summary: 1 2\n", None),
    ("no-totals", "events: Ir\n", None),
]


@pytest.mark.parametrize("text,expected", [c[1:] for c in CALLGRIND_FILES], ids=[c[0] for c in CALLGRIND_FILES])
def test_parse_callgrind_events(text: str, expected: Optional[Dict[str, int]]) -> None:
    assert footprint.parse_callgrind_events(text) == expected


def test_footprint_is_the_per_cycle_difference_and_rows_are_over_the_baseline() -> None:
    low = {"Ir": 1000, "ILmr": 10, "DLmr": 20, "DLmw": 30}
    high = {"Ir": 4000, "ILmr": 40, "DLmr": 80, "DLmw": 90}
    assert footprint.compute_footprint(low, high, 30) == (100.0, 1.0, 4.0)
    row = footprint.format_row("product", (5000.0, 3000.0, 7000.0), (1000.0, 1000.0, 2000.0), 3500.0)
    assert row.split() == ["product", "lines", "7.00k", "(code", "2.00k,", "data", "5.00k)", "2.00", "instructions",
                           "4.0k"]
    assert "instructions" in footprint.format_row("base", (1.0, 1.0, 1.0), (1.0, 1.0, 1.0), None)


import nri_cold_latency as cold  # noqa: E402

COLD_OUTPUT = [
    ("after-a-devices-lines", 'container c1 (perf/perf/app): mixed CPUs 0-1\n'
     '{"CreateContainer": [3, 1], "UpdateContainer": [2], "StopContainer": [5]}\n',
     {"CreateContainer": [3, 1], "UpdateContainer": [2], "StopContainer": [5]}),
]
COLD_MALFORMED = [
    ("nothing", "", "the child printed nothing"),
    ("an-event-missing", '{"CreateContainer": [1], "UpdateContainer": [1]}', "not the child's timings"),
    ("not-a-list", '{"CreateContainer": 1, "UpdateContainer": [1], "StopContainer": [1]}', "not the child's timings"),
]


@pytest.mark.parametrize("text,expected", [c[1:] for c in COLD_OUTPUT], ids=[c[0] for c in COLD_OUTPUT])
def test_cold_latency_reads_the_childs_last_line(text: str, expected: Dict[str, List[int]]) -> None:
    assert cold.parse_child_output(text) == expected


@pytest.mark.parametrize("text,message", [c[1:] for c in COLD_MALFORMED], ids=[c[0] for c in COLD_MALFORMED])
def test_cold_latency_refuses_what_is_not_the_childs_timings(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cold.parse_child_output(text)


def test_cold_latency_takes_the_median_of_the_rounds_p50s_and_ratios_to_the_first() -> None:
    rounds = [{"CreateContainer": [1000, 3000, 2000], "UpdateContainer": [500], "StopContainer": [700, 900]},
              {"CreateContainer": [4000], "UpdateContainer": [1500], "StopContainer": [800]},
              {"CreateContainer": [3000], "UpdateContainer": [100], "StopContainer": [600, 1000]}]
    assert cold.compute_p50s(rounds) == {"CreateContainer": 3.0, "UpdateContainer": 0.5, "StopContainer": 0.8}
    first = {"CreateContainer": 4.0, "UpdateContainer": 1.0, "StopContainer": 2.0}
    assert cold.format_row("a", first, None).split() == ["a", "4.0", "1.0", "2.0"]
    assert cold.format_row("b", {"CreateContainer": 2.0, "UpdateContainer": 1.5, "StopContainer": 1.0},
                           first).split() == ["b", "2.0", "(0.50)", "1.5", "(1.50)", "1.0", "(0.50)"]


@pytest.mark.parametrize("text,kib", [("32K", 32), ("32768K\n", 32768), ("1M", 1024), ("", 0), ("K", 0),
                                      ("12G", 0), ("-1K", 0), ("abc", 0)],
                         ids=["l1", "l3-newline", "mib", "empty", "no-number", "unknown-unit", "negative", "text"])
def test_cold_latency_reads_a_cache_size_as_sysfs_writes_it(text: str, kib: int) -> None:
    assert cold.parse_cache_size(text) == kib


@pytest.mark.parametrize("sizes,mib", [([32, 32, 1024, 32768], 64), ([32, 256, 6144], 12), ([], 8), ([512], 8),
                                       ([32, 5000], 10)],
                         ids=["epyc-32mib-l3", "6mib-l3", "none-listed", "small", "rounded-up"])
def test_cold_latency_flushes_twice_the_largest_cache(sizes: List[int], mib: int) -> None:
    assert cold.compute_flush_mib(sizes) == mib


def test_cold_latency_reads_the_cache_sizes_sysfs_lists(tmp_path: Path) -> None:
    folder = tmp_path / "devices/system/cpu/cpu0/cache"
    for index, size in (("index0", "32K"), ("index3", "32768K"), ("index2", "1024K")):
        (folder / index).mkdir(parents=True)
        (folder / index / "size").write_text(size + "\n")
    (folder / "uevent").write_text("")  # not a cache: no size in it
    assert cold.read_cache_sizes(str(tmp_path)) == [32, 1024, 32768]
    assert cold.read_cache_sizes(str(tmp_path / "none")) == []


def test_cold_latency_config_is_one_the_plugin_loads(tmp_path: Path) -> None:
    from mixed_cpus_hook.node.config import load_config

    config = load_config(cold.write_config(str(tmp_path)), cache_dir=str(tmp_path / "cache"))
    assert (config.state_dir, tuple(config.allowed_namespaces)) == (f"{tmp_path}/state", ("perf",))


def test_the_cacerts_a_venv_build_leaves_are_removed_and_no_other_file(tmp_path: Path) -> None:
    import nri_reference as ref

    (tmp_path / "tmpold1234cacert.pem").write_text("x")  # there before: not ours
    (tmp_path / "other.pem").write_text("x")
    before = ref.list_cacerts(str(tmp_path))
    assert before == ["tmpold1234cacert.pem"]
    (tmp_path / "tmpab12cd34cacert.pem").write_text("x")  # left by the tool's venv build
    (tmp_path / "tmpab12cd34").mkdir()
    assert ref.remove_leaked_cacerts(str(tmp_path), before) == ["tmpab12cd34cacert.pem"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.pem", "tmpab12cd34", "tmpold1234cacert.pem"]
    assert ref.remove_leaked_cacerts(str(tmp_path / "gone"), []) == []


def test_a_venv_whose_interpreter_went_with_the_shim_is_removed(tmp_path: Path) -> None:
    import nri_reference as ref

    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "python3").symlink_to(sys.executable)
    for name, target in (("broken", shim / "python3"), ("sound", Path(sys.executable))):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "bin" / "python").symlink_to(target)
    (shim / "python3").unlink()  # the shim's temporary directory is gone
    assert ref.forget_broken_venv(str(tmp_path / "broken")) is True and not (tmp_path / "broken").exists()
    assert ref.forget_broken_venv(str(tmp_path / "sound")) is False and (tmp_path / "sound").is_dir()
    assert ref.forget_broken_venv(str(tmp_path / "none")) is False


# benchmarks/nri_reference.py --python: the tool's venv-mch made again only when another interpreter made it.
@pytest.mark.parametrize("made_with,kept", [
    pytest.param("this", True, id="same-interpreter-kept"),
    pytest.param("/bin/sh", False, id="other-interpreter-made-again"),
    pytest.param(None, True, id="no-venv-yet"),
])
def test_the_tools_venv_follows_the_plugins_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        made_with: Optional[str], kept: bool) -> None:
    import nri_reference as ref

    this = os.path.realpath(sys.executable)
    monkeypatch.setattr(ref, "HOME", str(tmp_path / "home"))
    venv_bin = tmp_path / "home" / "venv-mch" / "bin"
    if made_with is not None:
        venv_bin.mkdir(parents=True)
        os.symlink(this if made_with == "this" else made_with, venv_bin / "python")
    shim = tmp_path / "shim"
    shim.mkdir()
    env = {"PATH": "/usr/bin:/bin"}
    described = ref.use_interpreter(sys.executable, env, str(shim))
    assert described is not None and described.startswith(this + " (Python ")
    assert env["PATH"].split(os.pathsep)[0] == str(shim)  # the tool's setup finds this python3 first
    assert os.path.realpath(shim / "python3") == this
    assert (tmp_path / "home" / "venv-mch").exists() == (kept and made_with is not None)


def test_an_interpreter_that_does_not_run_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import nri_reference as ref

    shim = tmp_path / "shim"
    shim.mkdir()
    assert ref.use_interpreter("/bin/false", {"PATH": "/usr/bin:/bin"}, str(shim)) is None
    assert capsys.readouterr().out == "nri_reference: /bin/false does not run\n"


# benchmarks/nri_reference.py's wrappers (the tool's NRI_REFERENCE_WRAP, called `WRAP KEY ARGV...`):
# each starts our plugin as asked and leaves every other command of the tool as it is.
ECHO = '#!/bin/sh\necho "$(basename "$0")" "$@"\n'


@pytest.mark.parametrize("wrap, rootfs, plugin_line, config_added", [
    pytest.param("ROOTFS_WRAP", True, "python3 -m mixed_cpus_hook --config {cfg} nri --socket s", "",
                 id="rootfs-plugin-on-the-trees-python"),
    pytest.param("FLOOR_WRAP", False, "mixed-cpus-hook --config {cfg} nri --socket s",
                 "annotation_prefix: floor.invalid\n", id="floor-as-the-tool-starts-it"),
    pytest.param("FLOOR_WRAP", True, "python3 -m mixed_cpus_hook --config {cfg} nri --socket s",
                 "annotation_prefix: floor.invalid\n", id="floor-on-the-trees-python"),
    pytest.param("SCRIPT_WRAP", False, "python {script} {venv}/mixed-cpus-hook --config {cfg} nri --socket s", "",
                 id="device-on-the-venvs-python"),
    pytest.param("SCRIPT_WRAP", True, "python3 {script} {venv}/mixed-cpus-hook --config {cfg} nri --socket s", "",
                 id="device-on-the-trees-python"),
])
def test_the_wrappers_start_the_plugin_as_asked(tmp_path: Path, wrap: str, rootfs: bool, plugin_line: str,
                                                config_added: str) -> None:
    import nri_reference as ref

    venv, tree = tmp_path / "venv" / "bin", tmp_path / "tree"
    venv.mkdir(parents=True)
    tree.mkdir()
    for exe in (venv / "mixed-cpus-hook", venv / "python", tree / "python3", tmp_path / "other-tool"):
        exe.write_text(ECHO)
        exe.chmod(0o755)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("shared_cpus: '0'\n")
    python = str(tree / "python3") if rootfs else None
    text = getattr(ref, wrap).format(run_plugin=ref.format_run_plugin(python), script="dev.py",
                                     python=python or ref.VENV_PYTHON)
    script = tmp_path / "wrap.sh"
    script.write_text(text)
    script.chmod(0o755)

    def run(*argv: str) -> str:
        return subprocess.run([str(script), "cp", *argv], capture_output=True, text=True, check=True).stdout.strip()

    assert run(str(venv / "mixed-cpus-hook"), "--config", str(cfg), "nri", "--socket", "s") == \
        plugin_line.format(cfg=cfg, script="dev.py", venv=venv)
    assert cfg.read_text() == "shared_cpus: '0'\n" + config_added
    assert run(str(tmp_path / "other-tool"), "--flag") == "other-tool --flag"


@pytest.mark.parametrize("wrap, plugin_line", [
    pytest.param("ROOTFS_WRAP", "mixed-cpus-hook --config {cfg} nri --socket s", id="the-product"),
    pytest.param("FLOOR_WRAP", "mixed-cpus-hook --config {cfg} nri --socket s", id="the-floor"),
    pytest.param("SCRIPT_WRAP", "python dev.py {venv}/mixed-cpus-hook --config {cfg} nri --socket s", id="a-device"),
])
def test_state_tmpfs_moves_only_the_plugins_state_one_directory_per_key_and_run(tmp_path: Path, wrap: str,
                                                                                 plugin_line: str) -> None:
    import nri_reference as ref

    venv, run_dir = tmp_path / "venv" / "bin", tmp_path / "nriref run 7"
    venv.mkdir(parents=True)
    run_dir.mkdir()
    for exe in (venv / "mixed-cpus-hook", venv / "python", tmp_path / "other-tool"):
        exe.write_text(ECHO)
        exe.chmod(0o755)
    cfg = run_dir / "mixed-cpus-hook.yaml"
    cfg.write_text(f"shared_cpus: '0'\nstate_dir: {run_dir}/mch-state\ncgroup_root: /sys/fs/cgroup\n")
    root = tmp_path / "state root"
    text = getattr(ref, wrap).format(run_plugin=ref.RUN_AS_IS, script="dev.py", python=ref.VENV_PYTHON)
    env = ref.format_wrap_env(str(tmp_path), text, str(root))
    script = env.split()[0]

    def run(*argv: str) -> str:
        return subprocess.run([script, "cp", *argv], capture_output=True, text=True, check=True).stdout.strip()

    assert run(str(venv / "mixed-cpus-hook"), "--config", str(cfg), "nri", "--socket", "s") == \
        plugin_line.format(cfg=cfg, venv=venv)
    lines = cfg.read_text().splitlines()
    assert f"state_dir: {root}/cp-nriref run 7" in lines and "cgroup_root: /sys/fs/cgroup" in lines
    assert not any(line.startswith("state_dir") and "mch-state" in line for line in lines)
    assert run(str(tmp_path / "other-tool"), "--flag") == "other-tool --flag"
    with pytest.raises(ValueError, match="not a wrapper of our plugin"):
        ref.format_state_tmpfs("#!/bin/sh\nexec \"$@\"\n", str(root))
    for bad in ("relative", "/a|b", '/a"b', "/a$b", "/a:b", "/a#b"):
        with pytest.raises(ValueError, match="not an absolute path that sed and YAML take"):
            ref.format_state_tmpfs(text, bad)


def test_the_rootfs_python_runs_through_the_trees_own_loader() -> None:
    import nri_reference as ref

    words = shlex.split(ref.format_rootfs_python("/srv/tree", "/h/src/hook"))
    lib = "/srv/tree/usr/lib/x86_64-linux-gnu"
    assert words == ["env", "PYTHONPATH=/h/src/hook", f"{lib}/ld-linux-x86-64.so.2", "--library-path", lib,
                     "/srv/tree/usr/bin/python3"]
    assert shlex.split(ref.format_rootfs_python("/srv/a tree", "/h"))[-1] == "/srv/a tree/usr/bin/python3"


@pytest.mark.parametrize("start, end, cycles, text", [
    pytest.param(22136, 22872, 3000,
                 "plugin RSS 22136 -> 22872 KiB over 3000 containers (+736 KiB, +245 KiB per 1000)",
                 id="grew-over-3000"),
    pytest.param(23000, 22900, 1000,
                 "plugin RSS 23000 -> 22900 KiB over 1000 containers (-100 KiB, -100 KiB per 1000)",
                 id="shrank-over-1000"),
    pytest.param(22108, 22364, 200, "plugin RSS 22108 -> 22364 KiB over 200 containers (+256 KiB)",
                 id="short-run-no-rate"),
])
def test_the_plugins_memory_growth_is_per_1000_containers(start: int, end: int, cycles: int, text: str) -> None:
    import nri_reference as ref

    result = {"configs": {"c": {"sample_start": {"plugin": {"rss_kib": start}},
                                "sample_end": {"plugin": {"rss_kib": end}},
                                "times_ms": {"create": [1.0] * cycles}}}}
    assert ref.format_rss_growth(result) == text


import nri_loop_cold as loop  # noqa: E402


def test_loop_cold_takes_the_median_of_the_rounds_and_ratios_to_the_lean_server() -> None:
    p50s = loop.compute_p50s({"lean": [100.0, 120.0, 110.0], "hook": [150.0, 165.0, 140.0]})
    assert p50s == {"lean": 110.0, "hook": 150.0}
    assert [line.split() for line in loop.format_rows(p50s, "lean")] == [["lean", "110.0", "us"],
                                                                        ["hook", "150.0", "us", "(1.36)"]]


@pytest.mark.skipif(not loop.shutil.which("taskset"), reason="no taskset")
@pytest.mark.parametrize("lean", [True, False], ids=["lean-server", "plugin"])
def test_loop_cold_answers_come_from_each_server_for_real(tmp_path: Path, lean: bool) -> None:
    """Both servers run as processes and answer the requests (a few, a small flush): the benchmark works."""
    flush = memoryview(bytearray(1 << 16))
    p50 = loop.run_variant(os.path.join(loop.REPO, "hook"), lean, sorted(os.sched_getaffinity(0))[-1], flush,
                           bytes(len(flush)), 3, str(tmp_path))
    assert 0 < p50 < 1e6 and os.listdir(tmp_path) == []


# benchmarks/nri_reference.py: the answer p99 goal (absolute, judged from the tool's result.json).
def _result(ours_ms: List[float], go_ms: List[float]) -> Dict:
    methods = ("CreateContainer", "UpdateContainer", "StopContainer")
    return {"configs": {"cp": {"answers_ms": {m: ours_ms for m in methods}},
                        "bp": {"answers_ms": {m: go_ms for m in methods}}}}


P99_CASES = [
    # (id, our answers in ms, the Go plugin's, our p99, the verdict)
    ("well-under", [0.5] * 98 + [3.0] * 2, [0.4] * 100, 3.0, "holds"),
    ("at-the-goal", [1.0] * 98 + [5.0] * 2, [0.4] * 100, 5.0, "holds"),
    ("just-over", [1.0] * 98 + [5.1] * 2, [0.4] * 100, 5.1, "falls short"),
    ("a-slow-tail", [1.0] * 90 + [9.0] * 10, [0.4] * 100, 9.0, "falls short"),
]


@pytest.mark.parametrize("ours,go,p99,verdict", [c[1:] for c in P99_CASES], ids=[c[0] for c in P99_CASES])
def test_the_answer_p99_is_judged_against_5_ms(ours: List[float], go: List[float], p99: float, verdict: str) -> None:
    import nri_reference as ref

    p99s = ref.read_p99s(_result(ours, go))
    assert set(p99s) == {"create", "update", "stop"}
    assert p99s["create"][0] == pytest.approx(p99) and p99s["create"][1] == pytest.approx(0.4)
    lines = ref.format_p99_medians([p99s, p99s, p99s])
    assert len(lines) == 3 and all(line.split("(<= 5 ms)")[1].strip().startswith(verdict) for line in lines)
    assert "answer create" not in ref.format_p99s(p99s) and "create " in ref.format_p99s(p99s)


# The interval of a goal's judged figure (the median over the runs of each run's p50 ratio).
VERDICT_CASES = [
    # (id, the median over the runs, the goal, the interval, what is printed)
    ("held-beyond-the-spread", 1.02, 1.05, (1.001, 1.049), "holds  [95%: 1.001-1.049, all of it within the goal]"),
    ("held-at-the-goal", 1.05, 1.05, (1.02, 1.05), "holds  [95%: 1.020-1.050, all of it within the goal]"),
    ("held-within-the-spread", 1.04, 1.05, (1.01, 1.07),
     "holds  [95%: 1.010-1.070, the goal inside it: within the tool's spread]"),
    ("missed-within-the-spread", 1.052, 1.05, (1.023, 1.083),
     "falls short  [95%: 1.023-1.083, the goal inside it: within the tool's spread]"),
    ("missed-beyond-the-spread", 2.4, 2.0, (2.2, 2.6), "falls short  [95%: 2.200-2.600, all of it beyond the goal]"),
    ("held-no-interval", 1.3, 1.5, None, "holds"),
    ("missed-no-interval", 1.6, 1.5, None, "falls short"),
]


@pytest.mark.parametrize("value,goal,interval,text", [c[1:] for c in VERDICT_CASES], ids=[c[0] for c in VERDICT_CASES])
def test_a_verdict_says_where_the_goal_lies_in_the_interval(value: float, goal: float, interval: Optional[tuple],
                                                             text: str) -> None:
    import nri_reference as ref

    assert ref.format_verdict(value, goal, interval) == text


def _cycles(n: int, seed: int) -> List[float]:
    """n round trips in ms with the spread of a run (3.5 ms, a few percent, a slow tail)."""
    import random

    rng = random.Random(seed)
    return [3.5 * (1 + rng.gauss(0, .05)) + (rng.random() < .1) * rng.uniform(1, 4) for _ in range(n)]


def test_paired_samples_in_a_fixed_ratio_give_that_ratio_and_nothing_around_it() -> None:
    import nri_reference as ref

    go = _cycles(200, 1)
    lo, hi = ref.compute_median_ratio_interval([([t * 1.1 for t in go], go)], paired=True)
    assert lo == pytest.approx(1.1) and hi == pytest.approx(1.1)


def test_the_interval_holds_the_figure_and_narrows_with_runs_and_is_reproducible() -> None:
    import nri_reference as ref

    runs = [(_cycles(200, 10 + i), _cycles(200, 20 + i)) for i in range(5)]  # the same machine: a true ratio of 1
    one = ref.compute_median_ratio_interval(runs[:1], paired=False)
    five = ref.compute_median_ratio_interval(runs, paired=False)
    figure = statistics.median(ref.pct(o, .5) / ref.pct(g, .5) for o, g in runs)
    assert one[0] < 1 < one[1] and five[0] <= figure <= five[1]
    assert five[1] - five[0] < one[1] - one[0]
    assert ref.compute_median_ratio_interval(runs, paired=False) == five
    assert ref.compute_median_ratio_interval(runs, paired=False, seed=1) != five


@pytest.mark.parametrize("runs,paired,message", [
    pytest.param([], True, "every run needs samples on both sides", id="no-run"),
    pytest.param([([1.0], [])], False, "every run needs samples on both sides", id="a-side-without-samples"),
    pytest.param([([1.0, 2.0], [1.0])], True, "paired samples of unequal length", id="paired-of-unequal-length"),
])
def test_an_interval_without_samples_to_draw_is_refused(runs: list, paired: bool, message: str) -> None:
    import nri_reference as ref

    with pytest.raises(ValueError, match=message):
        ref.compute_median_ratio_interval(runs, paired)


def test_the_medians_show_intervals_for_the_ratios_read_from_cycles() -> None:
    import nri_reference as ref

    go, ours = _cycles(200, 3), _cycles(200, 4)
    result = {"configs": {"c": {"times_ms": {"create": [t * 1.2 for t in go]}}, "b": {"times_ms": {"create": go}},
                          "cp": {"answers_ms": {m: ours for _k, m in ref.P99_METHODS}},
                          "bp": {"answers_ms": {m: go for _k, m in ref.P99_METHODS}}}}
    samples = ref.read_samples(result)
    assert set(samples) == set(ref.SAMPLED) and samples["cri_create"] == ([t * 1.2 for t in go], go)
    per_run = [{"cri_create": 1.2, "create": 1.9, "update": 1.6, "stop": 1.5, "cpu": 1.3, "rss": 1.26}]
    lines = dict(zip(ref.LABELS, ref.format_median_lines(per_run, [samples])))
    assert lines["cri_create"].endswith("falls short  [95%: 1.200-1.200, all of it beyond the goal]")
    assert "[95%: " in lines["create"] and "[95%: " not in lines["cpu"] + lines["rss"]
    assert lines["rss"].endswith("1.260  (<= 1.5)  holds")
    bare = ref.format_median_lines(per_run, [])
    assert not any("[95%" in line for line in bare) and bare[0].endswith("1.200  (<= 1.05)  falls short")


def test_the_busy_suite_writes_only_below_its_scratch_directory(tmp_path: Path) -> None:
    import nri_reference as ref

    argv, env = ref.format_busy_command("/usr/bin/python3", str(tmp_path))
    assert argv[:3] == ["/usr/bin/python3", "-m", "pytest"] and argv[-1].endswith(os.path.join("tests", "unit"))
    assert argv[argv.index("--basetemp") + 1].startswith(str(tmp_path))
    assert env["TMPDIR"].startswith(str(tmp_path)) and env["MCH_TESTS_SHM"].startswith(str(tmp_path))


def _running_with(marker: str) -> List[str]:
    """The pids of processes whose command line holds ``marker`` (read from /proc: nothing signalled)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found


# A run that ends at SIGINT, and one that ignores it (then SIGKILL for its group after the grace);
# each leaves a child in its group, which must be gone too.
BUSY_CASES = [
    ("ends-at-sigint", "", 30.0),
    ("ignores-sigint", "signal.signal(signal.SIGINT, signal.SIG_IGN); ", 0.5),
]


@pytest.mark.parametrize("prelude,grace", [c[1:] for c in BUSY_CASES], ids=[c[0] for c in BUSY_CASES])
def test_the_busy_load_runs_again_and_leaves_nothing_running(tmp_path: Path, prelude: str, grace: float) -> None:
    import time

    import nri_reference as ref

    marker = f"mch-busy-test-{os.getpid()}-{tmp_path.name}"
    ready = tmp_path / "ready"
    script = tmp_path / "busy.py"
    script.write_text("import signal, subprocess, sys, time\n" + prelude.replace("; ", "\n") + "\n"
                      "subprocess.Popen(['sh', '-c', 'trap \"\" INT; sleep 60; : ' + sys.argv[1]])\n"
                      "open(sys.argv[2], 'a').write('x')\n"
                      "time.sleep(60)\n")
    busy = ref.BusyLoad([sys.executable, str(script), marker, str(ready)], grace=grace)
    with busy:
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the busy command did not start"
        assert _running_with(marker)
    assert busy.runs == 1 and not busy._thread.is_alive()
    deadline = time.monotonic() + 5
    while _running_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _running_with(marker) == []
    assert busy.load.startswith("load ") and " -> " in busy.load


CPUINFO = [
    ("intel", "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
              "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Processor\n", "Intel(R) Xeon(R) Processor"),
    ("amd-spaces-squeezed", "model name\t:  AMD EPYC   7B13 64-Core Processor \n", "AMD EPYC 7B13 64-Core Processor"),
    ("arm-no-model-name", "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n", ""),
    ("a-value-with-a-colon", "model name\t: Weird: CPU\n", "Weird: CPU"),
    ("empty", "", ""),
]


@pytest.mark.parametrize("text,expected", [c[1:] for c in CPUINFO], ids=[c[0] for c in CPUINFO])
def test_reference_names_the_cpu_model_it_measured_on(text: str, expected: str) -> None:
    import nri_reference as ref

    assert ref.parse_cpu_model(text) == expected


def test_reference_reads_the_machine_from_the_proc_root_it_is_given(tmp_path: Path) -> None:
    import nri_reference as ref

    cpus = len(os.sched_getaffinity(0))
    (tmp_path / "cpuinfo").write_text("model name\t: Test CPU\n")
    assert ref.read_machine(str(tmp_path)) == f"Test CPU, {cpus} CPUs"
    assert ref.read_machine(str(tmp_path / "none")) == f"CPU model not listed, {cpus} CPUs"
