"""kubelet's CPU manager checkpoint (/var/lib/kubelet/cpu_manager_state): who owns which CPUs.

kubelet's static policy records every exclusive assignment there, so it is the truth about a
container's exclusive CPUs; a cpuset found in a cgroup may have been widened by anyone.
The format is kubernetes pkg/kubelet/cm/cpumanager/state/checkpoint.go:

- V2 (kubelet 1.18+): ``{"policyName", "defaultCpuSet", "entries": {pod uid: {container name:
  cpulist}}, "checksum"}``, entries left out when there are none;
- V1 (older): the same with ``"entries": {container id: cpulist}``;
- V3 (kubelet 1.36 with the PodLevelResourceManagers gate): V2 plus ``"podEntries": {pod uid:
  {"cpuSet": cpulist}}``, CPUs exclusive to a whole pod (never another pod's to adopt);
- V4 (kubelet 1.37+, PodLevelResourceManagers: kubernetes PR 139102 "CPU manager checkpoint
  generalization to v4 with embedded v2"): the state is the JSON document in the string
  ``data`` (``podEntries`` added), ``dataChecksum`` its checksum; the outer V2 fields are a copy
  for older kubelets, which a V4 reader ignores. Like kubelet (Go's encoding/json) we ignore
  unknown fields and match field names case-insensitively.

The V1/V2/V3 checksum is fnv32a over go-spew's ``%#v`` rendering of the Go struct with the
checksum set to 0 (SortKeys, DisableMethods; V1 renders under the V2 type name, V3 under its own
or, as kubelet 1.36 named it, the V2 one); 0 means "no checksum" (kubelet accepts it too). The V4 ``dataChecksum`` is kubelet's ``checksum.New(Data)``:
the same hash over the rendering of a Go string, ``(string)`` followed by the string itself;
kubelet accepts no other value, 0 included, and does not fall back to the outer fields when
``data`` is there. We rebuild both exactly and check them, with tests on checksums kubelet
computed (tests/unit/test_kubelet.py).
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
           "podentries": "podEntries", "checksum": "checksum", "data": "data", "datachecksum": "dataChecksum"}
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
    # PodLevelResourceManagers: pod uid -> the CPUs exclusive to that whole pod.
    pod_entries: Dict[str, FrozenSet[int]] = {}


def _fields(doc: Mapping[str, Any], where: str, what: str, names: Tuple[str, ...] = tuple(_FIELDS.values()),
            required: bool = True) -> Dict[str, Any]:
    """Go's field matching: case-insensitive, the last duplicate wins, unknown keys ignored."""
    out: Dict[str, Any] = {}
    for key, value in doc.items():
        name = _FIELDS.get(key.lower())
        if name in names:
            out[name] = value
    for name in ("policyName", "defaultCpuSet") if required else ():
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


def format_spew(policy: str, default: str, entries: Mapping[str, Any], v1: bool,
                pod_entries: Optional[Mapping[str, FrozenSet[int]]] = None, name: str = "CPUManagerCheckpoint") -> str:
    """go-spew's ``%#v`` of the checkpoint struct with Checksum 0, as kubelet hashes it.

    ``pod_entries`` (V3): each pod's ``PodEntry{CPUSet cpuset.CPUSet}``, a set rendered as its
    ``elems map[int]struct{}`` (spew reads unexported fields too).
    """
    def render(m: Mapping[str, Any]) -> str:
        # Map keys and values print without their type; keys sorted (Go's string order is
        # byte order, which is code point order for Python strings; ints numerically).
        return "map[" + " ".join(
            f"{k}:{render(v) if isinstance(v, dict) else v}" for k, v in sorted(m.items())) + "]"

    kind = "map[string]string" if v1 else "map[string]map[string]string"
    pods = ""
    if pod_entries is not None:
        pods = " PodEntries:(state.PodCPUAssignments)" + render({
            uid: "{CPUSet:(cpuset.CPUSet){elems:(map[int]struct {})" + render(dict.fromkeys((str(c) for c in sorted(cpus)), "{}")) + "}}"
            for uid, cpus in pod_entries.items()})
    return (f"(*state.{name}){{PolicyName:(string){policy} DefaultCPUSet:(string){default} "
            f"Entries:({kind}){render(entries)}{pods} Checksum:(checksum.Checksum)0}}")


def compute_fnv32a(data: bytes) -> int:
    """FNV-1a, 32 bits (Go's hash/fnv New32a)."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def compute_data_checksum(data: str) -> int:
    """kubelet's ``checksum.New(Data)`` of a V4 checkpoint: fnv32a over go-spew's ``%#v`` of a string.

    Go's JSON decoder turns a lone surrogate escape into U+FFFD; Python's keeps it: do as Go.
    """
    try:
        raw = data.encode("utf-8")
    except UnicodeEncodeError:
        raw = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in data).encode("utf-8")
    return compute_fnv32a(b"(string)" + raw)


def _unsigned(value: Any, field: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _U64:
        raise KubeletStateError(f"field {field!r} must be an unsigned integer, not {value!r:.40}", where)
    return value


def _parse_v4(fields: Dict[str, Any], where: str) -> Dict[str, Any]:
    """V4: the fields of the JSON document in "data", after checking its dataChecksum as kubelet does
    (parse the string, then the checksum, then the fields; the outer V2 copy is never used)."""
    inner = fields["data"]
    if not isinstance(inner, str):
        raise KubeletStateError(f"field 'data' must be a string, not {_kind(inner)}", where)
    try:
        idoc = json.loads(inner)
    except ValueError as exc:
        raise KubeletStateError(f"field 'data' is not valid JSON ({str(exc).splitlines()[0][:120]})",
                                where) from None
    if not isinstance(idoc, dict):
        raise KubeletStateError(f"field 'data' must hold a JSON object, not {_kind(idoc)}", where)
    if "dataChecksum" not in fields:
        raise KubeletStateError("field 'dataChecksum' is missing: kubelet refuses 'data' without it", where)
    stated, computed = _unsigned(fields["dataChecksum"], "dataChecksum", where), compute_data_checksum(inner)
    if stated != computed:
        raise KubeletStateError(
            f"field 'dataChecksum': {stated} does not match the content of 'data' ({computed}); the file is "
            "corrupt or was not written by kubelet", where)
    return _fields(idoc, where, "data: ", names=("policyName", "defaultCpuSet", "entries", "podEntries"))


def _parse_entries(raw: Any, where: str) -> Tuple[Dict[str, Dict[str, FrozenSet[int]]], Dict[str, FrozenSet[int]], set]:
    """``entries``: V2 (pod uid -> container name -> cpulist) or V1 (container id -> cpulist), never both."""
    if not isinstance(raw, dict):
        raise KubeletStateError(f"field 'entries' must be an object, not {_kind(raw)}", where)
    entries: Dict[str, Dict[str, FrozenSet[int]]] = {}
    by_id: Dict[str, FrozenSet[int]] = {}
    kinds = set()
    for key, value in raw.items():
        if isinstance(value, str):  # V1: container id -> cpulist
            kinds.add("v1")
            by_id[key] = _cpus(value, f"'entries.{key[:80]}'", where)
        elif isinstance(value, dict):  # V2: pod uid -> container name -> cpulist
            kinds.add("v2")
            per_pod = {}
            for name, cpus in value.items():
                if not isinstance(cpus, str):
                    raise KubeletStateError(
                        f"field 'entries.{key[:80]}.{name[:80]}' must be a cpulist string, not {_kind(cpus)}", where)
                per_pod[name] = _cpus(cpus, f"'entries.{key[:80]}.{name[:80]}'", where)
            entries[key] = per_pod
        else:
            raise KubeletStateError(
                f"field 'entries.{key[:80]}' must be an object (V2) or a cpulist string (V1), not {_kind(value)}",
                where)
    if len(kinds) > 1:
        raise KubeletStateError("field 'entries' mixes V1 (container id) and V2 (pod uid) entries", where)
    return entries, by_id, kinds


def _parse_pod_entries(raw: Any, where: str) -> Dict[str, FrozenSet[int]]:
    """``podEntries`` (PodLevelResourceManagers): pod uid -> ``{"cpuSet": cpulist}``, the pod's own CPUs."""
    if not isinstance(raw, dict):
        raise KubeletStateError(f"field 'podEntries' must be an object, not {_kind(raw)}", where)
    out: Dict[str, FrozenSet[int]] = {}
    for uid, entry in raw.items():
        field = f"podEntries.{uid[:80]}"
        if not isinstance(entry, dict):
            raise KubeletStateError(f"field {field!r} must be an object, not {_kind(entry)}", where)
        cpus = next((v for k, v in entry.items() if k.lower() == "cpuset"), "")  # Go: case-insensitive
        if not isinstance(cpus, str):
            raise KubeletStateError(f"field '{field}.cpuSet' must be a cpulist string, not {_kind(cpus)}", where)
        out[uid] = _cpus(cpus, f"'{field}.cpuSet'", where)
    return out


def compute_checksums(policy: str, default_text: str, raw: Mapping[str, Any], kinds: set,
                      pod_entries: Optional[Mapping[str, FrozenSet[int]]]) -> Tuple[int, ...]:
    """Every checksum kubelet accepts for these fields: V3 (with podEntries; under the V3 type name, or
    the V2 one as kubelet 1.36 named it), else V2, then V1 (a file without entries may be either)."""
    if pod_entries is not None:
        return tuple(compute_fnv32a(format_spew(policy, default_text, raw, False, pod_entries, name).encode("utf-8"))
                     for name in ("CPUManagerCheckpointV3", "CPUManagerCheckpoint"))
    shapes = (True,) if "v1" in kinds else (False,) if "v2" in kinds else (False, True)
    return tuple(compute_fnv32a(format_spew(policy, default_text, raw, v1).encode("utf-8")) for v1 in shapes)


def parse_checkpoint(data: bytes, where: str) -> Checkpoint:
    """Parse and check a checkpoint; anything else is a one-line KubeletStateError naming the field."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise KubeletStateError(f"not valid JSON ({str(exc).splitlines()[0][:120]})", where) from None
    if not isinstance(doc, dict):
        raise KubeletStateError(f"must be a JSON object, not {_kind(doc)}", where)
    fields = _fields(doc, where, "", required=False)
    v4 = fields.get("data") is not None and (fields["data"] != "" or bool(fields.get("dataChecksum")))
    fields = _parse_v4(fields, where) if v4 else _fields(doc, where, "")
    policy, default_text = fields["policyName"], fields["defaultCpuSet"]
    default = _cpus(default_text, "'defaultCpuSet'", where)
    raw = fields.get("entries", {})
    entries, by_id, kinds = _parse_entries(raw, where)
    pod_entries = _parse_pod_entries(fields["podEntries"], where) if "podEntries" in fields else None
    checksum = _unsigned(fields.get("checksum", 0), "checksum", where)
    verified = v4
    if not v4 and checksum:
        sums = compute_checksums(policy, default_text, raw, kinds, pod_entries)
        if checksum not in sums:
            raise KubeletStateError(
                f"field 'checksum': {checksum} does not match the content ({sums[0]}); the file is corrupt or "
                "was not written by kubelet", where)
        verified = True
    return Checkpoint(policy, default, entries, where, by_id, verified, pod_entries or {})


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
    for uid, cpus in ckpt.pod_entries.items():
        if uid != pod_uid:
            out |= cpus
    return frozenset(out)


def compute_claimed_twice(ckpt: Checkpoint) -> FrozenSet[int]:
    """The CPUs that two or more container entries (by pod and name, or V1's by id) assign:
    kubelet never writes such a checkpoint. One pass over the entries."""
    seen: set = set()
    twice: set = set()
    for per_pod in ckpt.entries.values():
        for cpus in per_pod.values():
            twice |= seen & cpus
            seen |= cpus
    for cpus in ckpt.by_container_id.values():
        twice |= seen & cpus
        seen |= cpus
    return frozenset(twice)


class Moved(NamedTuple):
    """What differs between two checkpoints' container entries: the (pod uid, name) keys and V1 ids
    whose CPUs changed (added, removed or moved), and the CPUs two entries claim in either."""

    keys: FrozenSet[Tuple[str, str]]
    ids: FrozenSet[str]
    contested: FrozenSet[int]


def compute_moved(before: Checkpoint, now: Checkpoint) -> Moved:
    """The entries that differ between ``before`` and ``now`` (kubelet writes the whole file for each
    allocation: most entries stay as they were)."""
    keys: set = set()
    for uid in set(before.entries) | set(now.entries):
        old, new = before.entries.get(uid, {}), now.entries.get(uid, {})
        if old != new:
            keys.update((uid, name) for name in set(old) | set(new) if old.get(name) != new.get(name))
    ids = {i for i in set(before.by_container_id) | set(now.by_container_id)
           if before.by_container_id.get(i) != now.by_container_id.get(i)}
    return Moved(frozenset(keys), frozenset(ids), compute_claimed_twice(before) | compute_claimed_twice(now))


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
    for uid in sorted(ckpt.pod_entries):
        extra = ckpt.pod_entries[uid] - online
        if extra:
            bad.append((f"podEntries.{uid}", format_cpulist(extra)))
    return tuple(bad)
