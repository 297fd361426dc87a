"""wire/api.pyi: generated from api.py's tables, up to date, true to the run-time module, and useful to mypy.

The last table runs mypy (the Python 3.11 dev venv has it; RHEL 9's venv does not, and skips it)
on small files that misuse the NRI messages, and expects each misuse reported.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Dict, List

import pytest

from mixed_cpus_hook.frontends.nri.wire import api, stubgen
from mixed_cpus_hook.frontends.nri.wire.stubgen import FieldType, StubError, compute_field_type, compute_stub

REPO = Path(__file__).resolve().parents[3]
STUB = stubgen.stub_path(api)


def test_shipped_stub_is_current() -> None:
    assert STUB.read_text(encoding="utf-8") == compute_stub(api), f"{STUB} is stale: run `make stubs` and commit it"


def test_check_mode_says_current_and_stale(tmp_path: Path) -> None:
    assert stubgen.main(["--check"]) == 0
    stale = tmp_path / "api.pyi"
    stale.write_text("# old\n")
    assert stubgen.main(["--check", "-o", str(stale)]) == 1


def top_level_names(stub: str) -> List[str]:
    names = []
    for node in ast.parse(stub).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.append(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.ImportFrom):
            names += [a.asname for a in node.names if a.asname]  # `x as x`: a re-export
    return names


def test_stub_promises_only_what_the_module_has() -> None:
    """Every name the stub declares exists at run time (mypy would otherwise pass code that fails)."""
    names = top_level_names(STUB.read_text(encoding="utf-8"))
    assert set(api.MESSAGES) <= set(names)
    assert [n for n in names if not hasattr(api, n)] == []


def test_stub_declares_every_public_name_of_the_module() -> None:
    public = {n for n, v in vars(api).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    public -= {"annotations"} | {n for n in public if getattr(typing, n, None) is vars(api)[n]}  # __future__, typing
    assert public - set(top_level_names(STUB.read_text(encoding="utf-8"))) == set()


def test_every_field_of_every_message_is_typed() -> None:
    classes = {node.name: node for node in ast.parse(STUB.read_text(encoding="utf-8")).body
               if isinstance(node, ast.ClassDef)}
    for message, fields in api.MESSAGES.items():
        declared = {n.target.id for n in classes[message].body
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        declared |= {n.name for n in classes[message].body if isinstance(n, ast.FunctionDef) and n.decorator_list}
        assert declared - {"DESCRIPTOR"} == {f for f, _, _ in fields}, message


MESSAGES = ("PodSandbox", "Container")
ENUMS = ("ContainerState",)


@pytest.mark.parametrize("kind,expected", [
    pytest.param("string", FieldType("str", "str", True, False), id="string"),
    pytest.param("bytes", FieldType("bytes", "bytes", True, False), id="bytes"),
    pytest.param("bool", FieldType("bool", "bool", True, False), id="bool"),
    pytest.param("uint64", FieldType("int", "int", True, False), id="uint64"),
    pytest.param("ContainerState", FieldType("int", "int", True, False, "enum ContainerState"), id="enum"),
    pytest.param("PodSandbox", FieldType("PodSandbox", "PodSandbox", False, True), id="message"),
    pytest.param("*string", FieldType("RepeatedScalarFieldContainer[str]", "Iterable[str]", False, False),
                 id="repeated-scalar"),
    pytest.param("*Container", FieldType("RepeatedCompositeFieldContainer[Container]", "Iterable[Container]",
                                         False, False), id="repeated-message"),
    pytest.param("map", FieldType("ScalarMap[str, str]", "Mapping[str, str]", False, False), id="map"),
])
def test_field_types(kind: str, expected: FieldType) -> None:
    assert compute_field_type(kind, MESSAGES, ENUMS) == expected


def synthetic_module(source: str) -> types.ModuleType:
    """A module named like a sibling of api, run from ``source``."""
    module = types.ModuleType("mixed_cpus_hook.frontends.nri.wire.synthetic")
    module.__file__ = "/nonexistent/synthetic.py"
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - the test's own source
    return module


@pytest.mark.parametrize("source,error", [
    pytest.param("X = 1\n", "annotate it", id="unannotated-constant"),
    pytest.param("def f(x):\n    return x\n", "no annotation", id="unannotated-function"),
    pytest.param("MESSAGES = {'M': []}\n", "does not export", id="message-not-exported"),
    pytest.param("class M:\n    pass\nMESSAGES: dict = {'M': [('a', 1, 'Nope')]}\n", "field kind 'Nope'",
                 id="unknown-kind"),
    pytest.param("class M:\n    pass\nMESSAGES: dict = {'M': [('def', 1, 'string')]}\n", "Python keyword",
                 id="keyword-field"),
])
def test_what_the_stub_cannot_type_is_an_error(source: str, error: str) -> None:
    with pytest.raises(StubError, match=error):
        compute_stub(synthetic_module("from __future__ import annotations\n" + source))


def test_synthetic_module_stub() -> None:
    """Constants, functions, re-exports and aliases, beside a message class."""
    module = synthetic_module(
        "from __future__ import annotations\n"
        "from typing import Dict, Optional\n"
        "from mixed_cpus_hook.frontends.nri.wire.protodesc import parse_kind\n"
        "class Item:\n    pass\n"
        "MESSAGES: Dict[str, list] = {'Item': [('name', 1, 'string'), ('sub', 2, 'Item'), ('tags', 3, 'map')]}\n"
        "ENUMS: Dict[str, Dict[str, int]] = {}\n"
        "Alias = Item\n"
        "def pick(name: str, *, default: Optional[int] = None) -> int:\n    return 0\n")
    assert compute_stub(module) == '''\
# Generated from synthetic.py's MESSAGES and ENUMS by stubgen.py (`make stubs`): do not edit.
# tests/unit/nri/test_stubs.py fails when it is stale.

from typing import Dict, Literal, Mapping, Optional

from google.protobuf.descriptor import Descriptor
from google.protobuf.internal.containers import ScalarMap
from google.protobuf.message import Message

from .protodesc import parse_kind as parse_kind

MESSAGES: Dict[str, list]
ENUMS: Dict[str, Dict[str, int]]
def pick(name: str, *, default: Optional[int] = ...) -> int: ...

class Item(Message):
    DESCRIPTOR: Descriptor
    name: str
    @property
    def sub(self) -> Item: ...
    @property
    def tags(self) -> ScalarMap[str, str]: ...
    def __init__(
        self,
        *,
        name: Optional[str] = ...,
        sub: Optional[Item] = ...,
        tags: Optional[Mapping[str, str]] = ...,
    ) -> None: ...
    def HasField(self, field_name: Literal["sub"]) -> bool: ...
    def ClearField(self, field_name: Literal["name", "sub", "tags"]) -> None: ...

Alias = Item
'''


# ---- mypy with the stub -----------------------------------------------------------------------------------------

PRELUDE = "from mixed_cpus_hook.frontends.nri.wire import api\n"
# name -> (snippet, the error mypy must report; "" means none at all)
SNIPPETS: Dict[str, tuple] = {
    "correct-use": (
        "req = api.CreateContainerRequest.FromString(b'')\n"
        "name: str = req.container.name\n"
        "cpus: str = req.container.linux.resources.cpu.cpus\n"
        "quota: int = req.container.linux.resources.cpu.quota.value\n"
        "value: str = req.pod.annotations.get('a', '')\n"
        "resp = api.CreateContainerResponse(adjust=api.ContainerAdjustment(annotations={'k': 'v'}))\n"
        "resp.adjust.env.add(key='K', value='V')\n"
        "resp.update.append(api.ContainerUpdate(container_id='c', ignore_failure=True))\n"
        "resp.adjust.linux.resources.unified['cpu.idle'] = '0'\n"
        "resp.adjust.linux.resources.cpu.SetInParent()\n"
        "present: bool = req.HasField('pod')\n"
        "copy = api.Container()\n"
        "copy.CopyFrom(req.container)\n"
        "data: bytes = resp.SerializeToString()\n"
        "mask: int = api.event_mask('CREATE_CONTAINER') | api.EVENTS['STOP_CONTAINER']\n"
        "empty = api.ShutdownRequest()\n",
        ""),
    "misspelt-field": ("api.Container().nmae\n", 'has no attribute "nmae"'),
    "misspelt-keyword": ("api.PodSandbox(nmae='p')\n", 'Unexpected keyword argument "nmae"'),
    "wrong-type-keyword": ("api.ContainerUpdate(container_id=1)\n",
                           'Argument "container_id" to "ContainerUpdate" has incompatible type "int"'),
    "wrong-type-assignment": ("c = api.Container()\nc.pid = 'one'\n", "Incompatible types in assignment"),
    "message-field-is-read-only": ("r = api.CreateContainerRequest()\nr.pod = api.PodSandbox()\n",
                                   'Property "pod" defined in "CreateContainerRequest" is read-only'),
    "wrong-message-keyword": ("api.CreateContainerResponse(adjust=api.ContainerUpdate())\n",
                              'Argument "adjust" to "CreateContainerResponse" has incompatible type'),
    "wrong-repeated-element": ("api.UpdateContainerResponse().update.append(api.Container())\n",
                               'Argument 1 to "append" of "RepeatedCompositeFieldContainer"'),
    "wrong-map-value": ("api.PodSandbox().labels['k'] = 1\n", "Incompatible types in assignment"),
    "hasfield-on-a-scalar": ("api.Container().HasField('id')\n", 'Argument 1 to "HasField" of "Container"'),
    "copy-from-another-message": ("api.Container().CopyFrom(api.PodSandbox())\n", 'Argument 1 to "CopyFrom"'),
    "fromstring-keeps-the-class": ("x: api.PodSandbox = api.Container.FromString(b'')\n",
                                   "Incompatible types in assignment"),
    "unknown-message": ("api.NoSuchMessage()\n", 'Module has no attribute "NoSuchMessage"'),
}


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, List[str]]:
    """One mypy run over every snippet (a file each): snippet name -> its error lines."""
    pytest.importorskip("mypy", reason="mypy is in the Python 3.11 dev venv only")
    root = tmp_path_factory.mktemp("snippets")
    for name, (body, _error) in SNIPPETS.items():
        (root / (name.replace("-", "_") + ".py")).write_text(PRELUDE + body)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
                           "--cache-dir", str(root / ".mypy_cache"), "--no-error-summary", str(root)],
                          capture_output=True, text=True, cwd=str(REPO), timeout=600)
    assert proc.returncode in (0, 1), proc.stderr + proc.stdout
    errors: Dict[str, List[str]] = {name: [] for name in SNIPPETS}
    for line in proc.stdout.splitlines():
        match = re.match(r".*/(\w+)\.py:\d+: error: (.*)", line)
        if match:
            errors[match.group(1).replace("_", "-")].append(match.group(2))
    return errors


@pytest.mark.parametrize("name", list(SNIPPETS))
def test_mypy_with_the_stub(name: str, mypy_errors: Dict[str, List[str]]) -> None:
    expected = SNIPPETS[name][1]
    if not expected:
        assert mypy_errors[name] == []
    else:
        assert any(expected in e for e in mypy_errors[name]), mypy_errors[name]
