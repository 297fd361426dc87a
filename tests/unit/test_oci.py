"""The OCI state on stdin and the config.json fields the hook reads."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Dict

import pytest

from mixed_cpus_hook.core.errors import CpuListError, SpecError, StateError
from mixed_cpus_hook.node.oci import MAX_STATE_BYTES, Spec, State, load_spec, load_state, parse_spec, parse_state

RUNC = {"ociVersion": "1.0.2-dev", "id": "abc123", "status": "creating", "pid": 4242, "bundle": "/run/b/abc123",
        "annotations": {"io.kubernetes.container.name": "app"}}


def state(**changes: Any) -> Dict[str, Any]:
    doc = dict(RUNC)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


GOOD_STATES = [
    pytest.param(RUNC, State("abc123", 4242, "/run/b/abc123", {"io.kubernetes.container.name": "app"}, True),
                 id="runc"),
    pytest.param({"ociVersion": "1.0", "id": "c1", "status": "created", "pid": 7, "bundle": "/b", "root": "/run/crun",
                  "annotations": {}}, State("c1", 7, "/b", {}, True), id="crun-with-root"),
    pytest.param(state(annotations=None), State("abc123", 4242, "/run/b/abc123", {}, False),
                 id="no-annotations-key"),
    pytest.param(state(pid=None), State("abc123", 0, "/run/b/abc123", RUNC["annotations"], True), id="no-pid"),
    pytest.param(state(pid=0), State("abc123", 0, "/run/b/abc123", RUNC["annotations"], True), id="pid-zero"),
    pytest.param(state(status="stopped"), State("abc123", 4242, "/run/b/abc123", RUNC["annotations"], True),
                 id="status-never-matters"),
    pytest.param(state(id="a" * 242), State("a" * 242, 4242, "/run/b/abc123", RUNC["annotations"], True),
                 id="longest-id"),
    pytest.param(state(id="..."), State("...", 4242, "/run/b/abc123", RUNC["annotations"], True),
                 id="three-dots-is-a-name"),
]


@pytest.mark.parametrize("doc,expected", GOOD_STATES)
def test_parse_state(doc: Dict[str, Any], expected: State) -> None:
    assert parse_state(json.dumps(doc)) == expected


BAD_STATES = [
    pytest.param("{", "not JSON", id="not-json"),
    pytest.param("", "not JSON", id="empty"),
    pytest.param("[]", "must be a JSON object, not an array", id="array"),
    pytest.param("null", "must be a JSON object, not null", id="null"),
    pytest.param(state(id=None), "required field 'id' is missing", id="no-id"),
    pytest.param(state(ociVersion=None), "required field 'ociVersion' is missing", id="no-oci-version"),
    pytest.param(state(bundle=None), "required field 'bundle' is missing", id="no-bundle"),
    pytest.param(state(id=5), "field 'id' must be a string, not an integer", id="id-number"),
    pytest.param(state(id="../etc"), "field 'id': '../etc' is not a plain container id", id="id-dotdot-path"),
    pytest.param(state(id=".."), "field 'id': '..' is not a plain container id", id="id-dotdot"),
    pytest.param(state(id="."), "field 'id': '.' is not a plain container id", id="id-dot"),
    pytest.param(state(id="a/b"), "field 'id': 'a/b' is not a plain container id", id="id-slash"),
    pytest.param(state(id=""), "field 'id': '' is not a plain container id", id="id-empty"),
    pytest.param(state(id="abc\n"), "field 'id': 'abc\\n' is not a plain container id", id="id-trailing-newline"),
    pytest.param(state(id="a" * 243), "field 'id': 243 characters, more than the 242 a file name in the state"
                 " directory can hold", id="id-too-long"),
    pytest.param(state(id="caf\u00e9"), "is not a plain container id", id="id-non-ascii"),
    pytest.param(state(pid=-1), "field 'pid': -1 is not a process id", id="pid-negative"),
    pytest.param(state(pid="12"), "field 'pid' must be an integer, not a string", id="pid-string"),
    pytest.param(state(pid=True), "field 'pid' must be an integer, not a boolean", id="pid-boolean"),
    pytest.param(state(pid=4194305), "field 'pid': 4194305 is not a process id", id="pid-too-large"),
    pytest.param(state(bundle="run/b"), "field 'bundle' must be an absolute path, not 'run/b'", id="bundle-relative"),
    pytest.param(state(bundle=""), "field 'bundle' must be an absolute path", id="bundle-empty"),
    pytest.param(state(bundle="/b\0"), "field 'bundle' must be an absolute path", id="bundle-nul"),
    pytest.param(state(status=1), "field 'status' must be a string", id="status-number"),
    pytest.param(state(annotations=["a"]), "field 'annotations' must be an object, not an array", id="annotations-list"),
    pytest.param(state(annotations={"a": 1}), "field 'annotations': value of 'a' must be a string, not an integer",
                 id="annotation-value-number"),
]


@pytest.mark.parametrize("doc,message", BAD_STATES)
def test_parse_state_malformed(doc: Any, message: str) -> None:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(StateError) as info:
        parse_state(text, "stdin")
    assert message in info.value.message
    assert info.value.where == "stdin"
    assert "\n" not in str(info.value)


def test_load_state_from_a_stream() -> None:
    assert load_state(io.StringIO(json.dumps(RUNC)), "f.json").id == "abc123"


def test_load_state_too_large() -> None:
    text = json.dumps(state(annotations={"x": "y" * MAX_STATE_BYTES}))
    with pytest.raises(StateError, match=f"larger than {MAX_STATE_BYTES} bytes"):
        load_state(io.StringIO(text))


def test_load_state_unreadable_stream() -> None:
    class Broken(io.StringIO):
        def read(self, *args: Any) -> str:
            raise OSError(5, "Input/output error")

    with pytest.raises(StateError, match="cannot read the state"):
        load_state(Broken())


def spec(cpu: Any = None, cgroups_path: Any = "/kubepods/pod1/crio-abc", annotations: Any = None,
         linux: Any = "default") -> str:
    doc: Dict[str, Any] = {"ociVersion": "1.0.2"}
    if linux == "default":
        linux = {"cgroupsPath": cgroups_path} if cgroups_path is not None else {}
        if cpu is not None:
            linux["resources"] = {"cpu": cpu}
    if linux is not None:
        doc["linux"] = linux
    if annotations is not None:
        doc["annotations"] = annotations
    return json.dumps(doc)


GOOD_SPECS = [
    pytest.param(spec({"cpus": "2-3", "quota": 200000, "period": 100000}, annotations={"a": "b"}),
                 Spec(frozenset({2, 3}), 200000, 100000, "/kubepods/pod1/crio-abc", {"a": "b"}), id="full"),
    pytest.param(spec(), Spec(None, None, None, "/kubepods/pod1/crio-abc", {}), id="no-resources"),
    pytest.param(spec({"cpus": ""}), Spec(None, None, None, "/kubepods/pod1/crio-abc", {}), id="empty-cpus"),
    pytest.param(spec({"quota": -1, "period": 100000}), Spec(None, -1, 100000, "/kubepods/pod1/crio-abc", {}),
                 id="unlimited-quota"),
    pytest.param(spec(cgroups_path="kubepods-pod1.slice:crio:abc"),
                 Spec(None, None, None, "kubepods-pod1.slice:crio:abc", {}), id="systemd-cgroups-path"),
    pytest.param(spec(cgroups_path=""), Spec(None, None, None, None, {}), id="empty-cgroups-path"),
    pytest.param(spec(linux=None), Spec(None, None, None, None, {}), id="no-linux"),
    pytest.param('{"process": {"args": ["sh"]}, "linux": {"resources": {"cpu": {"cpus": "1", "shares": 2}}}}',
                 Spec(frozenset({1}), None, None, None, {}), id="other-fields-ignored"),
]


@pytest.mark.parametrize("text,expected", GOOD_SPECS)
def test_parse_spec(text: str, expected: Spec) -> None:
    assert parse_spec(text, "/b/config.json") == expected


BAD_SPECS = [
    pytest.param("{", SpecError, "not JSON", id="not-json"),
    pytest.param("[]", SpecError, "must be a JSON object", id="array"),
    pytest.param(spec(linux=[]), SpecError, "field 'linux' must be an object", id="linux-array"),
    pytest.param(spec(cpu="2-3"), SpecError, "field 'linux.resources.cpu' must be an object", id="cpu-string"),
    pytest.param(spec({"cpus": 3}), SpecError, "field 'linux.resources.cpu.cpus' must be a string", id="cpus-number"),
    pytest.param(spec({"cpus": "3-1"}), CpuListError, "range '3-1' is reversed", id="cpus-reversed"),
    pytest.param(spec({"cpus": "a"}), CpuListError, "bad item 'a'", id="cpus-letter"),
    pytest.param(spec({"quota": "200000"}), SpecError, "field 'linux.resources.cpu.quota' must be an integer",
                 id="quota-string"),
    pytest.param(spec({"quota": 1.5}), SpecError, "field 'linux.resources.cpu.quota' must be an integer",
                 id="quota-float"),
    pytest.param(spec({"period": True}), SpecError, "field 'linux.resources.cpu.period' must be an integer",
                 id="period-boolean"),
    pytest.param(spec({"period": 0}), SpecError, "field 'linux.resources.cpu.period' must be positive, not 0",
                 id="period-zero"),
    pytest.param(spec(cgroups_path=5), SpecError, "field 'linux.cgroupsPath' must be a string", id="cgroups-path-number"),
    pytest.param(spec(cgroups_path="/a\0b"), SpecError, "field 'linux.cgroupsPath' must be a string",
                 id="cgroups-path-nul"),
    pytest.param(spec(annotations={"a": 1}), SpecError, "field 'annotations' must map strings to strings",
                 id="annotation-number"),
    pytest.param(spec(annotations=["a"]), SpecError, "field 'annotations' must map strings to strings",
                 id="annotations-array"),
]


@pytest.mark.parametrize("text,error,message", BAD_SPECS)
def test_parse_spec_malformed(text: str, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        parse_spec(text, "/b/config.json")
    assert message in info.value.message
    assert info.value.where.startswith("/b/config.json")


def test_cpulist_error_names_the_field() -> None:
    with pytest.raises(CpuListError) as info:
        parse_spec(spec({"cpus": "a"}), "/b/config.json")
    assert info.value.where == "/b/config.json: linux.resources.cpu.cpus"


def test_load_spec(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(spec({"cpus": "4"}))
    assert load_spec(str(tmp_path)).cpus == frozenset({4})


LOAD_ERRORS = [
    pytest.param(None, "bundle has no config.json", id="missing"),
    pytest.param("dir", "cannot read", id="a-directory"),
    pytest.param(b"\xff{}", "cannot read", id="not-utf8"),
    pytest.param("not json", "not JSON", id="not-json"),
]


@pytest.mark.parametrize("content,message", LOAD_ERRORS)
def test_load_spec_errors(tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "config.json"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(SpecError) as info:
        load_spec(str(tmp_path))
    assert info.value.message.startswith(message)
    assert info.value.where == str(path)
