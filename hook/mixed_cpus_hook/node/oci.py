"""The OCI state a runtime sends a hook, and the few config.json fields the hook needs.

``parse_*`` take text and return plain data; ``load_*`` read a path or a stream.
"""

from __future__ import annotations

import json
import os

from ..core.cpuset import parse_cpulist
from ..core.errors import SpecError, StateError
from ..core.validate import check_state
from .files import FileRefused, read_regular_file

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import IO, Any, Dict, FrozenSet, NamedTuple, Optional, Type

    from ..core.errors import HookError
else:
    from ..core.compat import NamedTuple

MAX_STATE_BYTES = 1 << 20
# config.json carries the container's whole environment (envFrom a 1 MiB ConfigMap is legal),
# so its cap is larger than the hook's own files'; it is still read only when a regular file.
MAX_SPEC_BYTES = 16 << 20


class State(NamedTuple):
    """OCI runtime state (runc sends status "creating", crun "created"; we never branch on it)."""

    id: str
    pid: int
    bundle: str
    annotations: Dict[str, str]
    has_annotations: bool


class Spec(NamedTuple):
    """What the hook uses from the bundle's config.json."""

    cpus: Optional[FrozenSet[int]]
    quota: Optional[int]
    period: Optional[int]
    cgroups_path: Optional[str]
    annotations: Dict[str, str]


def _loads(text: str, where: str, err: Type[HookError]) -> Any:
    """json.loads with one-line errors; nesting deeper than the interpreter's recursion limit
    (``[[[[...``, a few kilobytes) raises RecursionError in the decoder, caught here too."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise err(f"not JSON ({exc})", where) from None
    except RecursionError:
        raise err("not JSON the hook accepts (nested too deeply)", where) from None


def parse_state(text: str, where: str = "stdin") -> State:
    """Parse and validate the state JSON; errors name the field."""
    doc = _loads(text, where, StateError)
    check_state(doc, where, StateError)
    ann = doc.get("annotations")
    return State(doc["id"], doc.get("pid") or 0, doc["bundle"], ann or {}, ann is not None)


def load_state(stream: IO[str], where: str = "stdin") -> State:
    """Read the state from a stream (stdin for a hook, a file for a manual run)."""
    try:
        text = stream.read(MAX_STATE_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise StateError(f"cannot read the state: {exc}", where) from None
    if len(text) > MAX_STATE_BYTES:
        raise StateError(f"state is larger than {MAX_STATE_BYTES} bytes", where)
    return parse_state(text, where)


def _get(doc: Any, *keys: str) -> Any:
    """``doc[k1][k2]...``, or None where a level is missing or not an object."""
    value = doc
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _int_or_none(value: Any, field: str, where: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"field {field!r} must be an integer, not {value!r}", where)
    return value


def parse_spec(text: str, where: str) -> Spec:
    """Parse the fields of config.json the hook needs; other fields are the runtime's business."""
    doc = _loads(text, where, SpecError)
    if not isinstance(doc, dict):
        raise SpecError("must be a JSON object", where)
    linux = doc.get("linux")
    if linux is not None and not isinstance(linux, dict):
        raise SpecError("field 'linux' must be an object", where)
    cpu = _get(doc, "linux", "resources", "cpu")
    if cpu is not None and not isinstance(cpu, dict):
        raise SpecError("field 'linux.resources.cpu' must be an object", where)
    cpu = cpu or {}
    cpus_text = cpu.get("cpus")
    if cpus_text is not None and not isinstance(cpus_text, str):
        raise SpecError("field 'linux.resources.cpu.cpus' must be a string", where)
    cpus = parse_cpulist(cpus_text, f"{where}: linux.resources.cpu.cpus") if cpus_text else None
    quota = _int_or_none(cpu.get("quota"), "linux.resources.cpu.quota", where)
    period = _int_or_none(cpu.get("period"), "linux.resources.cpu.period", where)
    if period is not None and period <= 0:
        raise SpecError(f"field 'linux.resources.cpu.period' must be positive, not {period}", where)
    cgroups_path = _get(doc, "linux", "cgroupsPath")
    if cgroups_path is not None and (not isinstance(cgroups_path, str) or "\0" in cgroups_path):
        raise SpecError("field 'linux.cgroupsPath' must be a string", where)
    ann = doc.get("annotations") or {}
    if not isinstance(ann, dict) or not all(isinstance(v, str) for v in ann.values()):
        raise SpecError("field 'annotations' must map strings to strings", where)
    return Spec(cpus, quota, period, cgroups_path or None, ann)


def load_spec(bundle: str) -> Spec:
    """Read ``<bundle>/config.json``; the bundle comes from validated state (an absolute path)."""
    path = os.path.join(bundle, "config.json")
    try:
        text = read_regular_file(path, MAX_SPEC_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise SpecError("bundle has no config.json", path) from None
    except FileRefused as exc:
        raise SpecError(str(exc), path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", path) from None
    return parse_spec(text, path)
