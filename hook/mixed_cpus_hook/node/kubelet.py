"""kubelet's CPU manager checkpoint (/var/lib/kubelet/cpu_manager_state): who owns which CPUs.

kubelet's static policy records every exclusive assignment there, so it is the truth about a
container's exclusive CPUs; a cpuset found in a cgroup may have been widened by anyone.
The format is kubernetes pkg/kubelet/cm/cpumanager/state/checkpoint.go:

- V2 (kubelet 1.18+): ``{"policyName", "defaultCpuSet", "entries": {pod uid: {container name:
  cpulist}}, "checksum"}``, entries left out when there are none;
- V1 (older): the same with ``"entries": {container id: cpulist}``;
- newer kubelets may add fields (``podEntries``; a ``data`` string holding the same object
  with a ``dataChecksum``). Like kubelet (Go's encoding/json) we ignore unknown fields and
  match field names case-insensitively; when ``data`` is there, it is the state.

The checksum is fnv32a over go-spew's ``%#v`` rendering of the Go struct with the checksum
set to 0 (SortKeys, DisableMethods; V1 renders under the V2 type name). We rebuild that
string exactly and check it, with tests on checksums kubelet computed; 0 means "no
checksum" (kubelet accepts it too). The ``dataChecksum`` of the newest format is not
verified: we have not seen how kubelet computes it.
"""

from __future__ import annotations

import json
import os

from ..core.cpuset import format_cpulist, parse_cpulist
from ..core.errors import CpuListError, KubeletStateError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Dict, FrozenSet, Mapping, NamedTuple, Optional, Tuple
else:
    from ..core.compat import NamedTuple

DEFAULT_STATE_FILE = "/var/lib/kubelet/cpu_manager_state"
# A node with 8192 CPUs, one container per CPU, stays far below this.
MAX_SIZE = 4 << 20
_FIELDS = {"policyname": "policyName", "defaultcpuset": "defaultCpuSet", "entries": "entries",
           "checksum": "checksum", "data": "data"}
_U64 = 1 << 64


class Checkpoint(NamedTuple):
    """What kubelet's CPU manager recorded; ``where`` is the file, for messages."""

    policy: str
    default: FrozenSet[int]
    entries: Dict[str, Dict[str, FrozenSet[int]]]
    where: str
    # V1 files key entries by container id (kubelet maps them to pods with its own
    # container list, which we do not have): kept apart, looked up by id.
    by_container_id: Dict[str, FrozenSet[int]] = {}
    checksum_verified: bool = False


def _fields(doc: Mapping[str, Any], where: str, what: str) -> Dict[str, Any]:
    """Go's field matching: case-insensitive, the last duplicate wins, unknown keys ignored."""
    out: Dict[str, Any] = {}
    for key, value in doc.items():
        name = _FIELDS.get(key.lower())
        if name:
            out[name] = value
    for name in ("policyName", "defaultCpuSet"):
        if name not in out:
            raise KubeletStateError(f"{what}field {name!r} is missing (not a CPU manager checkpoint)", where)
        if not isinstance(out[name], str):
            raise KubeletStateError(f"{what}field {name!r} must be a string, not {_kind(out[name])}", where)
    return out


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _cpus(text: str, field: str, where: str) -> FrozenSet[int]:
    try:
        return parse_cpulist(text, where)
    except CpuListError as exc:
        raise KubeletStateError(f"field {field}: {exc.message}", where) from None


def format_spew(policy: str, default: str, entries: Mapping[str, Any], v1: bool) -> str:
    """go-spew's ``%#v`` of the checkpoint struct with Checksum 0, as kubelet hashes it."""
    def render(m: Mapping[str, Any]) -> str:
        # Map keys and values print without their type; keys sorted (Go's string order is
        # byte order, which is code point order for Python strings).
        return "map[" + " ".join(
            f"{k}:{render(v) if isinstance(v, dict) else v}" for k, v in sorted(m.items())) + "]"

    kind = "map[string]string" if v1 else "map[string]map[string]string"
    return (f"(*state.CPUManagerCheckpoint){{PolicyName:(string){policy} DefaultCPUSet:(string){default} "
            f"Entries:({kind}){render(entries)} Checksum:(checksum.Checksum)0}}")


def compute_fnv32a(data: bytes) -> int:
    """FNV-1a, 32 bits (Go's hash/fnv New32a)."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def parse_checkpoint(data: bytes, where: str) -> Checkpoint:
    """Parse and check a checkpoint; anything else is a one-line KubeletStateError naming the field."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise KubeletStateError(f"not valid JSON ({str(exc).splitlines()[0][:120]})", where) from None
    if not isinstance(doc, dict):
        raise KubeletStateError(f"must be a JSON object, not {_kind(doc)}", where)
    fields, verify = _state_fields(doc, where)
    policy, default_text = fields["policyName"], fields["defaultCpuSet"]
    default = _cpus(default_text, "'defaultCpuSet'", where)
    raw = fields.get("entries", {})
    entries, by_id, kinds = parse_entries(raw, where)
    checksum = fields.get("checksum", 0)
    if isinstance(checksum, bool) or not isinstance(checksum, int) or not 0 <= checksum < _U64:
        raise KubeletStateError(f"field 'checksum' must be an unsigned integer, not {checksum!r:.40}", where)
    verified = False
    if verify and checksum:
        check_checksum(checksum, policy, default_text, raw, kinds, where)
        verified = True
    return Checkpoint(policy, default, entries, where, by_id, verified)


def _state_fields(doc: Dict[str, Any], where: str) -> Tuple[Dict[str, Any], bool]:
    """The state's fields, and whether its checksum can be checked.

    The newest format holds the state as a JSON document in the string field ``data``; the outer
    fields are a copy for older kubelets. Its own checksum is not checked (see the module docstring).
    """
    fields = _fields(doc, where, "")
    inner = fields.get("data")
    if inner is None:
        return fields, True
    if not isinstance(inner, str):
        raise KubeletStateError(f"field 'data' must be a string, not {_kind(inner)}", where)
    try:
        idoc = json.loads(inner)
    except ValueError as exc:
        raise KubeletStateError(f"field 'data' is not valid JSON ({str(exc).splitlines()[0][:120]})",
                                where) from None
    if not isinstance(idoc, dict):
        raise KubeletStateError(f"field 'data' must hold a JSON object, not {_kind(idoc)}", where)
    return _fields(idoc, where, "data: "), False


def parse_entries(raw: Any, where: str) -> Tuple[Dict[str, Dict[str, FrozenSet[int]]], Dict[str, FrozenSet[int]],
                                                 FrozenSet[str]]:
    """``entries``: (V2 pod uid -> container name -> CPUs, V1 container id -> CPUs, the kinds seen: v1, v2)."""
    if not isinstance(raw, dict):
        raise KubeletStateError(f"field 'entries' must be an object, not {_kind(raw)}", where)
    entries: Dict[str, Dict[str, FrozenSet[int]]] = {}
    by_id: Dict[str, FrozenSet[int]] = {}
    for key, value in raw.items():
        if isinstance(value, str):  # V1: container id -> cpulist
            by_id[key] = _cpus(value, f"'entries.{key[:80]}'", where)
        elif isinstance(value, dict):  # V2: pod uid -> container name -> cpulist
            entries[key] = _pod_entries(key, value, where)
        else:
            raise KubeletStateError(
                f"field 'entries.{key[:80]}' must be an object (V2) or a cpulist string (V1), not {_kind(value)}",
                where)
    kinds = frozenset(kind for kind, found in (("v1", by_id), ("v2", entries)) if found)
    if len(kinds) > 1:
        raise KubeletStateError("field 'entries' mixes V1 (container id) and V2 (pod uid) entries", where)
    return entries, by_id, kinds


def _pod_entries(pod_uid: str, value: Dict[str, Any], where: str) -> Dict[str, FrozenSet[int]]:
    per_pod = {}
    for name, cpus in value.items():
        if not isinstance(cpus, str):
            raise KubeletStateError(
                f"field 'entries.{pod_uid[:80]}.{name[:80]}' must be a cpulist string, not {_kind(cpus)}", where)
        per_pod[name] = _cpus(cpus, f"'entries.{pod_uid[:80]}.{name[:80]}'", where)
    return per_pod


def check_checksum(checksum: int, policy: str, default_text: str, raw: Dict[str, Any], kinds: FrozenSet[str],
                   where: str) -> None:
    """Raise unless ``checksum`` is kubelet's for this content (kubelet tries V2, then V1; a file
    without entries may carry either)."""
    shapes = (True,) if "v1" in kinds else (False,) if "v2" in kinds else (False, True)
    sums = [compute_fnv32a(format_spew(policy, default_text, raw, v1).encode("utf-8")) for v1 in shapes]
    if checksum not in sums:
        raise KubeletStateError(
            f"field 'checksum': {checksum} does not match the content ({sums[0]}); the file is corrupt or "
            "was not written by kubelet", where)


def load_checkpoint(path: str = DEFAULT_STATE_FILE) -> Optional[Checkpoint]:
    """Read and parse the checkpoint; None when it does not exist (no static policy, not a kubelet node).

    The file itself must be a regular file (not a symlink, FIFO or device) of at most MAX_SIZE.
    """
    from .files import FileRefused, read_regular_file

    try:
        data = read_regular_file(path, MAX_SIZE, follow=False)
    except FileNotFoundError:
        return None
    except FileRefused as exc:
        raise KubeletStateError(f"not kubelet's CPU manager state: {exc}", path) from None
    except OSError as exc:
        if os.path.islink(path):
            raise KubeletStateError("is a symbolic link; kubelet writes a regular file", path) from None
        raise KubeletStateError(f"cannot read the kubelet CPU manager state: {exc.strerror}", path) from None
    return parse_checkpoint(data, path)


def compute_assigned(ckpt: Checkpoint, pod_uid: str, container: str,
                     container_id: str = "") -> Optional[FrozenSet[int]]:
    """The exclusive CPUs kubelet assigned to this container; None when it has no entry."""
    found = ckpt.entries.get(pod_uid, {}).get(container) if pod_uid else None
    if found is None and container_id:
        found = ckpt.by_container_id.get(container_id)
    return found


def compute_others(ckpt: Checkpoint, pod_uid: str, container: str, container_id: str = "") -> FrozenSet[int]:
    """Every CPU kubelet assigned exclusively to some OTHER container: never adopt these."""
    out: set = set()
    for uid, per_pod in ckpt.entries.items():
        for name, cpus in per_pod.items():
            if not (uid == pod_uid and name == container):
                out |= cpus
    for cid, cpus in ckpt.by_container_id.items():
        if cid != container_id:
            out |= cpus
    return frozenset(out)


def compute_offline(ckpt: Checkpoint, online: FrozenSet[int]) -> Tuple[Tuple[str, str], ...]:
    """Entries naming CPUs that are not online: (what, cpulist) pairs, for the engine's check."""
    bad = []
    extra = ckpt.default - online
    if extra:
        bad.append(("defaultCpuSet", format_cpulist(extra)))
    for uid in sorted(ckpt.entries):
        for name in sorted(ckpt.entries[uid]):
            extra = ckpt.entries[uid][name] - online
            if extra:
                bad.append((f"entries.{uid}.{name}", format_cpulist(extra)))
    for cid in sorted(ckpt.by_container_id):
        extra = ckpt.by_container_id[cid] - online
        if extra:
            bad.append((f"entries.{cid}", format_cpulist(extra)))
    return tuple(bad)
