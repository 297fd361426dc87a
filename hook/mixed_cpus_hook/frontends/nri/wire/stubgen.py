"""Writes the ``.pyi`` of a module whose protobuf message classes are built at import time from a table.

Without it mypy sees ``api.Container`` as Any (protobuf makes the class at run time) and checks
nothing in the NRI layer. The stub is computed from the module itself: every message of its
MESSAGES table becomes a ``Message`` subclass with its fields (scalars as attributes; messages,
repeated fields and maps as read-only properties, since protobuf refuses assignment to them), a
keyword-only constructor, and HasField / ClearField taking only the field names that exist
(HasField only a message field's: proto3 has no presence for scalars). Every other public name
is declared too: annotated constants, functions with their annotations, re-exports, aliases of
message classes. A name whose type it cannot tell stops it (annotate the name) rather than
becoming Any.

    python -m mixed_cpus_hook.frontends.nri.wire.stubgen [MODULE] [-o PATH] [--check]   (make stubs)

tests/unit/nri/test_stubs.py fails when a shipped stub differs from what this computes.
"""

from __future__ import annotations
import __future__

import argparse
import ast
import builtins
import importlib
import inspect
import keyword
import sys
import textwrap
import typing
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from .protodesc import MAP, parse_kind

DEFAULT_MODULE = "mixed_cpus_hook.frontends.nri.wire.api"
PYTHON_SCALARS = {"string": "str", "bytes": "bytes", "bool": "bool", "int32": "int", "int64": "int",
                  "uint32": "int", "uint64": "int"}
CONTAINERS = "google.protobuf.internal.containers"
# Where the names a stub may use come from (typing names come from typing).
PROTOBUF_NAMES = {"Message": "google.protobuf.message", "Descriptor": "google.protobuf.descriptor",
                  "ScalarMap": CONTAINERS, "RepeatedScalarFieldContainer": CONTAINERS,
                  "RepeatedCompositeFieldContainer": CONTAINERS}
LINE = 120


class StubError(ValueError):
    """The module has a name, or a field kind, whose type the stub cannot say."""


class FieldType(NamedTuple):
    """How one field of a table looks to Python."""

    read: str  # the type of ``msg.field``
    init: str  # what the constructor accepts for it
    assignable: bool  # a plain attribute (scalars), else a read-only property
    has_presence: bool  # HasField accepts it (a singular message field)
    comment: str = ""


def compute_field_type(kind: str, messages: Sequence[str], enums: Sequence[str]) -> FieldType:
    """The Python types of a field of table kind ``kind`` (see protodesc.py)."""
    repeated, base = parse_kind(kind)
    if base == MAP:
        return FieldType("ScalarMap[str, str]", "Mapping[str, str]", False, False)
    if base in PYTHON_SCALARS or base in enums:
        scalar = PYTHON_SCALARS.get(base, "int")
        comment = f"enum {base}" if base in enums else ""
        if repeated:
            return FieldType(f"RepeatedScalarFieldContainer[{scalar}]", f"Iterable[{scalar}]", False, False, comment)
        return FieldType(scalar, scalar, True, False, comment)
    if base in messages:
        if repeated:
            return FieldType(f"RepeatedCompositeFieldContainer[{base}]", f"Iterable[{base}]", False, False)
        return FieldType(base, base, False, True)
    raise StubError(f"field kind {kind!r}: not a scalar, a map, nor a message or enum of the table")


def _format_literal_method(method: str, names: Sequence[str], returns: str) -> List[str]:
    """``def HasField(self, field_name: Literal["a", "b"]) -> bool: ...``, wrapped under LINE."""
    literal = ", ".join(f'"{n}"' for n in names)
    line = f"    def {method}(self, field_name: Literal[{literal}]) -> {returns}: ..."
    if len(line) <= LINE:
        return [line]
    wrapped = textwrap.wrap(literal, LINE - 12, break_long_words=False, break_on_hyphens=False)
    return ([f"    def {method}(", "        self,", "        field_name: Literal["]
            + [f"            {part}" for part in wrapped] + ["        ],", f"    ) -> {returns}: ..."])


def format_message_class(name: str, fields: Sequence[Tuple[str, int, str]], messages: Sequence[str],
                         enums: Sequence[str]) -> List[str]:
    """The stub lines of one message class."""
    lines = [f"class {name}(Message):", "    DESCRIPTOR: Descriptor"]
    params: List[str] = []
    presence: List[str] = []
    for field, _number, kind in fields:
        if keyword.iskeyword(field):
            raise StubError(f"{name}.{field}: a Python keyword is no attribute name")
        ftype = compute_field_type(kind, messages, enums)
        comment = f"  # {ftype.comment}" if ftype.comment else ""
        if ftype.assignable:
            lines.append(f"    {field}: {ftype.read}{comment}")
        else:
            lines += ["    @property", f"    def {field}(self) -> {ftype.read}: ...{comment}"]
        params.append(f"{field}: Optional[{ftype.init}] = ...")
        if ftype.has_presence:
            presence.append(field)
    if params:
        lines += ["    def __init__(", "        self,", "        *,"] + [f"        {p}," for p in params]
        lines.append("    ) -> None: ...")
    else:
        lines.append("    def __init__(self) -> None: ...")
    if presence:
        lines += _format_literal_method("HasField", presence, "bool")
    if fields:
        lines += _format_literal_method("ClearField", [f for f, _, _ in fields], "None")
    return lines


def _annotation_text(annotation: Any, where: str) -> str:
    if annotation is inspect.Parameter.empty:
        raise StubError(f"{where}: no annotation")
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def format_signature(func: Any, where: str) -> str:
    """``(a: int, *rest: str) -> bool`` of a function, from its annotations (defaults become ``...``)."""
    sig = inspect.signature(func)
    parts: List[str] = []
    star = False
    for param in sig.parameters.values():
        text = param.name
        if param.kind is param.VAR_POSITIONAL:
            text, star = "*" + text, True
        elif param.kind is param.VAR_KEYWORD:
            text = "**" + text
        elif param.kind is param.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        text += ": " + _annotation_text(param.annotation, f"{where}({param.name})")
        if param.default is not param.empty:
            text += " = ..."
        parts.append(text)
        if param.kind is param.POSITIONAL_ONLY and (len(parts) == len(sig.parameters)
                                                    or _next_kind(sig, param) is not param.POSITIONAL_ONLY):
            parts.append("/")
    return f"({', '.join(parts)}) -> {_annotation_text(sig.return_annotation, where + ' return')}"


def _next_kind(sig: inspect.Signature, param: inspect.Parameter) -> Any:
    names = list(sig.parameters)
    return sig.parameters[names[names.index(param.name) + 1]].kind


def _names_read(tree: ast.AST) -> Set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _names_in(annotation: str) -> Set[str]:
    """The top-level names an annotation expression uses: ``Dict[str, pb2.X]`` -> {Dict, str, pb2}."""
    return _names_read(ast.parse(annotation, mode="eval"))


def _names_in_lines(lines: Sequence[str]) -> Set[str]:
    """The names stub lines read (annotations, bases, decorators; not the names they declare)."""
    return _names_read(ast.parse("\n".join(lines)))


def _is_typing_name(name: str, value: Any) -> bool:
    return getattr(typing, name, None) is value and not inspect.ismodule(value)


def _relative(target: str, package: str) -> str:
    """``target`` as seen from a module of ``package`` (relative inside it, else absolute)."""
    return "." + target[len(package) + 1:] if target.startswith(package + ".") else target


class _Stub:
    """The parts of a stub, gathered from a module's namespace."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.package = module.__name__.rpartition(".")[0]
        self.messages: Dict[str, List[Tuple[str, int, str]]] = dict(getattr(module, "MESSAGES", {}))
        self.enums: Dict[str, Dict[str, int]] = dict(getattr(module, "ENUMS", {}))
        self.classes = {id(getattr(module, name, None)): name for name in self.messages}
        missing = [name for name in self.messages if not inspect.isclass(getattr(module, name, None))]
        if missing:
            raise StubError(f"{module.__name__}: MESSAGES has {', '.join(missing)}, which it does not export")
        self.declarations: List[str] = []  # constants and functions, in the module's order
        self.aliases: List[str] = []
        self.reexports: Dict[str, List[str]] = {}  # from-module -> names
        self.annotation_names: Set[str] = set()

    def add(self, name: str, value: Any) -> None:
        """Declare one public name of the module."""
        where = f"{self.module.__name__}.{name}"
        annotations = vars(self.module).get("__annotations__", {})
        if self.classes.get(id(value)) == name or inspect.ismodule(value) or _is_typing_name(name, value):
            return  # a message class (declared from the table), a module, a typing import
        if value is __future__.annotations:
            return
        if id(value) in self.classes:
            self.aliases.append(f"{name} = {self.classes[id(value)]}")
        elif (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ != self.module.__name__:
            self.reexports.setdefault(_relative(value.__module__, self.package), []).append(name)
        elif inspect.isfunction(value):
            signature = format_signature(value, where)
            self.declarations.append(f"def {name}{signature}: ...")
            self.annotation_names |= _names_in_lines([f"def f{signature}: ..."])
        elif name in annotations:
            text = _annotation_text(annotations[name], where)
            self.declarations.append(f"{name}: {text}")
            self.annotation_names |= _names_in(text)
        else:
            raise StubError(f"{where}: annotate it ({name}: <type> = ...) so that the stub can say its type")

    def format_imports(self, body: Sequence[str]) -> List[str]:
        """The import lines for every name the stub's body uses."""
        used = _names_in_lines(body) | self.annotation_names
        local = set(self.messages) | {a.split(" = ")[0] for a in self.aliases} | {"self"}
        typing_names = sorted(n for n in used if n in typing.__all__ and n not in local)
        lines = [f"from typing import {', '.join(typing_names)}"] if typing_names else []
        third: Dict[str, List[str]] = {}
        for name in sorted(used - set(typing_names) - local):
            if hasattr(builtins, name):
                continue
            value = getattr(self.module, name, None)
            if name in PROTOBUF_NAMES:
                third.setdefault(PROTOBUF_NAMES[name], []).append(name)
            elif inspect.ismodule(value) and value.__name__.endswith("." + name):
                third.setdefault(value.__name__.rpartition(".")[0], []).append(name)
            else:
                raise StubError(f"{self.module.__name__}: the stub uses {name!r}, which it cannot import")
        if third:
            lines.append("")
            lines += [f"from {mod} import {', '.join(names)}" for mod, names in sorted(third.items())]
        if self.reexports:
            lines.append("")
            lines += [f"from {mod} import {', '.join(f'{n} as {n}' for n in names)}"
                      for mod, names in sorted(self.reexports.items())]
        return lines


def compute_stub(module: ModuleType) -> str:
    """The ``.pyi`` text of ``module`` (pure given the module: same module, same text)."""
    stub = _Stub(module)
    for name, value in list(vars(module).items()):
        if not name.startswith("_"):
            stub.add(name, value)
    body = list(stub.declarations)
    for name, fields in stub.messages.items():
        body += [""] + format_message_class(name, fields, tuple(stub.messages), tuple(stub.enums))
    if stub.aliases:
        body += [""] + stub.aliases
    source = module.__name__.rpartition(".")[2] + ".py"
    header = [f"# Generated from {source}'s MESSAGES and ENUMS by stubgen.py (`make stubs`): do not edit.",
              "# tests/unit/nri/test_stubs.py fails when it is stale.", ""]
    return "\n".join(header + stub.format_imports(body) + [""] + body) + "\n"


def stub_path(module: ModuleType) -> Path:
    """Where a module's stub lives: next to it, ``.pyi`` for ``.py``."""
    return Path(str(module.__file__)).with_suffix(".pyi")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="stubgen", description=__doc__.splitlines()[0])
    parser.add_argument("module", nargs="?", default=DEFAULT_MODULE)
    parser.add_argument("-o", "--output", help="where to write (default: next to the module)")
    parser.add_argument("--check", action="store_true", help="only say whether the stub is up to date (exit 1 if not)")
    args = parser.parse_args(argv)
    module = importlib.import_module(args.module)
    text = compute_stub(module)
    path = Path(args.output) if args.output else stub_path(module)
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path}: stale; run `make stubs`", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
