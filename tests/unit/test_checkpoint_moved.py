"""Which tracked containers a new kubelet checkpoint can move (node.kubelet.compute_moved,
compute_claimed_twice; usecases.nri.compute_checkpoint_moved): kubelet rewrites the whole file at
every allocation, and the NRI engine decides again only the containers whose entries changed."""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import pytest

from mixed_cpus_hook.core.cpuset import parse_cpulist
from mixed_cpus_hook.node.facts import NodeFacts
from mixed_cpus_hook.node.kubelet import Checkpoint, Moved, compute_claimed_twice, compute_moved
from mixed_cpus_hook.usecases.nri import compute_checkpoint_moved


def ckpt(entries: Dict[str, Dict[str, str]], by_id: Optional[Dict[str, str]] = None) -> Checkpoint:
    return Checkpoint("static", frozenset(), {u: {n: parse_cpulist(c) for n, c in per.items()} for u, per in entries.items()},
                      "/var/lib/kubelet/cpu_manager_state", {i: parse_cpulist(c) for i, c in (by_id or {}).items()})


CLAIMED_TWICE: List[Tuple[str, Checkpoint, str]] = [
    ("none", ckpt({}), ""),
    ("disjoint", ckpt({"p1": {"a": "2-3", "b": "4"}, "p2": {"c": "5-7"}}), ""),
    ("two-pods-one-cpu", ckpt({"p1": {"a": "2-3"}, "p2": {"c": "3-5"}}), "3"),
    ("one-pod-two-containers", ckpt({"p1": {"a": "2-4", "b": "4-6"}}), "4"),
    ("three-claim-one", ckpt({"p1": {"a": "2"}, "p2": {"b": "2"}, "p3": {"c": "2-3"}}), "2"),
    ("v1-ids", ckpt({}, {"c1": "2-3", "c2": "3"}), "3"),
]


@pytest.mark.parametrize("checkpoint,expected", [c[1:] for c in CLAIMED_TWICE], ids=[c[0] for c in CLAIMED_TWICE])
def test_compute_claimed_twice(checkpoint: Checkpoint, expected: str) -> None:
    assert compute_claimed_twice(checkpoint) == (parse_cpulist(expected) if expected else frozenset())


MOVED: List[Tuple[str, Checkpoint, Checkpoint, Moved]] = [
    ("unchanged", ckpt({"p1": {"a": "2-3"}}), ckpt({"p1": {"a": "2-3"}}), Moved(frozenset(), frozenset(), frozenset())),
    ("one-added", ckpt({"p1": {"a": "2-3"}}), ckpt({"p1": {"a": "2-3"}, "p2": {"b": "4"}}),
     Moved(frozenset({("p2", "b")}), frozenset(), frozenset())),
    ("one-removed", ckpt({"p1": {"a": "2-3"}, "p2": {"b": "4"}}), ckpt({"p1": {"a": "2-3"}}),
     Moved(frozenset({("p2", "b")}), frozenset(), frozenset())),
    ("one-moved-a-sibling-kept", ckpt({"p1": {"a": "2-3", "b": "4"}}), ckpt({"p1": {"a": "6-7", "b": "4"}}),
     Moved(frozenset({("p1", "a")}), frozenset(), frozenset())),
    ("moved-onto-another", ckpt({"p1": {"a": "2-3"}, "p2": {"b": "4"}}), ckpt({"p1": {"a": "2-3"}, "p2": {"b": "3-4"}}),
     Moved(frozenset({("p2", "b")}), frozenset(), frozenset({3}))),
    ("v1-id-moved", ckpt({}, {"c1": "2", "c2": "3"}), ckpt({}, {"c1": "2", "c2": "5"}),
     Moved(frozenset(), frozenset({"c2"}), frozenset())),
    ("contested-before-only", ckpt({"p1": {"a": "2"}, "p2": {"b": "2"}}), ckpt({"p1": {"a": "2"}, "p2": {"b": "5"}}),
     Moved(frozenset({("p2", "b")}), frozenset(), frozenset({2}))),
]


@pytest.mark.parametrize("before,now,expected", [c[1:] for c in MOVED], ids=[c[0] for c in MOVED])
def test_compute_moved(before: Checkpoint, now: Checkpoint, expected: Moved) -> None:
    assert compute_moved(before, now) == expected


def facts(checkpoint: Optional[Checkpoint], shared: str = "0-1", online: str = "0-7", **more: Any) -> NodeFacts:
    return NodeFacts(None, parse_cpulist(shared), "/etc/mixed-cpus-hook/shared-cpus", parse_cpulist(online),
                     checkpoint, **more)


ONE, TWO = ckpt({"p1": {"a": "2-3"}}), ckpt({"p1": {"a": "2-3"}, "p2": {"b": "4"}})
FACTS: List[Tuple[str, Optional[NodeFacts], NodeFacts, Optional[FrozenSet[Tuple[str, str]]]]] = [
    ("only-entries-changed", facts(ONE, generation=1), facts(TWO, generation=2), frozenset({("p2", "b")})),
    ("first-pass", None, facts(TWO), None),
    ("checkpoint-appeared", facts(None), facts(TWO), None),
    ("checkpoint-went", facts(ONE), facts(None), None),
    ("shared-changed-too", facts(ONE), facts(TWO, shared="0-2"), None),
    ("online-changed-too", facts(ONE), facts(TWO, online="0-15"), None),
    ("checkpoint-refused-now", facts(ONE), facts(TWO, checkpoint_note="policy 'none'"), None),
    ("pool-changed-too", facts(ONE, pool=True, shared="0-5"), facts(TWO, pool=True, shared="0-1,5"), None),
]


@pytest.mark.parametrize("before,now,keys", [c[1:] for c in FACTS], ids=[c[0] for c in FACTS])
def test_compute_checkpoint_moved_only_when_nothing_else_changed(before: Optional[NodeFacts], now: NodeFacts,
                                                                 keys: Optional[FrozenSet[Tuple[str, str]]]) -> None:
    moved = compute_checkpoint_moved(before, now)
    assert (None if moved is None else moved.keys) == keys
