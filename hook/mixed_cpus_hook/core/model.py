"""The typed data the engine works on: records of tracked containers and pods, and the answers.

Plain values only (no I/O): ``store.records`` loads, validates, migrates and saves the records;
the use cases build the answers. Records are what the product remembers between events:

- a ContainerRecord per tracked (mixed) container: where its cgroups are, its exclusive and
  shared CPUs when last decided, and its quota bookkeeping;
- a PodRecord per pod with tracked containers: its quota bookkeeping and its members, each with
  the share of the pod's quota it adds (shares may differ in size: a member's share follows its
  own shared CPUs, or a configured budget).

Why NamedTuples (the lean ones of ``compat``) and not dataclasses: the createRuntime hook loads
this module on every container start, and ``import dataclasses`` alone costs about 11 ms there
(it imports ``inspect``), half of the interpreter's whole start-up.
"""

from __future__ import annotations

from .cgroup import Dirs
from .cpuset import format_cpulist
from .quota import QuotaState

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Dict, FrozenSet, NamedTuple, Optional, Tuple
else:
    from .compat import NamedTuple

SCHEMA_VERSION = 2
MODES = ("hook", "nri")
PHASES = ("creating", "applied", "releasing")
SOURCES = ("kubelet-checkpoint", "spec", "record", "cgroup")
ISOLATED_ENV = "OPENSHIFT_ISOLATED_CPUS"
SHARED_ENV = "OPENSHIFT_SHARED_CPUS"


class Identity(NamedTuple):
    """Who a container is, from kubelet's annotations."""

    namespace: str = ""
    pod: str = ""
    container: str = ""
    pod_uid: str = ""


class ContainerRecord(NamedTuple):
    """What the product decided and wrote for one mixed container (``<state_dir>/containers/<id>.json``)."""

    id: str
    identity: Identity
    mode: str
    phase: str
    cgroup_version: int
    cgroup: Dirs
    pod_cgroup: Optional[Dirs]
    pod_key: Optional[str]
    exclusive: FrozenSet[int]
    exclusive_source: str
    shared: FrozenSet[int]
    quota: QuotaState
    created: str
    updated: str
    last_reapply: Optional[str] = None
    reapplies: int = 0
    pins_maybe_lost: bool = False

    @property
    def desired(self) -> FrozenSet[int]:
        return self.exclusive | self.shared


class Member(NamedTuple):
    """A pod member: a mixed container and the share of the pod's quota it adds (millicpus)."""

    id: str
    share_mcpu: int


class PodRecord(NamedTuple):
    """A pod with mixed containers (``<state_dir>/pods/<pod-cgroup-name>.json``)."""

    key: str
    cgroup: Dirs
    quota: Optional[QuotaState]
    members: Tuple[Member, ...]

    @property
    def member_ids(self) -> Tuple[str, ...]:
        return tuple(m.id for m in self.members)


class Outcome(NamedTuple):
    """What one command did for one container: status and one line per write (or plan)."""

    # skipped | not-applicable | conflict | in-sync | applied | planned | released | gone | broken | error
    status: str
    lines: Tuple[str, ...] = ()


class Resources(NamedTuple):
    """What the runtime is to write for one container: its cpuset and CFS quota (None: unlimited)."""

    cpus: FrozenSet[int]
    quota: Optional[int]
    period: int


class Adjustment(NamedTuple):
    """The answer for the container of an NRI event: its resources and environment."""

    resources: Resources
    exclusive: FrozenSet[int]
    shared: FrozenSet[int]
    env: Tuple[Tuple[str, str], ...]

    @property
    def cpus(self) -> FrozenSet[int]:
        return self.resources.cpus

    @property
    def quota(self) -> Optional[int]:
        return self.resources.quota

    @property
    def period(self) -> int:
        return self.resources.period


class Update(NamedTuple):
    """New resources for another container than the event's (NRI's ContainerUpdate)."""

    container_id: str
    resources: Resources
    why: str = ""


class Answer(NamedTuple):
    """A use case's answer to one event: the event's container and every other one it changes."""

    outcome: Outcome
    adjust: Optional[Adjustment] = None
    updates: Tuple[Update, ...] = ()


def compute_env(exclusive: FrozenSet[int], shared: FrozenSet[int]) -> Tuple[Tuple[str, str], ...]:
    """What the workload learns of its split (the names CRI-O's own shared CPUs use)."""
    return ((ISOLATED_ENV, format_cpulist(exclusive)), (SHARED_ENV, format_cpulist(shared)))


# Adjustments by what they are made of: every container with the same exclusive and shared CPUs and
# quota gets an equal one (immutable). Bounded: MEMO_ENTRIES, then forgotten at once.
MEMO_ENTRIES = 256
_ADJUSTMENTS: Dict[Tuple[FrozenSet[int], FrozenSet[int], Optional[int], int], Adjustment] = {}


def compute_adjustment(rec: ContainerRecord) -> Adjustment:
    """The runtime's view of a record: exclusive + shared, the raised quota, the environment."""
    quota = rec.quota
    key = (rec.exclusive, rec.shared, quota.applied, quota.period)
    adj = _ADJUSTMENTS.get(key)
    if adj is None:
        adj = Adjustment(Resources(rec.exclusive | rec.shared, quota.applied, quota.period), rec.exclusive, rec.shared,
                         compute_env(rec.exclusive, rec.shared))
        if len(_ADJUSTMENTS) >= MEMO_ENTRIES:
            _ADJUSTMENTS.clear()
        _ADJUSTMENTS[key] = adj
    return adj
