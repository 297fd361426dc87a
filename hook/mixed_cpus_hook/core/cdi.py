"""Which claims the node's CDI specs vouch for (exclusive_source dra). Pure.

The CPU DRA driver hands a container its claim through CDI: at prepare it writes a spec (kind
``dra.k8s.io/cpu``, device ``claim-<uid>``) whose device's only edit is the environment variable
``DRA_CPUSET_<uid>=<cpulist>``, and the runtime injects it into the containers kubelet names the
device for. But the environment an NRI runtime sends also holds every variable the pod author wrote
in the pod spec: a pod that writes ``DRA_CPUSET_0000=3`` itself would be given CPU 3 exclusively,
taken out of every other container's pool. The spec files are the allocator's record: only root
writes the runtime's CDI spec directories. So a ``DRA_CPUSET_`` variable counts only when a device
of a spec there has exactly that entry in its ``containerEdits.env`` (``select_claim_env``); any
other is refused (PolicyError, so ``failure_policy`` decides).

A vouched variable whose name is not a claim uid (a fork of the driver also writes
``DRA_CPUSET_ASSIGNED=<cpulist>``) is the driver's, but not a claim: it is left out (no CPUs are
claimed through it). One rule for the whole prefix: whatever the pod spec writes under it that no
spec holds is refused, whatever a spec holds is the driver's.

Only devices' edits count: a spec's top-level ``containerEdits`` applies to every device of the spec,
and the driver never writes one.
"""

from __future__ import annotations

from .bounds import MAX_CDI_DEVICE_ENV, MAX_CDI_DEVICES, quote
from .errors import CdiSpecError, PolicyError
from .pool import CLAIM_PREFIX, is_claim_uid

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Dict, FrozenSet, Iterable, List, NamedTuple, Sequence, Tuple
else:
    from .compat import NamedTuple

# The CPU DRA driver's CDI kind (kubernetes-sigs/dra-driver-cpu pkg/driver/cdi.go: vendor dra.k8s.io,
# class cpu); `check` counts its devices.
CPU_DRIVER_KIND = "dra.k8s.io/cpu"


class CdiSpec(NamedTuple):
    """What the plugin keeps of one CDI spec: its kind, how many devices, and their DRA_CPUSET_ entries."""

    kind: str
    devices: int
    claims: Tuple[str, ...]  # "DRA_CPUSET_<...>=<value>" entries of its devices' containerEdits.env


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "a mapping", type(None): "null"}.get(type(value), type(value).__name__)


def _list(value: Any, what: str, limit: int, where: str) -> List[Any]:
    """An optional array of at most ``limit`` items (null or absent: none)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise CdiSpecError(f"{what} must be an array, not {_type_name(value)}", where)
    if len(value) > limit:
        raise CdiSpecError(f"{what} has {len(value)} entries, more than the {limit} read", where)
    return value


def parse_cdi_spec(doc: Any, where: str) -> CdiSpec:
    """A parsed spec file (JSON or YAML) checked against CDI's shape as far as the claims need it.

    CdiSpecError names the first field that is not of its type (a broken file is skipped whole: a
    device list half read could vouch for part of what it says). Bounds: bounds.MAX_CDI_DEVICES,
    MAX_CDI_DEVICE_ENV.
    """
    if not isinstance(doc, dict):
        raise CdiSpecError(f"not a CDI spec: {_type_name(doc)}, not a mapping with 'kind' and 'devices'", where)
    kind = doc.get("kind")
    if not isinstance(kind, str):
        raise CdiSpecError(f"field 'kind' must be a string, not {_type_name(kind)}", where)
    devices = _list(doc.get("devices"), "field 'devices'", MAX_CDI_DEVICES, where)
    claims: List[str] = []
    for i, device in enumerate(devices):
        at = f"devices[{i}]"
        if not isinstance(device, dict):
            raise CdiSpecError(f"{at} must be a mapping, not {_type_name(device)}", where)
        if not isinstance(device.get("name"), str):
            raise CdiSpecError(f"{at}.name must be a string, not {_type_name(device.get('name'))}", where)
        edits = device.get("containerEdits")
        if edits is None:
            continue
        if not isinstance(edits, dict):
            raise CdiSpecError(f"{at}.containerEdits must be a mapping, not {_type_name(edits)}", where)
        for j, entry in enumerate(_list(edits.get("env"), f"{at}.containerEdits.env", MAX_CDI_DEVICE_ENV, where)):
            if not isinstance(entry, str):
                raise CdiSpecError(f"{at}.containerEdits.env[{j}] must be a string, not {_type_name(entry)}", where)
            if entry.startswith(CLAIM_PREFIX):
                claims.append(entry)
    return CdiSpec(kind, len(devices), tuple(claims))


def compute_vouched(specs: Iterable[CdiSpec]) -> Dict[str, FrozenSet[str]]:
    """Variable name -> the whole entries ("NAME=value") the specs hold for it."""
    found: Dict[str, set] = {}
    for spec in specs:
        for entry in spec.claims:
            found.setdefault(entry.partition("=")[0], set()).add(entry)
    return {name: frozenset(entries) for name, entries in found.items()}


def select_claim_env(env: Iterable[str], vouched: Dict[str, FrozenSet[str]], dirs: Sequence[str],
                     where: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """The container's claim entries a spec vouches for, and the names of vouched ones that are not claims.

    ``env``: the container's ``DRA_CPUSET_*`` entries as the runtime sent them. An entry no spec holds
    exactly (name and value) is refused: PolicyError naming the variable and ``dirs`` (and what the
    specs hold for that name, when they hold it with another value).
    """
    claims: List[str] = []
    ignored: List[str] = []
    for entry in env:
        if not entry.startswith(CLAIM_PREFIX):
            continue
        name, _sep, value = entry.partition("=")
        held = vouched.get(name)
        if held is None or entry not in held:
            what, other = quote(name, bare=True), ""
            if held:  # the name is the driver's, the value is not: say both
                what = quote(entry, bare=True)
                other = f" (a spec holds {', '.join(quote(e, bare=True) for e in sorted(held)[:3])})"
            raise PolicyError(f"{what} is not in any CDI spec under {', '.join(dirs)}{other}: not the CPU DRA "
                              "driver's claim", where)
        if is_claim_uid(name[len(CLAIM_PREFIX):]):
            claims.append(entry)
        else:
            ignored.append(name)
    return tuple(claims), tuple(ignored)
