"""The request path's memos of pure functions: a value given back for equal inputs is the value the
function computes for them, refused inputs are never remembered, and each memo stays bounded.

compute_desired (a new container's decision), compute_adjustment (the runtime's view of a record)
and the NRI front end's parse_cpu_values are asked the same few inputs on every creation; each
keeps what it gave, by its inputs.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import pytest

from mixed_cpus_hook.core import desired as desired_module
from mixed_cpus_hook.core import model as model_module
from mixed_cpus_hook.core.cgroup import Dirs, Quota
from mixed_cpus_hook.core.cpuset import format_cpulist
from mixed_cpus_hook.core.desired import Desired, Kubelet, compute_desired
from mixed_cpus_hook.core.errors import CpuListError, RuntimeInputError
from mixed_cpus_hook.core.model import Adjustment, ContainerRecord, Identity, Resources, compute_adjustment
from mixed_cpus_hook.core.quota import QuotaState
from mixed_cpus_hook.frontends.nri import handlers as handlers_module
from mixed_cpus_hook.frontends.nri.handlers import parse_cpu_values

S = frozenset
SHARED = S({0, 1})

# (id, kubelet's view, shared CPUs, share in millicpus, the decision's kind, exclusive, applied quota)
DECISIONS = [
    ("spec-finite", Kubelet(S({2, 3}), Quota(200000, 100000), S({2, 3})), SHARED, None, "mixed", S({2, 3}), 400000),
    ("spec-unlimited", Kubelet(S({2}), Quota(None, 100000), S({2})), SHARED, None, "mixed", S({2}), None),
    ("checkpoint-wins", Kubelet(S({2, 3}), Quota(200000, 100000), S({2, 3}), S({4, 5})), SHARED, None, "mixed",
     S({4, 5}), 400000),
    ("pool-budget", Kubelet(S({2}), Quota(100000, 100000), S({2})), SHARED, 500, "mixed", S({2}), 150000),
    ("overlaps-shared", Kubelet(S({1, 2}), Quota(200000, 100000), S({1, 2})), SHARED, None, "not-applicable", S(),
     None),
    ("checkpoint-empty", Kubelet(S({2}), Quota(100000, 100000), S({2}), S()), SHARED, None, "not-applicable", S(),
     None),
]


@pytest.mark.parametrize("now,shared,share,kind,exclusive,applied", [d[1:] for d in DECISIONS],
                         ids=[d[0] for d in DECISIONS])
def test_a_new_containers_decision_is_remembered_as_computed(monkeypatch: Any, now: Kubelet, shared: Any,
                                                             share: Optional[int], kind: str, exclusive: Any,
                                                             applied: Optional[int]) -> None:
    monkeypatch.setattr(desired_module, "_NEW", {})
    first = compute_desired(now, shared, None, share)
    assert (first.kind, first.exclusive, first.quota.applied if first.quota else None) == (kind, exclusive, applied)
    # Equal inputs, built anew (other objects): the same decision, given back.
    again = compute_desired(Kubelet(*[S(v) if isinstance(v, frozenset) else v for v in now]), S(shared), None, share)
    assert again is first


def test_a_decision_with_a_record_is_never_remembered(monkeypatch: Any) -> None:
    monkeypatch.setattr(desired_module, "_NEW", {})
    rec = ContainerRecord("c", Identity(), "nri", "applied", 1, Dirs("/a", "/b"), None, None, S({2}), "spec", SHARED,
                          QuotaState(100000, 300000, 100000, (300000,)), "2026-01-01T00:00:00Z",
                          "2026-01-01T00:00:00Z")
    out = compute_desired(Kubelet(S({2}) | SHARED, Quota(300000, 100000)), SHARED, rec)
    assert isinstance(out, Desired) and out.quota is not None and out.quota.base == 100000
    assert desired_module._NEW == {}


def _record(exclusive: Any, shared: Any, applied: Optional[int], cid: str = "c") -> ContainerRecord:
    return ContainerRecord(cid, Identity(), "nri", "applied", 1, Dirs("/a", "/b"), None, None, exclusive, "spec",
                           shared, QuotaState(100000, applied, 100000, (applied,) if applied else ()),
                           "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")


def test_equal_records_get_one_adjustment_and_others_their_own(monkeypatch: Any) -> None:
    monkeypatch.setattr(model_module, "_ADJUSTMENTS", {})
    one = compute_adjustment(_record(S({2, 3}), SHARED, 400000, "a"))
    assert one == Adjustment(Resources(S({0, 1, 2, 3}), 400000, 100000), S({2, 3}), SHARED,
                             (("OPENSHIFT_ISOLATED_CPUS", "2-3"), ("OPENSHIFT_SHARED_CPUS", "0-1")))
    assert compute_adjustment(_record(S({2, 3}), SHARED, 400000, "b")) is one  # another container, same values
    other = compute_adjustment(_record(S({2, 3}), SHARED, None))
    assert other.resources == Resources(S({0, 1, 2, 3}), None, 100000)


# (id, cpus text, quota, period, limit, what parse_cpu_values gives or the error it raises)
CPU_VALUES = [
    ("cpuset-only", "2-3", None, None, 100, (S({2, 3}), None, 0)),
    ("finite", "2", 100000, 100000, 100, (S({2}), Quota(100000, 100000), 100000)),
    ("unlimited", "2", -1, 100000, 100, (S({2}), Quota(None, 100000), 100000)),
    ("zero-quota-is-not-given", "2", 0, 50000, 100, (S({2}), None, 50000)),
    ("bad-cpulist", "2-", None, None, 100, CpuListError),
    ("too-long-for-the-node", "1,2,3", None, None, 4, CpuListError),
    ("quota-too-small", "2", 5, 100000, 100, RuntimeInputError),
    ("period-too-large", "2", 100000, 10 ** 7, 100, RuntimeInputError),
]


@pytest.mark.parametrize("text,quota,period,limit,expected", [c[1:] for c in CPU_VALUES],
                         ids=[c[0] for c in CPU_VALUES])
def test_cpu_values_are_remembered_only_when_they_pass(monkeypatch: Any, text: str, quota: Optional[int],
                                                       period: Optional[int], limit: int, expected: Any) -> None:
    monkeypatch.setattr(handlers_module, "_PARSED_CPU", {})
    for _ in range(2):  # the second time from the memo (or refused again)
        if isinstance(expected, type):
            with pytest.raises(expected):
                parse_cpu_values(text, quota, period, "here", limit)
            assert handlers_module._PARSED_CPU == {}
        else:
            assert parse_cpu_values(text, quota, period, "here", limit) == expected


MEMOS: Dict[str, Any] = {
    "desired": (desired_module, "_NEW", desired_module.MEMO_ENTRIES,
                lambda i: compute_desired(Kubelet(S({i % 4000 + 2}), Quota(i + 1000, 100000), S({i % 4000 + 2})),
                                          SHARED, None)),
    "adjustment": (model_module, "_ADJUSTMENTS", model_module.MEMO_ENTRIES,
                   lambda i: compute_adjustment(_record(S({2}), SHARED, 300000 + i))),
    "cpu-values": (handlers_module, "_PARSED_CPU", handlers_module.MEMO_ENTRIES,
                   lambda i: parse_cpu_values("2", 100000 + i, 100000, "here", 100)),
}


@pytest.mark.parametrize("module,name,bound,ask", MEMOS.values(), ids=list(MEMOS))
def test_each_memo_stays_bounded(monkeypatch: Any, module: Any, name: str, bound: int,
                                 ask: Callable[[int], Any]) -> None:
    monkeypatch.setattr(module, name, {})
    for i in range(3 * bound + 7):
        ask(i)
        assert 0 < len(getattr(module, name)) <= bound


ADJUSTMENTS = [
    ("finite", Adjustment(Resources(S({0, 1, 2}), 300000, 100000), S({2}), SHARED,
                          (("OPENSHIFT_ISOLATED_CPUS", "2"), ("OPENSHIFT_SHARED_CPUS", "0-1")))),
    ("unlimited", Adjustment(Resources(S({0, 1, 5}), None, 100000), S({5}), SHARED,
                             (("OPENSHIFT_ISOLATED_CPUS", "5"), ("OPENSHIFT_SHARED_CPUS", "0-1")))),
    ("no-period", Adjustment(Resources(S({0, 1, 7}), None, 0), S({7}), SHARED, ())),
]


@pytest.mark.parametrize("adj", [a for _, a in ADJUSTMENTS], ids=[i for i, _ in ADJUSTMENTS])
def test_an_adjustment_message_from_the_memo_has_the_fields_of_one_built(monkeypatch: Any, adj: Adjustment) -> None:
    from mixed_cpus_hook.frontends.nri.handlers import format_adjustment
    from mixed_cpus_hook.frontends.nri.wire import api

    monkeypatch.setattr(handlers_module, "_ADJUSTMENT_BYTES", {})
    first = format_adjustment(adj)
    reply = api.CreateContainerResponse()
    again = format_adjustment(adj, reply.adjust)  # from the memo, into a reply's field
    assert again is reply.adjust and again == first
    cpu = first.linux.resources.cpu
    assert cpu.cpus == format_cpulist(adj.cpus)
    assert (cpu.HasField("quota"), cpu.quota.value) == ((True, adj.quota) if adj.quota is not None else (False, 0))
    assert (cpu.HasField("period"), cpu.period.value) == ((True, adj.period) if adj.period else (False, 0))
    assert [(e.key, e.value) for e in first.env] == list(adj.env)
