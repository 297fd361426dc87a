"""Records are input too: one corrupt record or pod record breaks its container(s), nothing else.

A fake node with two pods: pod A runs mixed containers a1 and a2, pod B runs b1; all three
are applied, then kubelet rewrites every cpuset to the exclusive CPUs alone, then one file
of the state directory is broken (a row of the table). For every row:

* ``reconcile`` says one line per skipped container naming the file and the problem, leaves
  that container's cgroup and its pod's quota alone (not even rewritten), never repairs or
  re-creates the broken file, and still restores every other container, other pods' included;
* ``status --json`` lists the skipped container(s) with ``"broken": true`` and a ``problem``
  naming the file, and the others in sync;
* ``release`` of a skipped container under ``failure_policy: ignore`` exits 0.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, FrozenSet, NamedTuple

import pytest

POD_A = "0f1e2d3c-aaaa-bbbb-cccc-00000000000a"
POD_B = "0f1e2d3c-aaaa-bbbb-cccc-00000000000b"
# container id -> (pod uid, container name)
CONTAINERS = {"a1": (POD_A, "app1"), "a2": (POD_A, "app2"), "b1": (POD_B, "app1")}
EXCLUSIVE, MIXED = "2-3", "0-3"
DEEP = 100000


class World:
    """The fake node, the three containers' paths and the config."""

    def __init__(self, node: Any) -> None:
        self.node = node
        # kubelet's checkpoint: none (never the host's /var/lib/kubelet)
        self.config = node.configure(kubelet_state_file=os.path.join(node.root, "no-kubelet-state"))
        self.paths = {cid: node.add_container(cid, name=name, pod_uid=uid, quota=200000,
                                              pod_quota=400000 if uid == POD_A else 200000)
                      for cid, (uid, name) in CONTAINERS.items()}

    def record(self, kind: str, name: str) -> str:
        return os.path.join(self.node.state_dir, kind, name + ".json")

    def container(self, cid: str) -> str:
        return self.record("containers", cid)

    def pod(self, uid: str) -> str:
        return self.record("pods", f"pod{uid}")

    def cpus(self, cid: str) -> str:
        return self.node.read(self.paths[cid]["rel"], "cpuset.cpus")

    def quota_file(self, cid: str, pod: bool = False) -> str:
        return os.path.realpath(self.node.path(self.paths[cid]["pod_rel" if pod else "rel"], self.node.quota_name()))


# -- how a file is broken -------------------------------------------------------------------------


def edit(change: Callable[[Dict[str, Any]], Any]) -> Callable[[str], None]:
    def run(path: str) -> None:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        change(doc)
        write(json.dumps(doc))(path)
    return run


def write(text: str) -> Callable[[str], None]:
    def run(path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return run


def truncate(path: str) -> None:
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])


def pad_past_a_mebibyte(path: str) -> None:
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data.rstrip() + b" " * (1 << 20) + b"\n")


def symlink_to_a_copy(path: str) -> None:
    target = path + ".elsewhere"  # not a ".json": not listed as a record of its own
    os.rename(path, target)
    os.symlink(os.path.basename(target), path)


def delete(path: str) -> None:
    os.unlink(path)


class Row(NamedTuple):
    kind: str  # "containers": a1's record; "pods": pod A's record
    breaks: Callable[[str], None]
    problem: str  # in the message, after the file's path
    broken: FrozenSet[str] = frozenset(("a1",))


POD_A_BOTH = frozenset(("a1", "a2"))
ROWS: Dict[str, Row] = {
    "exclusive-is-a-number": Row("containers", edit(lambda d: d.update(exclusive=5)), "exclusive"),
    "cgroup-missing": Row("containers", edit(lambda d: d.pop("cgroup")), "cgroup"),
    "quota-base-is-text": Row("containers", edit(lambda d: d["quota"].update(base="200000")), "quota.base"),
    "ours-not-a-list": Row("containers", edit(lambda d: d["quota"].update(ours=200000)), "quota.ours"),
    "phase-unknown": Row("containers", edit(lambda d: d.update(phase="half-done")), "phase"),
    "id-of-another-container": Row("containers", edit(lambda d: d.update(id="b1")), "id"),
    "truncated": Row("containers", truncate, "not JSON"),
    "empty": Row("containers", write(""), "not JSON"),
    "not-an-object": Row("containers", write("[]"), "not a JSON object"),
    "nested-deeply": Row("containers", write('{"schema": 1, "x": ' + "[" * DEEP), "nested too deeply"),
    "huge": Row("containers", pad_past_a_mebibyte, "larger than"),
    "symlinked": Row("containers", symlink_to_a_copy, "symbolic link"),
    "pod-record-deleted": Row("pods", delete, "missing", POD_A_BOTH),
    "pod-members-is-a-number": Row("pods", edit(lambda d: d.update(members=5)), "members", POD_A_BOTH),
    "pod-members-lost-one": Row("pods", edit(lambda d: d.update(members=[m for m in d["members"] if m["id"] == "a2"])), "does not list it"),
    "pod-quota-is-text": Row("pods", edit(lambda d: d.update(quota="lots")), "quota", POD_A_BOTH),
    "pod-truncated": Row("pods", truncate, "not JSON", POD_A_BOTH),
    "pod-not-an-object": Row("pods", write('"pod"'), "not a JSON object", POD_A_BOTH),
    "pod-symlinked": Row("pods", symlink_to_a_copy, "symbolic link", POD_A_BOTH),
}


def test_the_table_covers_the_issue() -> None:
    assert len(ROWS) >= 15


def _state(path: str) -> Any:
    """What the broken file is now: its bytes, a symlink's target, or None when absent."""
    if os.path.islink(path):
        return ("symlink", os.readlink(path))
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("row", list(ROWS.values()), ids=list(ROWS))
def test_a_corrupt_record_breaks_only_its_containers(node: Any, run_hook: Callable, run_cli: Callable,
                                                     row: Row) -> None:
    w = World(node)
    for cid in CONTAINERS:
        result = run_hook(["--config", w.config, "apply", "--state", w.paths[cid]["state"]])
        assert result.code == 0, result.err
    for cid in CONTAINERS:  # kubelet's CPU manager after a restart
        node.write(w.paths[cid]["rel"], "cpuset.cpus", EXCLUSIVE)
    broken_file = w.container("a1") if row.kind == "containers" else w.pod(POD_A)
    row.breaks(broken_file)
    broken_now = _state(broken_file)
    pod_quotas = {uid: node.quota(w.paths[cid]["pod_rel"]) for cid, (uid, _n) in CONTAINERS.items()}
    healthy = [c for c in CONTAINERS if c not in row.broken]
    before = node.freeze()

    result = run_cli(["--config", w.config, "reconcile"])
    assert "Traceback" not in result.err
    assert result.code == 1, result.err  # the others were fixed, but not every container is as it should be
    assert broken_file not in result.out, result.out  # said once, on stderr (and in the journal)
    errors = [line for line in result.err_lines if line.startswith("mixed-cpus-hook: error: ")]
    assert errors and all(broken_file in line and row.problem in line for line in errors), result.err
    named = sorted(c for line in errors for c in CONTAINERS if f"container {c}: " in line)
    assert named == sorted(row.broken), result.err  # one line for each skipped container, none for the others
    assert {c: w.cpus(c) for c in CONTAINERS} == {c: EXCLUSIVE if c in row.broken else MIXED for c in CONTAINERS}
    # Only the healthy containers' cpusets were written in the cgroup tree: no quota of a
    # broken container's pod, not even with the same value.
    root = os.path.realpath(node.cgroup_root)
    written = sorted(p for p in node.changes(before) if p.startswith(root))
    assert written == sorted(os.path.realpath(node.path(w.paths[c]["rel"], "cpuset.cpus")) for c in healthy)
    assert {uid: node.quota(w.paths[c]["pod_rel"]) for c, (uid, _n) in CONTAINERS.items()} == pod_quotas
    assert _state(broken_file) == broken_now  # never repaired, re-created or removed behind one's back

    result = run_cli(["--config", w.config, "status", "--json"])
    assert result.code == 1, result.err
    rows = {r["id"]: r for r in json.loads(result.out)["rows"]}
    assert sorted(rows) == sorted(CONTAINERS)
    for cid, r in rows.items():
        if cid in row.broken:
            assert r["broken"] is True and r["in_sync"] is False, r
            assert broken_file in r["problem"] and row.problem in r["problem"], r
        else:
            assert r["broken"] is False and r["in_sync"] is True and not r["problem"], r

    node.configure(kubelet_state_file=os.path.join(node.root, "no-kubelet-state"), failure_policy="ignore")
    for cid in sorted(row.broken):
        result = run_hook(["--config", w.config, "release", "--state", w.paths[cid]["state"]])
        assert result.code == 0, result.err
        assert all(line.endswith("(ignored: failure_policy is ignore)") for line in result.err_lines
                   if line.startswith("mixed-cpus-hook: error: ")), result.err


def test_the_healthy_pod_is_released_normally(node: Any, run_hook: Callable) -> None:
    """A broken record of pod A never holds up pod B: b1's release gives its share back."""
    w = World(node)
    for cid in CONTAINERS:
        assert run_hook(["--config", w.config, "apply", "--state", w.paths[cid]["state"]]).code == 0
    write("{")(w.container("a1"))
    pod_b = w.paths["b1"]["pod_rel"]
    assert node.quota(pod_b) == "400000"
    result = run_hook(["--config", w.config, "release", "--state", w.paths["b1"]["state"]])
    assert result.code == 0 and result.err == "", result.err
    assert node.quota(pod_b) == "200000"
    assert sorted(node.records("pods")) == [f"pod{POD_A}"]
