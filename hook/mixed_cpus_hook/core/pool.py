"""The shared pool that follows exclusive allocations (the CPU DRA driver's model). Pure.

In this model the shared CPUs are not a fixed set: they are every CPU that is online, not
reserved for the system, and not claimed exclusively by a container:

    pool = (online - reserved) - union(every live container's claimed CPUs)

so the pool shrinks when a claim takes CPUs and grows back when it is released. Every container
the plugin places holds one of three sets (``compute_kind``):

- ``mixed``: it holds a claim and asks for the pool too (CPU shares above kubelet's minimum of 2,
  that is a standard CPU request, or the annotation): claim ∪ pool;
- ``claim``: a claim and nothing else (shares 2: no standard CPU request): the claim;
- ``pool``: no claim: the pool.

Exclusive CPUs come from claims: the CPU DRA driver's prepare step writes a CDI spec per claim whose
only edit is the environment variable ``DRA_CPUSET_<claim uid>=<cpulist>``; the container gets one
variable per claim it uses. Containers of one pod may share a claim (one ResourceClaim referenced by
several containers); two different claims never hold the same CPU.
"""

from __future__ import annotations

from .bounds import MAX_CPULIST_TEXT, quote
from .cpuset import format_cpulist, parse_cpulist
from .errors import PolicyError, RuntimeInputError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Sequence, Tuple
else:
    from .compat import NamedTuple

CLAIM_PREFIX = "DRA_CPUSET_"
# kubelet's MinShares (pkg/kubelet/cm/helpers_linux.go): the CPU shares of a container without a
# standard CPU request (a request of 1m gives 2 as well). Above it, the container asked for CPU time
# on the shared CPUs.
MIN_SHARES = 2
# A claim uid is a Kubernetes UID (a UUID); the driver writes it into the variable's name as is.
MAX_CLAIM_UID = 64
CLAIM_UID_CHARS = frozenset("0123456789abcdefABCDEF-_")
# More claims than this on one container is not a DRA driver's doing.
MAX_CLAIMS = 64

MIXED, CLAIM, POOL = "mixed", "claim", "pool"


class Claim(NamedTuple):
    """One claim a container uses: its uid and its exclusive CPUs."""

    uid: str
    cpus: FrozenSet[int]


class Member(NamedTuple):
    """A container the plugin places in the pool model, as the decision needs it."""

    id: str
    pod_uid: str
    kind: str  # MIXED, CLAIM or POOL
    claims: Tuple[Claim, ...] = ()

    @property
    def claimed(self) -> FrozenSet[int]:
        out: FrozenSet[int] = frozenset()
        for claim in self.claims:
            out = out | claim.cpus
        return out


def is_claim_uid(uid: str) -> bool:
    """Whether the part of a ``DRA_CPUSET_<uid>`` name after the prefix can be a claim's uid."""
    return bool(uid) and len(uid) <= MAX_CLAIM_UID and CLAIM_UID_CHARS.issuperset(uid)


def parse_claims(env: Iterable[str], where: str, online: FrozenSet[int],
                 reserved: FrozenSet[int]) -> Tuple[Claim, ...]:
    """The claims in a container's environment (``DRA_CPUSET_<uid>=<cpulist>``), validated.

    Each must name online CPUs that are not reserved; a uid is hexadecimal digits, dashes and
    underscores; the same uid twice with different CPUs is refused. RuntimeInputError (malformed)
    or PolicyError (CPUs not allowed) names the variable.
    """
    found: Dict[str, FrozenSet[int]] = {}
    for item in env:
        if not item.startswith(CLAIM_PREFIX):
            continue
        name, sep, value = item.partition("=")
        uid = name[len(CLAIM_PREFIX):]
        if not sep or not is_claim_uid(uid):
            raise RuntimeInputError(f"environment variable {quote(name)} does not name a claim uid", where)
        if len(value) > MAX_CPULIST_TEXT:
            raise RuntimeInputError(f"{name}: cpulist of {len(value)} characters is too long", where)
        cpus = parse_cpulist(value, f"{where}: {name}")
        if not cpus:
            raise RuntimeInputError(f"{name} is empty: a claim holds at least one CPU", where)
        if cpus - online:
            raise PolicyError(f"{name} claims CPUs {format_cpulist(cpus - online)}, which are not online", where)
        if cpus & reserved:
            raise PolicyError(f"{name} claims CPUs {format_cpulist(cpus & reserved)}, which are reserved for the "
                              "system (setting 'reserved_cpus')", where)
        if uid in found and found[uid] != cpus:
            raise RuntimeInputError(f"{name} is set twice with different CPUs", where)
        found[uid] = cpus
        if len(found) > MAX_CLAIMS:
            raise RuntimeInputError(f"more than {MAX_CLAIMS} claims", where)
    return tuple(Claim(uid, found[uid]) for uid in sorted(found))


def compute_kind(claims: Sequence[Claim], shares: int, asks: bool) -> str:
    """mixed (a claim and a CPU request or the annotation), claim (a claim alone) or pool (no claim)."""
    if not claims:
        return POOL
    return MIXED if shares > MIN_SHARES or asks else CLAIM


def compute_claim_conflicts(new: Member, members: Iterable[Member]) -> List[str]:
    """Why ``new``'s claims cannot be granted next to the others (empty: they can).

    A claim's CPUs belong to its uid: the same uid on two containers is one claim shared inside one
    pod (a pod's containers may share a ResourceClaim), never across pods; two different claims
    never hold the same CPU (the driver never allocates one CPU twice).
    """
    problems: List[str] = []
    for other in members:
        if other.id == new.id:
            continue
        for mine in new.claims:
            for theirs in other.claims:
                if mine.uid == theirs.uid:
                    if other.pod_uid != new.pod_uid:
                        problems.append(f"claim {mine.uid} is already used by container {other.id} of another pod")
                    elif mine.cpus != theirs.cpus:
                        problems.append(f"claim {mine.uid} names CPUs {format_cpulist(mine.cpus)} here and "
                                        f"{format_cpulist(theirs.cpus)} in container {other.id}")
                elif mine.cpus & theirs.cpus:
                    problems.append(f"claim {mine.uid}'s CPUs {format_cpulist(mine.cpus & theirs.cpus)} are claim "
                                    f"{theirs.uid}'s too (container {other.id})")
    return problems


def compute_pool(online: FrozenSet[int], reserved: FrozenSet[int], members: Iterable[Member]) -> FrozenSet[int]:
    """The pool: online CPUs, not reserved, claimed by nobody."""
    claimed: FrozenSet[int] = frozenset()
    for m in members:
        claimed = claimed | m.claimed
    return frozenset(online) - reserved - claimed


def compute_cpus(member: Member, pool: FrozenSet[int]) -> FrozenSet[int]:
    """What one container holds: its claims, the pool, or both."""
    if member.kind == CLAIM:
        return member.claimed
    if member.kind == POOL:
        return pool
    return member.claimed | pool


def check_pool_not_empty(pool: FrozenSet[int], members: Iterable[Member], new: Member, where: str) -> None:
    """A claim may not leave the pool empty while containers run on it (NRI reads an empty cpuset as
    "no update", so they would keep the claimed CPUs): PolicyError naming the claim and the pool."""
    if pool:
        return
    on_pool = [m.id for m in members if m.kind in (MIXED, POOL) and m.id != new.id]
    if new.kind in (MIXED, POOL) or on_pool:
        claims = ", ".join(f"{c.uid} ({format_cpulist(c.cpus)})" for c in new.claims) or "none"
        users = f"{len(on_pool)} container(s) on it" + (f", e.g. {on_pool[0]}" if on_pool else "")
        raise PolicyError(f"claims {claims} would leave the shared pool empty ({users}): refused", where)


def compute_placements(online: FrozenSet[int], reserved: FrozenSet[int], members: Sequence[Member]
                       ) -> Tuple[FrozenSet[int], Dict[str, FrozenSet[int]]]:
    """The pool and every member's cpuset, for a set of members."""
    pool = compute_pool(online, reserved, members)
    return pool, {m.id: compute_cpus(m, pool) for m in members}


def compute_changes(before: Dict[str, FrozenSet[int]], after: Dict[str, FrozenSet[int]],
                    skip: Optional[str] = None) -> Dict[str, FrozenSet[int]]:
    """The members whose cpuset changes (``skip``: the event's own container, answered apart)."""
    return {cid: cpus for cid, cpus in after.items() if cid != skip and before.get(cid) != cpus}
