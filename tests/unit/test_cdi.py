"""CDI specs as the record of the CPU DRA driver's claims (exclusive_source dra).

core.cdi: what a spec holds (malformed specs, each with its message) and which of a container's
DRA_CPUSET_ variables the specs vouch for (forged ones refused, each with its message).
node.cdi: the spec directories read for real on disk (JSON and YAML, broken files skipped with one
report, symbolic links, FIFOs, bounds) and the per-file cache (reused, invalidated on change).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from mixed_cpus_hook.core.bounds import MAX_CDI_DEVICE_ENV, MAX_CDI_DEVICES, MAX_CDI_SPEC_BYTES, MAX_CDI_YAML_BYTES
from mixed_cpus_hook.core.cdi import CdiSpec, compute_vouched, parse_cdi_spec, select_claim_env
from mixed_cpus_hook.core.errors import CdiSpecError, PolicyError
from mixed_cpus_hook.node import cdi as node_cdi
from mixed_cpus_hook.node.cdi import CdiSpecCache, read_cdi_specs, read_vouched
from mixed_cpus_hook.testing.fakenode import format_cdi_claim_spec

U1, U2 = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
DIRS = ("/etc/cdi", "/var/run/cdi")
LATER = 2 * 10 ** 9  # ns: what "a while after the files were written" adds to the clock


def device(env: Any, name: Any = "claim-x") -> Dict[str, Any]:
    return {"name": name, "containerEdits": {"env": env}}


def spec(*devices: Any, kind: Any = "dra.k8s.io/cpu") -> Dict[str, Any]:
    return {"cdiVersion": "0.8.0", "kind": kind, "devices": list(devices)}


# -- core.cdi: what a spec holds ----------------------------------------------------------------

PARSED = [
    pytest.param(format_cdi_claim_spec(U1, "1"), CdiSpec("dra.k8s.io/cpu", 1, (f"DRA_CPUSET_{U1}=1",)),
                 id="the-drivers-spec"),
    pytest.param(spec(device(["PATH=/x", f"DRA_CPUSET_{U1}=1-2", "OTHER=1"]), device(None, "gpu0"), {"name": "gpu1"}),
                 CdiSpec("dra.k8s.io/cpu", 3, (f"DRA_CPUSET_{U1}=1-2",)), id="other-entries-and-devices-left-out"),
    pytest.param(dict(spec(device(["A=1"])), containerEdits={"env": [f"DRA_CPUSET_{U2}=3"]}),
                 CdiSpec("dra.k8s.io/cpu", 1, ()), id="spec-level-edits-are-no-device's"),
    pytest.param({"kind": "nvidia.com/gpu", "devices": None}, CdiSpec("nvidia.com/gpu", 0, ()), id="null-devices"),
    pytest.param({"kind": "k"}, CdiSpec("k", 0, ()), id="no-devices"),
    pytest.param(spec(*[device([f"DRA_CPUSET_{i}=1"]) for i in range(MAX_CDI_DEVICES)]),
                 CdiSpec("dra.k8s.io/cpu", MAX_CDI_DEVICES, tuple(f"DRA_CPUSET_{i}=1" for i in range(MAX_CDI_DEVICES))),
                 id="devices-at-the-bound"),
]


@pytest.mark.parametrize("doc,expected", PARSED)
def test_what_a_spec_holds(doc: Any, expected: CdiSpec) -> None:
    assert parse_cdi_spec(doc, "/var/run/cdi/x.json") == expected


MALFORMED = [
    pytest.param([], "not a CDI spec: an array, not a mapping with 'kind' and 'devices'", id="array"),
    pytest.param(None, "not a CDI spec: null, not a mapping with 'kind' and 'devices'", id="empty-file"),
    pytest.param({"devices": []}, "field 'kind' must be a string, not null", id="no-kind"),
    pytest.param({"kind": 3}, "field 'kind' must be a string, not an integer", id="kind-number"),
    pytest.param({"kind": "k", "devices": {}}, "field 'devices' must be an array, not a mapping", id="devices-map"),
    pytest.param(spec(*[device([])] * (MAX_CDI_DEVICES + 1)),
                 f"field 'devices' has {MAX_CDI_DEVICES + 1} entries, more than the {MAX_CDI_DEVICES} read",
                 id="devices-past-the-bound"),
    pytest.param(spec("x"), "devices[0] must be a mapping, not a string", id="device-string"),
    pytest.param(spec(device([]), {"containerEdits": {}}), "devices[1].name must be a string, not null",
                 id="device-without-name"),
    pytest.param(spec({"name": "d", "containerEdits": []}), "devices[0].containerEdits must be a mapping, not an array",
                 id="edits-array"),
    pytest.param(spec(device(f"DRA_CPUSET_{U1}=1")), "devices[0].containerEdits.env must be an array, not a string",
                 id="env-string"),
    pytest.param(spec(device(["A=1", 7])), "devices[0].containerEdits.env[1] must be a string, not an integer",
                 id="env-entry-number"),
    pytest.param(spec(device(["A=1"] * (MAX_CDI_DEVICE_ENV + 1))),
                 f"devices[0].containerEdits.env has {MAX_CDI_DEVICE_ENV + 1} entries, more than the "
                 f"{MAX_CDI_DEVICE_ENV} read", id="env-past-the-bound"),
]


@pytest.mark.parametrize("doc,message", MALFORMED)
def test_malformed_specs(doc: Any, message: str) -> None:
    with pytest.raises(CdiSpecError) as err:
        parse_cdi_spec(doc, "/var/run/cdi/x.json")
    assert str(err.value) == f"/var/run/cdi/x.json: {message}"


# -- core.cdi: which variables the specs vouch for -------------------------------------------------

CLAIM1 = f"DRA_CPUSET_{U1}=1"
VOUCHED = [
    pytest.param((CLAIM1,), (CLAIM1,), ((CLAIM1,), ()), id="the-drivers-claim"),
    pytest.param((CLAIM1, f"DRA_CPUSET_{U2}=2"), (CLAIM1, f"DRA_CPUSET_{U2}=2"),
                 ((CLAIM1, f"DRA_CPUSET_{U2}=2"), ()), id="two-claims"),
    pytest.param((CLAIM1, "PATH=/bin"), (CLAIM1,), ((CLAIM1,), ()), id="other-variables-pass"),
    pytest.param(("DRA_CPUSET_ASSIGNED=1",), ("DRA_CPUSET_ASSIGNED=1",), ((), ("DRA_CPUSET_ASSIGNED",)),
                 id="a-forks-summary-held-by-a-spec-is-no-claim"),
    pytest.param((), (CLAIM1,), ((), ()), id="no-variable"),
]


@pytest.mark.parametrize("env,held,expected", VOUCHED)
def test_claims_a_spec_vouches_for(env: Tuple[str, ...], held: Tuple[str, ...], expected: Any) -> None:
    vouched = compute_vouched([CdiSpec("dra.k8s.io/cpu", 1, held)])
    assert select_claim_env(env, vouched, DIRS, "container c1") == expected


UNDER = "is not in any CDI spec under /etc/cdi, /var/run/cdi"
FORGED = [
    pytest.param(("DRA_CPUSET_0000=3",), (), f"DRA_CPUSET_0000 {UNDER}: not the CPU DRA driver's claim",
                 id="forged-no-spec"),
    pytest.param((f"DRA_CPUSET_{U1}=3",), (CLAIM1,),
                 f"DRA_CPUSET_{U1}=3 {UNDER} (a spec holds {CLAIM1}): not the CPU DRA driver's claim",
                 id="a-spec-with-another-value"),
    pytest.param((f"DRA_CPUSET_{U2}=1",), (CLAIM1,), f"DRA_CPUSET_{U2} {UNDER}: not the CPU DRA driver's claim",
                 id="another-uid"),
    pytest.param((CLAIM1 + " ",), (CLAIM1,), f"'DRA_CPUSET_{U1}=1 ' {UNDER}", id="value-with-a-space"),
    pytest.param((CLAIM1, f"DRA_CPUSET_{U1}=0-3"), (CLAIM1,), f"DRA_CPUSET_{U1}=0-3 {UNDER}",
                 id="the-pod-spec-sets-the-drivers-name-too"),
    pytest.param((f"DRA_CPUSET_{U1}",), (CLAIM1,), f"DRA_CPUSET_{U1} {UNDER}", id="no-equals-sign"),
    pytest.param(("DRA_CPUSET_ASSIGNED=0-3",), (), f"DRA_CPUSET_ASSIGNED {UNDER}", id="a-summary-no-spec-holds"),
    pytest.param(("DRA_CPUSET_not-a-uid!=2",), (), f"DRA_CPUSET_not-a-uid! {UNDER}", id="not-a-uid"),
    pytest.param(("DRA_CPUSET_x\n=1",), (), f"'DRA_CPUSET_x\\n' {UNDER}", id="control-character-quoted"),
]


@pytest.mark.parametrize("env,held,message", FORGED)
def test_forged_claims_are_refused(env: Tuple[str, ...], held: Tuple[str, ...], message: str) -> None:
    vouched = compute_vouched([CdiSpec("dra.k8s.io/cpu", 1, held)])
    with pytest.raises(PolicyError) as err:
        select_claim_env(env, vouched, DIRS, "container c1")
    assert str(err.value).startswith(f"container c1: {message}"), str(err.value)


# -- node.cdi: the directories on disk -----------------------------------------------------------

class SpecDirs:
    """Two spec directories under a test's temporary directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.static, self.dynamic = root / "etc-cdi", root / "run-cdi"
        self.static.mkdir()
        self.dynamic.mkdir()
        self.dirs = (str(self.static), str(self.dynamic))
        self.cache = CdiSpecCache()

    def write(self, name: str, content: Any, where: str = "dynamic", atomic: bool = True) -> Path:
        path = getattr(self, where) / name
        data = content if isinstance(content, bytes) else (
            content if isinstance(content, str) else json.dumps(content)).encode()
        if not atomic:
            with open(path, "r+b" if path.exists() else "wb") as f:
                f.truncate(0)
                f.write(data)
            return path
        tmp = path.with_name("." + name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return path

    def scan(self, later: bool = True, **kwargs: Any) -> node_cdi.CdiScan:
        """A scan as the plugin makes it; ``later``: a while after every file was written (their keys then tell)."""
        return read_cdi_specs(self.dirs, self.cache, now_ns=time.time_ns() + (LATER if later else 0), **kwargs)

    def vouched(self, later: bool = True) -> Dict[str, Any]:
        return read_vouched(self.dirs, self.cache, now_ns=time.time_ns() + (LATER if later else 0))[0]


@pytest.fixture
def specs(fast_tmp: Path) -> SpecDirs:
    return SpecDirs(fast_tmp)


YAML_SPEC = f"""---
cdiVersion: 0.8.0
kind: dra.k8s.io/cpu
devices:
  - name: claim-{U1}
    containerEdits:
      env:
        - DRA_CPUSET_{U1}=1
"""

FORMATS = [
    pytest.param("claim.json", json.dumps(format_cdi_claim_spec(U1, "1"), indent=2), id="json"),
    pytest.param("claim.yaml", YAML_SPEC, id="yaml"),
    pytest.param("claim.yaml", json.dumps(format_cdi_claim_spec(U1, "1")), id="json-in-a-yaml-file"),
    pytest.param("claim.json", YAML_SPEC, id="yaml-in-a-json-file"),
    pytest.param("claim.yaml", f"{{kind: dra.k8s.io/cpu, devices: [{{name: c, containerEdits: "
                               f"{{env: [DRA_CPUSET_{U1}=1]}}}}]}}", id="yaml-flow-style"),
]


@pytest.mark.parametrize("name,text", FORMATS)
def test_json_and_yaml_specs_vouch(specs: SpecDirs, name: str, text: str) -> None:
    specs.write(name, text)
    assert specs.vouched() == {f"DRA_CPUSET_{U1}": frozenset({f"DRA_CPUSET_{U1}=1"})}


def test_both_directories_are_read_and_other_files_are_not(specs: SpecDirs) -> None:
    specs.write("a.json", format_cdi_claim_spec(U1, "1"), where="static")
    specs.write("b.json", format_cdi_claim_spec(U2, "2"))
    specs.write("c.json.bak", format_cdi_claim_spec("33", "3"))  # CDI reads *.json and *.yaml only
    (specs.dynamic / "sub.json").mkdir()  # nor subdirectories
    (specs.dynamic / "sub.json" / "d.json").write_text(json.dumps(format_cdi_claim_spec("44", "3")))
    scan = specs.scan()
    assert sorted(os.path.basename(p) for p, _s in scan.specs) == ["a.json", "b.json"]
    assert (scan.problems, scan.missing, scan.files) == ((), (), 2)
    assert set(specs.vouched()) == {f"DRA_CPUSET_{U1}", f"DRA_CPUSET_{U2}"}


def test_a_missing_directory_holds_nothing(specs: SpecDirs) -> None:
    specs.static.rmdir()
    specs.write("b.json", format_cdi_claim_spec(U2, "2"))
    scan = specs.scan()
    assert scan.missing == (str(specs.static),) and scan.problems == () and len(scan.specs) == 1


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return ""


# A billion laughs: nine levels of ten aliases each. PyYAML's safe loader builds an alias as a reference to the
# one object (no copy), and only devices[].containerEdits.env is walked: refused at its first entry.
YAML_BOMB = "\n".join(["kind: dra.k8s.io/cpu", "a0: &a0 [" + ", ".join(['"DRA_CPUSET_x=1"'] * 10) + "]"]
                      + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
                      + ["devices: [{name: d, containerEdits: {env: *a8}}]", ""])


def _symlink_loop(path: Path) -> str:
    os.symlink(path.name, path)
    return ""


BROKEN = [
    pytest.param("x.json", '{"kind": "dra.k8s.io/cpu", "devices": [{"name": "DRA_CPUSET_"',
                 "not valid JSON or YAML at line 1", id="truncated-json"),
    pytest.param("x.yaml", "kind: [DRA_CPUSET_\n", "not valid JSON or YAML at line 2", id="broken-yaml"),
    pytest.param("x.json", b"\xff\xfe DRA_CPUSET_", "not UTF-8 text", id="not-utf8"),
    pytest.param("x.json", '{"a":' * 100000 + '"DRA_CPUSET_"', "not valid JSON: nested too deeply",
                 id="json-nested-too-deeply"),
    pytest.param("x.yaml", "[" * 5000 + "DRA_CPUSET_", "not valid YAML: nested too deeply",
                 id="yaml-nested-too-deeply"),
    pytest.param("x.json", json.dumps({"kind": "k", "devices": [{"name": 1, "x": "DRA_CPUSET_"}]}),
                 "devices[0].name must be a string, not an integer", id="not-cdis-shape"),
    pytest.param("x.json", "DRA_CPUSET_" + " " * MAX_CDI_SPEC_BYTES,
                 f"larger than {MAX_CDI_SPEC_BYTES} bytes ({MAX_CDI_SPEC_BYTES + 11})", id="too-large"),
    pytest.param("x.json", _fifo, "not a regular file", id="fifo"),
    pytest.param("x.yaml", "# DRA_CPUSET_\n" + "#" * MAX_CDI_YAML_BYTES + "\nkind: k\n",
                 f"not JSON, and larger than the {MAX_CDI_YAML_BYTES} characters read as YAML "
                 f"({MAX_CDI_YAML_BYTES + 23})", id="yaml-with-a-claim-too-large"),
    pytest.param("x.json", "{" + "DRA_CPUSET_" * MAX_CDI_YAML_BYTES, f"not JSON, and larger than the "
                 f"{MAX_CDI_YAML_BYTES} characters read as YAML", id="large-broken-json-not-tried-as-yaml"),
    pytest.param("x.json", _symlink_loop, "not a regular file", id="symlink-loop"),
    pytest.param("x.yaml", YAML_BOMB, "devices[0].containerEdits.env[0] must be a string, not an array",
                 id="yaml-alias-bomb"),
    pytest.param("x.yaml", "!!python/object/apply:os.system [DRA_CPUSET_]\n",
                 "not valid JSON or YAML at line 1, column 1: could not determine a constructor", id="yaml-python-tag"),
]


@pytest.mark.parametrize("name,content,problem", BROKEN)
def test_a_broken_spec_is_skipped_and_reported_once(specs: SpecDirs, name: str, content: Any, problem: str) -> None:
    specs.write("good.json", format_cdi_claim_spec(U1, "1"))
    path = specs.dynamic / name
    if callable(content):
        content(path)
    else:
        specs.write(name, content)
    first, second = specs.scan(), specs.scan()
    expected = f"CDI spec {path}: {problem}"
    assert len(first.problems) == 1 and first.problems[0].startswith(expected), first.problems
    assert first.problems[0].endswith(": skipped")
    assert first.new_problems == first.problems and second.new_problems == () and second.problems == first.problems
    assert [os.path.basename(p) for p, _s in second.specs] == ["good.json"]  # the others still count
    # fixed, then broken again: reported again
    os.unlink(path)
    specs.write(name, format_cdi_claim_spec(U2, "2"))
    assert specs.scan().problems == () and f"DRA_CPUSET_{U2}" in specs.vouched()
    os.unlink(path)
    specs.write(name, "{\"DRA_CPUSET_\": ")
    assert len(specs.scan().new_problems) == 1


def test_a_large_yaml_spec_without_a_claim_is_read_by_check_only(specs: SpecDirs) -> None:
    """A GPU vendor's YAML spec past MAX_CDI_YAML_BYTES: the plugin never parses it (no claim in it), check
    does (every_spec), up to MAX_CDI_SPEC_BYTES."""
    gpu = "kind: nvidia.com/gpu\ndevices:\n" + "".join(f"  - name: gpu{i}\n    containerEdits: {{env: [A={i}]}}\n"
                                                        for i in range(2000))
    assert MAX_CDI_YAML_BYTES < len(gpu) < MAX_CDI_SPEC_BYTES
    specs.write("gpu.yaml", gpu)
    assert specs.scan().problems == () and specs.scan().specs == ()
    every = read_cdi_specs(specs.dirs, every_spec=True)
    assert every.problems == (f"CDI spec {specs.dynamic / 'gpu.yaml'}: field 'devices' has 2000 entries, more than "
                              f"the {MAX_CDI_DEVICES} read: skipped",)


def test_a_broken_file_without_a_claim_is_not_even_parsed(specs: SpecDirs) -> None:
    """A spec with no DRA_CPUSET_ bytes cannot vouch: the plugin never parses it (a GPU vendor's spec);
    ``check`` (every_spec) does, and reports it."""
    path = specs.write("gpu.yaml", "kind: nvidia.com/gpu\ndevices: [\n")
    assert specs.scan().problems == ()
    every = read_cdi_specs(specs.dirs, every_spec=True)
    assert len(every.problems) == 1 and every.problems[0].startswith(f"CDI spec {path}: not valid JSON or YAML")


def test_symbolic_links(specs: SpecDirs, fast_tmp: Path) -> None:
    """Followed to a file of the same directory only; one out of it is skipped and reported."""
    outside = fast_tmp / "outside.json"
    outside.write_text(json.dumps(format_cdi_claim_spec(U1, "1")))
    (specs.dynamic / "out.json").symlink_to(outside)
    (specs.dynamic / "up.json").symlink_to("../outside.json")
    (specs.dynamic / "real.data").write_text(json.dumps(format_cdi_claim_spec(U2, "2")))
    (specs.dynamic / "in.json").symlink_to("real.data")
    (specs.dynamic / "dangling.json").symlink_to("nothing-here")
    scan = specs.scan()
    assert sorted(scan.problems) == sorted(
        f"CDI spec {specs.dynamic / n}: a symbolic link to {outside}, outside {specs.dynamic}: not followed: skipped"
        for n in ("out.json", "up.json")), scan.problems
    assert set(specs.vouched()) == {f"DRA_CPUSET_{U2}"}


def test_a_directory_through_a_symbolic_link(specs: SpecDirs, fast_tmp: Path) -> None:
    """/var/run is a link to /run on most systems: a spec dir reached through a link is read, its
    in-directory links followed."""
    link = fast_tmp / "var-run-cdi"
    link.symlink_to(specs.dynamic)
    (specs.dynamic / "real.data").write_text(json.dumps(format_cdi_claim_spec(U2, "2")))
    (specs.dynamic / "in.json").symlink_to("real.data")
    scan = read_cdi_specs([str(link)])
    assert scan.problems == () and len(scan.specs) == 1


def test_too_many_entries(specs: SpecDirs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_cdi, "MAX_CDI_DIR_ENTRIES", 8)
    for i in range(9):
        specs.write(f"claim-{i}.json", format_cdi_claim_spec(f"{i:02d}", "1"))
    scan = specs.scan()
    assert scan.problems == (f"CDI spec directory {specs.dynamic}: more than 8 entries: the rest is not read (a claim "
                             "only there is refused)",)
    assert scan.files == 8 and len(specs.scan().new_problems) == 0


def test_an_unreadable_directory(specs: SpecDirs) -> None:
    specs.static.rmdir()
    specs.static.write_text("not a directory")
    assert specs.scan().problems == (f"CDI spec directory {specs.static}: cannot be read (Not a directory)",)


# -- node.cdi: the cache ---------------------------------------------------------------------------

def test_the_cache_reuses_a_file_until_it_changes(specs: SpecDirs, monkeypatch: pytest.MonkeyPatch) -> None:
    """One parse per change: an unchanged file (its key equal, its times old enough) is not read again;
    a replaced one (the driver's atomic write) or one rewritten in place is."""
    loads: List[str] = []
    real_load = node_cdi.load_spec_file
    monkeypatch.setattr(node_cdi, "load_spec_file", lambda path, every=False: loads.append(path) or real_load(path, every))
    path = str(specs.write("claim.json", format_cdi_claim_spec(U1, "1")))
    gpu = str(specs.write("gpu.json", spec(device(["A=1"]), kind="nvidia.com/gpu")))
    first = specs.vouched()
    assert sorted(loads) == sorted([path, gpu])
    assert specs.vouched() is first and specs.vouched() is first  # nothing read, nothing computed
    assert sorted(loads) == sorted([path, gpu])
    specs.write("claim.json", format_cdi_claim_spec(U1, "2"))  # replaced by rename: a new inode
    assert specs.vouched() == {f"DRA_CPUSET_{U1}": frozenset({f"DRA_CPUSET_{U1}=2"})}
    specs.write("claim.json", format_cdi_claim_spec(U1, "3"), atomic=False)  # in place, same size
    assert specs.vouched() == {f"DRA_CPUSET_{U1}": frozenset({f"DRA_CPUSET_{U1}=3"})}
    assert loads.count(path) == 3 and loads.count(gpu) == 1
    os.unlink(path)  # unprepared: gone from the cache too
    assert specs.vouched() == {} and list(specs.cache.files) == [gpu]


def test_a_file_too_recent_for_its_key_is_read_again(specs: SpecDirs) -> None:
    """File times follow a coarse clock: a rewrite within the same tick leaves the key as it was. A
    file whose times are within a second of the scan is read at every scan, until it is older."""
    path = str(specs.write("claim.json", format_cdi_claim_spec(U1, "1")))
    specs.scan(later=False)
    recent = specs.cache.files[path]
    assert not recent.settled
    specs.scan(later=False)
    assert specs.cache.files[path] is not recent and specs.cache.files[path].key == recent.key
    specs.scan()
    settled = specs.cache.files[path]
    assert settled.settled
    specs.scan()
    assert specs.cache.files[path] is settled
