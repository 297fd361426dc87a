"""Issue 9 end to end on fake nodes: kubelet's CPU manager checkpoint is the truth about a
container's exclusive CPUs, for apply, reconcile, status and the NRI entry points.

Every node: CPUs 0-7 online, shared 0-1, container ``abc`` (pod UID ``POD``, name ``app``)
whose config.json says cpus 2-3. Checkpoints are written in kubelet's real format (V2: pod UID
-> container name; V1: container id) with kubelet's checksum (fakenode.write_checkpoint).
Each test runs on cgroup v1 and v2 and with both checkpoint formats.
"""

from __future__ import annotations

import json
import os
import syslog
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import pytest

from mixed_cpus_hook.core.cgroup import Quota
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.usecases.nri import ContainerFacts, NriEngine

POD = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"
OTHER_POD = "99999999-aaaa-bbbb-cccc-123456789abc"
CID = "abc"
# A real runtime's id: 64 hex digits; status prints 12 of them.
LONG_ID = "3f7c0a9be41d2c5f8a6b7e0d9c1b2a3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b"
EXIT_DRIFT = 3


class Truth:
    """One fake node with one asking container, and the commands an admin would run on it."""

    def __init__(self, node: Any, fmt: str, run_hook: Callable[..., Any], run_cli: Callable[..., Any]) -> None:
        self.node, self.fmt, self._hook, self._cli = node, fmt, run_hook, run_cli
        self.paths = node.add_container(CID, cpus="2-3", quota=200000, pod_quota=400000)
        self.rel = self.paths["rel"]

    # kubelet's side
    def entries(self, cpus: Dict[str, str]) -> Dict[str, Any]:
        """``{container id: cpulist}`` in this test's format (the V2 key is the pod UID + name)."""
        if self.fmt == "v1":
            return dict(cpus)
        out: Dict[str, Dict[str, str]] = {}
        for cid, value in cpus.items():
            uid, name = (POD, "app") if cid == CID else (OTHER_POD, cid)
            out.setdefault(uid, {})[name] = value
        return out

    def checkpoint(self, mine: Optional[str], **others: str) -> str:
        """kubelet's checkpoint with this container's entry (None: no entry) and others'."""
        cpus = dict(others)
        if mine is not None:
            cpus[CID] = mine
        return self.node.write_checkpoint(self.entries(cpus))

    def foreign_write(self, cpus: str) -> None:
        """`echo CPUS > cpuset.cpus`: kubelet's rewrite or anyone's."""
        self.node.write(self.rel, "cpuset.cpus", cpus)

    # the admin's side
    def apply(self) -> Any:
        res = self._hook(["--config", self.node.config_path, "apply", "--state", self.paths["state"]])
        assert res.code == 0, res.err
        return res

    def cli(self, *argv: str) -> Any:
        return self._cli(["--config", self.node.config_path, *argv])

    def status(self) -> List[Dict[str, Any]]:
        res = self.cli("status", "--json")
        return json.loads(res.out)["rows"]

    def cpuset(self) -> str:
        return self.node.read(self.rel, "cpuset.cpus")

    def record(self) -> Dict[str, Any]:
        return self.node.records("containers")[CID]


@pytest.fixture(params=[(1, "v2"), (2, "v2"), (1, "v1"), (2, "v1")], ids=["cg1-ckpt2", "cg2-ckpt2", "cg1-ckpt1",
                                                                           "cg2-ckpt1"])
def truth(request: pytest.FixtureRequest, fake_node: Callable[..., Any], run_hook: Callable[..., Any],
          run_cli: Callable[..., Any]) -> Truth:
    version, fmt = request.param
    return Truth(fake_node(version=version, online="0-7", shared="0-1"), fmt, run_hook, run_cli)


def warnings(res: Any) -> List[str]:
    return [m for p, m in res.syslog if p == syslog.LOG_WARNING]


def errors(res: Any) -> List[str]:
    return [m for p, m in res.syslog if p == syslog.LOG_ERR]


# -- the fake node's checkpoint is kubelet's format ---------------------------------------------

def test_write_checkpoint_is_byte_for_byte_what_kubelet_wrote(fake_node: Callable[..., Any]) -> None:
    """A file from a real node (tests/unit/test_kubelet.py, node:static-one-pod), rebuilt by the helper."""
    node = fake_node(online="0-23")
    path = node.write_checkpoint({"235148fe-393f-47a8-a17d-bd55bc1a836b": {"cgroup1-0": "1,13"}})
    assert path == os.path.join(node.root, "var/lib/kubelet/cpu_manager_state")
    with open(path, encoding="utf-8") as f:
        assert f.read() == ('{"policyName":"static","defaultCpuSet":"0,2-12,14-23","entries":{'
                            '"235148fe-393f-47a8-a17d-bd55bc1a836b":{"cgroup1-0":"1,13"}},"checksum":1552716370}')
    assert load_config(node.config_path).kubelet_state_file == path


# -- apply --------------------------------------------------------------------------------------

@pytest.mark.parametrize("entry,desired,refused", [
    pytest.param("4-5", "0-1,4-5", "2-3", id="entry-differs-from-config-json"),
    pytest.param("2-3", "0-3", "", id="entry-same-as-config-json"),
    pytest.param("2-5", "0-5", "", id="entry-wider-than-config-json"),
])
def test_apply_takes_the_checkpoint_entry(truth: Truth, entry: str, desired: str, refused: str) -> None:
    truth.checkpoint(entry)
    res = truth.apply()
    assert res.err == ""
    assert truth.cpuset() == desired
    rec = truth.record()
    assert (rec["exclusive"], rec["exclusive_source"], rec["desired"]) == (entry, "kubelet-checkpoint", desired)
    said = [w for w in warnings(res) if "kubelet's checkpoint" in w]
    assert bool(said) == bool(refused), res.syslog
    if refused:
        assert said == [f"container abc: cgroup held 2-3: CPUs {refused} are not this container's in kubelet's "
                        "checkpoint, refused"]


# -- a foreign write with the checkpoint: refused, entry ∪ shared written back ------------------

@pytest.mark.parametrize("written,refused", [
    pytest.param("0-7", "2-3,6-7", id="every-cpu"),
    pytest.param("4-7", "6-7", id="wider-without-shared"),
    pytest.param("0-1,4-6", "6", id="one-cpu-more"),
    pytest.param("0-3", "2-3", id="config-json-cpus-instead"),
])
def test_foreign_write_is_refused_and_written_back(truth: Truth, written: str, refused: str) -> None:
    truth.checkpoint("4-5")
    truth.apply()
    truth.foreign_write(written)

    # status before the reconcile: the drift and the refusal, exit 3
    res = truth.cli("status", "--json")
    assert res.code == EXIT_DRIFT, res.out + res.err
    (row,) = json.loads(res.out)["rows"]
    assert row["drift"] == [{"field": "cpuset", "desired": "0-1,4-5", "actual": written}]
    assert (row["exclusive"], row["exclusive_source"], row["in_sync"]) == ("4-5", "kubelet-checkpoint", False)
    note = f"cgroup held {written}: CPUs {refused} are not this container's in kubelet's checkpoint, refused"
    assert row["problem"] == f"{note}; cpuset is {written}, should be 0-1,4-5"
    table = truth.cli("status")
    assert note in " ".join(table.out.split()) and "None" not in table.out

    res = truth.cli("reconcile")
    assert res.code == 0, res.err
    assert truth.cpuset() == "0-1,4-5"
    assert f"cpuset.cpus: {written} -> 0-1,4-5" in res.out
    assert f"container abc: {note}" in warnings(res)
    assert (truth.record()["exclusive"], truth.record()["exclusive_source"]) == ("4-5", "kubelet-checkpoint")
    assert truth.cli("status").code == 0


def test_foreign_write_of_another_containers_cpus(truth: Truth) -> None:
    """CPUs kubelet assigned to another container are never adopted, and are named as refused."""
    truth.checkpoint("2-3", xyz="4-5")
    truth.apply()
    truth.foreign_write("0-5")
    res = truth.cli("reconcile")
    assert res.code == 0, res.err
    assert truth.cpuset() == "0-3"
    assert "container abc: cgroup held 0-5: CPUs 4-5 are not this container's in kubelet's checkpoint, refused" in (
        warnings(res))
    assert truth.record()["exclusive"] == "2-3"


def test_checkpoint_entry_overlapping_another_containers_entry(truth: Truth) -> None:
    """A checkpoint kubelet cannot have written (one CPU given to two containers): never adopted.

    The container's cgroup is left alone and the error names the file and both entries.
    """
    truth.checkpoint("2-3")
    truth.apply()
    truth.checkpoint("2-5", xyz="4-5")
    before = truth.node.freeze()
    res = truth.cli("reconcile")
    assert res.code == 1
    assert truth.node.changes(before) == []
    (line,) = errors(res)
    other = "entries.xyz" if truth.fmt == "v1" else f"entries.{OTHER_POD}.xyz"
    assert line == (f"container abc: {truth.node.kubelet_state}: assigns 2-5 to this container, but CPUs 4-5 also "
                    f"to {other}: kubelet never does, not used")
    (row,) = truth.status()
    assert "also to" in row["problem"] and not row["in_sync"]


# -- kubelet restarts: the checkpoint goes away, comes back with new entries --------------------

def test_kubelet_restart_follows_the_new_entry(truth: Truth) -> None:
    truth.checkpoint("4-5")
    truth.apply()
    # kubelet.service's ExecStartPre removes the file: fall back to the record, write nothing
    truth.node.remove_checkpoint()
    before = truth.node.freeze()
    res = truth.cli("reconcile")
    assert (res.code, res.out) == (0, ""), res.err
    assert truth.node.changes(before) == []
    (row,) = truth.status()
    assert row["in_sync"] and row["exclusive"] == "4-5" and row["exclusive_source"] == "record"
    # kubelet starts and writes its checkpoint before re-admitting the pod: no entry yet
    truth.checkpoint(None)
    res = truth.cli("reconcile")
    assert (res.code, res.out) == (0, ""), res.err
    assert truth.node.changes(before) == []
    # kubelet re-admits it with NEW exclusive CPUs: reconcile follows at once
    truth.checkpoint("6-7")
    (row,) = truth.status()
    assert row["drift"] == [{"field": "cpuset", "desired": "0-1,6-7", "actual": "0-1,4-5"}]
    res = truth.cli("reconcile")
    assert res.code == 0, res.err
    assert truth.cpuset() == "0-1,6-7"
    rec = truth.record()
    assert (rec["exclusive"], rec["exclusive_source"], rec["desired"]) == ("6-7", "kubelet-checkpoint", "0-1,6-7")
    assert truth.cli("status").code == 0


def test_kubelet_restart_and_kubelets_own_rewrite(truth: Truth) -> None:
    """kubelet writes the new entry and then the container's cpuset (exclusive only): no refusal."""
    truth.checkpoint("4-5")
    truth.apply()
    truth.node.remove_checkpoint()
    truth.checkpoint("6-7")
    truth.foreign_write("6-7")
    res = truth.cli("reconcile")
    assert res.code == 0, res.err
    assert truth.cpuset() == "0-1,6-7"
    assert not [w for w in warnings(res) if "refused" in w], res.syslog
    assert truth.record()["exclusive"] == "6-7"


# -- what is not the truth ----------------------------------------------------------------------

def test_checkpoint_of_another_policy_is_not_used(truth: Truth) -> None:
    """policyName "none": kubelet makes no exclusive assignment; config.json's cpus are used."""
    truth.node.write_checkpoint(truth.entries({CID: "6-7"}), policy="none")
    res = truth._hook(["--config", truth.node.config_path, "apply", "--state", truth.paths["state"]])
    assert res.code == 0
    assert res.err_lines == [f"mixed-cpus-hook: warning: kubelet checkpoint {truth.node.kubelet_state}: policy "
                             "'none', not 'static': not used"]
    assert truth.cpuset() == "0-3"
    assert (truth.record()["exclusive"], truth.record()["exclusive_source"]) == ("2-3", "spec")


@pytest.mark.parametrize("written,after,exclusive", [
    pytest.param("2-3", "0-3", "2-3", id="kubelets-rewrite-written-back"),
    pytest.param("0-7", "0-3", "2-3", id="widened-shrinks-back"),
    pytest.param("4-5", "0-1,4-5", "4-5", id="kubelets-new-assignment"),
    pytest.param("0-1", "0-1", "2-3", id="shared-only-is-a-conflict"),
    pytest.param("0-1,6-7", "0-1,6-7", "2-3", id="kubelets-shared-pool-is-a-conflict"),
])
def test_without_a_checkpoint_todays_behaviour(truth: Truth, written: str, after: str, exclusive: str) -> None:
    """No checkpoint file (a non-kubelet node, another policy): config.json, then the records.

    A cpuset holding shared CPUs that is not the recorded mixed set (nor a superset of it) is a
    conflict: nothing written, an error logged, the row drifted (reconcile exits 0: the run
    itself worked; status exits 3).
    """
    truth.apply()
    assert (truth.cpuset(), truth.record()["exclusive_source"]) == ("0-3", "spec")
    truth.foreign_write(written)
    before = truth.node.freeze()
    res = truth.cli("reconcile")
    assert res.code == 0, res.err
    assert truth.cpuset() == after
    assert truth.record()["exclusive"] == exclusive
    conflict = written == after
    assert bool(errors(res)) is conflict, res.syslog
    if conflict:
        assert truth.node.changes(before) == []
        assert errors(res) == [f"container abc: cpuset {written} holds shared CPUs but is not the recorded mixed set "
                               "0-3: kubelet's shared pool or a foreign write, not adopted, nothing written"]
        res = truth.cli("status", "--json")
        assert res.code == EXIT_DRIFT
        (row,) = json.loads(res.out)["rows"]
        assert row["exclusive"] == "2-3" and row["problem"].startswith(f"cpuset {written} holds shared CPUs")


@pytest.mark.parametrize("written", ["0-1", "0-7", "0-1,6-7"], ids=["shared-only", "every-cpu", "kubelets-pool"])
def test_shared_pool_rewrite_with_the_checkpoint(truth: Truth, written: str) -> None:
    """With the checkpoint a shared-pool rewrite is settled: the entry ∪ shared goes back."""
    truth.checkpoint("2-3")
    truth.apply()
    truth.foreign_write(written)
    res = truth.cli("reconcile")
    assert res.code == 0 and not errors(res), res.err
    assert truth.cpuset() == "0-3"
    assert (truth.record()["exclusive"], truth.record()["exclusive_source"]) == ("2-3", "kubelet-checkpoint")


# -- NRI: admit and update with the checkpoint --------------------------------------------------

def _facts(truth: Truth, cpus: str = "2-3") -> ContainerFacts:
    from mixed_cpus_hook.core.cpuset import parse_cpulist

    ann = {"io.kubernetes.pod.namespace": "ran", "io.kubernetes.pod.name": "du-0", "io.kubernetes.pod.uid": POD,
           "io.kubernetes.container.name": "app", "mixed-cpus.openshift.io/app": "enable"}
    return ContainerFacts(CID, ann, parse_cpulist(cpus), Quota(200000, 100000), "/" + truth.rel,
                          "/" + truth.paths["pod_rel"])


def test_nri_admit_and_update_follow_the_checkpoint(truth: Truth, reporter: Any) -> None:
    from mixed_cpus_hook.core.cpuset import parse_cpulist as cpus

    engine = NriEngine(load_config(truth.node.config_path), reporter.reporter)
    truth.checkpoint("4-5")
    adj = engine.create(_facts(truth)).adjust
    assert adj is not None
    assert (adj.cpus, adj.exclusive, adj.quota) == (cpus("0-1,4-5"), cpus("4-5"), 400000)
    assert dict(adj.env)["OPENSHIFT_ISOLATED_CPUS"] == "4-5"
    assert truth.record()["exclusive_source"] == "kubelet-checkpoint"
    # idempotent: the same answer, and nothing written the second time (no lines)
    again = engine.create(_facts(truth))
    assert again.adjust == adj and again.outcome.lines == ()
    # kubelet's update with config.json's old cpus: the checkpoint still says 4-5; the rewrite is
    # logged, its line made once the answer is on its way (the plugin holds the lines until then)
    reporter.reporter.hold()
    adj = engine.update(CID, cpus("2-3"), None).adjust
    assert adj is not None and adj.cpus == cpus("0-1,4-5")
    assert not any("update rewritten" in m for _p, m in reporter.sink.messages)
    reporter.reporter.release()
    assert [m for _p, m in reporter.sink.messages if "update rewritten" in m] == [
        f"container {CID}: update rewritten: cpus 2-3 -> 0-1,4-5, quota (unchanged) -> 400000"]
    # kubelet restarted and moved it to 6-7: its update and the checkpoint agree
    truth.checkpoint("6-7")
    adj = engine.update(CID, cpus("6-7"), Quota(200000, 100000)).adjust
    assert adj is not None and (adj.cpus, adj.exclusive, adj.quota) == (cpus("0-1,6-7"), cpus("6-7"), 400000)
    assert truth.record()["exclusive"] == "6-7"
    # a shared-pool update is rewritten to the checkpoint's entry, never recorded as exclusive
    adj = engine.update(CID, cpus("0-7"), None).adjust
    assert adj is not None and adj.cpus == cpus("0-1,6-7")
    assert truth.record()["exclusive"] == "6-7"


def test_nri_admit_refuses_an_entry_on_the_shared_cpus(truth: Truth, reporter: Any) -> None:
    engine = NriEngine(load_config(truth.node.config_path), reporter.reporter)
    truth.checkpoint("1-2")
    assert engine.create(_facts(truth)).adjust is None
    assert "overlaps the shared CPUs 0-1" in reporter.stream.getvalue()
    assert truth.node.records("containers") == {}


# -- "Tried as a new user would": each of the first paragraph, on a fake node -----------

def by_id(rows: List[Dict[str, Any]], cid: str) -> Dict[str, Any]:
    (row,) = [r for r in rows if r["id"] == cid]
    return row


class Admin(NamedTuple):
    node: Any
    ids: List[str]
    rels: List[str]


@pytest.fixture
def admin(node: Any, run_hook: Callable[..., Any]) -> Admin:
    """Two containers with real-length ids in two pods, applied (node: online 0-3, shared 0-1)."""
    ids = [LONG_ID, "3f7c0a9be41d" + "0" * 52]  # the same 12-character prefix, differing at the 13th
    rels = []
    for i, cid in enumerate(ids):
        paths = node.add_container(cid, cpus="2" if i == 0 else "3", quota=100000, pod_quota=100000,
                                   pod_uid=POD if i == 0 else OTHER_POD)
        res = run_hook(["--config", node.config_path, "apply", "--state", paths["state"]])
        assert res.code == 0, res.err
        rels.append(paths["rel"])
    return Admin(node, ids, rels)


def test_status_with_a_shared_cpu_offline_lists_every_container(admin: Admin, run_cli: Callable[..., Any]) -> None:
    node = admin.node
    with open(os.path.join(node.sys_root, "devices/system/cpu/online"), "w", encoding="ascii") as f:
        f.write("1-3\n")
    res = run_cli(["--config", node.config_path, "status"])
    assert res.code == 1
    why = f"{node.shared_file}: shared CPUs (offline or absent) 0 not in 1-3"
    lines = res.out.splitlines()
    assert [line.split()[0] for line in lines[1:3]] == [i[:12] for i in admin.ids]
    text = " ".join(res.out.split())  # long lines are wrapped at 100 columns
    per_row, _, node_wide = text.partition("node problems:")
    assert per_row.count(f"3f7c0a9be41d: node facts unreadable: {why}") == 2
    assert node_wide.strip() == why
    assert "None" not in res.out
    rows = json.loads(run_cli(["--config", node.config_path, "status", "--json"]).out)["rows"]
    assert [r["problem"] for r in rows] == [f"node facts unreadable: {why}"] * 2


@pytest.mark.parametrize("prefix,found", [
    pytest.param(LONG_ID[:13], LONG_ID, id="13-characters"),
    pytest.param(LONG_ID, LONG_ID, id="whole-id"),
    pytest.param("3f7c0a9be41d0", "3f7c0a9be41d" + "0" * 52, id="13-characters-of-the-other"),
])
def test_reconcile_container_prefix(admin: Admin, run_cli: Callable[..., Any], prefix: str, found: str) -> None:
    node = admin.node
    for rel, exclusive in zip(admin.rels, ("2", "3")):
        node.write(rel, "cpuset.cpus", exclusive)  # kubelet's rewrite of each
    res = run_cli(["--config", node.config_path, "reconcile", "--container", prefix])
    assert res.code == 0, res.err
    assert res.out.startswith(f"container {found}: ") and len(res.out.splitlines()) == 1, res.out
    done = admin.rels[admin.ids.index(found)]
    assert node.read(done, "cpuset.cpus") == ("0-2" if found == LONG_ID else "0-1,3")
    other = admin.rels[1 - admin.ids.index(found)]
    assert node.read(other, "cpuset.cpus") in ("2", "3")


@pytest.mark.parametrize("prefix,message", [
    pytest.param(LONG_ID[:12], f"'{LONG_ID[:12]}' is ambiguous: 2 tracked containers start with it", id="12-ambiguous"),
    pytest.param("deadbeef", "no tracked container has an id starting with 'deadbeef'", id="unknown"),
])
@pytest.mark.parametrize("command", ["reconcile", "status"])
def test_unknown_or_ambiguous_container_exits_1(admin: Admin, run_cli: Callable[..., Any], command: str,
                                                prefix: str, message: str) -> None:
    before = admin.node.freeze()
    res = run_cli(["--config", admin.node.config_path, command, "--container", prefix])
    assert (res.code, res.out) == (1, "")
    assert res.err.startswith("mixed-cpus-hook: error: unknown container: --container: ") and message in res.err
    assert admin.node.changes(before) == []


def test_drifted_row_names_fields_desired_and_actual(admin: Admin, run_cli: Callable[..., Any]) -> None:
    node = admin.node
    node.write(admin.rels[0], "cpuset.cpus", "2")
    node.set_quota(admin.rels[0], 100000)
    res = run_cli(["--config", node.config_path, "status", "--json"])
    assert res.code == EXIT_DRIFT
    row = by_id(json.loads(res.out)["rows"], LONG_ID)
    assert row["drift"] == [{"field": "cpuset", "desired": "0-2", "actual": "2"},
                            {"field": "quota", "desired": "300000", "actual": "100000"}]
    assert row["problem"] == "cpuset is 2, should be 0-2; quota is 100000, should be 300000"


def test_gone_cgroup_never_shows_none(admin: Admin, run_cli: Callable[..., Any]) -> None:
    node = admin.node
    for d in ([os.path.join(node.cgroup_root, h, admin.rels[0]) for h in ("cpuset", "cpu,cpuacct")]
              if node.version == 1 else [os.path.join(node.cgroup_root, admin.rels[0])]):
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)
    for argv in (["status"], ["status", "--wide"], ["status", "--json"]):
        res = run_cli(["--config", node.config_path, *argv])
        assert res.code == EXIT_DRIFT, res.out
        assert "None" not in res.out and "null" not in res.out, res.out
    row = by_id(json.loads(res.out)["rows"], LONG_ID)
    assert row["problem"] == "cgroup gone (reconcile will forget it)"
    assert all(v is not None for v in row.values())



# -- check: which source of truth is in use ---------------------------------------------------------

def _none(node: Any) -> None:
    node.write_checkpoint({}, policy="none")


@pytest.mark.parametrize("build,status,message", [
    pytest.param(lambda n: n.write_checkpoint({POD: {"app": "2-3"}}), "ok",
                 "kubelet's checkpoint {path} (policy static, checksum verified, 1 entry): the truth for exclusive CPUs",
                 id="checkpoint-used"),
    pytest.param(lambda n: n.write_checkpoint({CID: "2-3", "xyz": "4"}, checksum=0), "ok",
                 "kubelet's checkpoint {path} (policy static, checksum 0: not verified, 2 "
                 "entries)", id="checkpoint-v1-without-checksum"),
    pytest.param(lambda n: None, "ok", "no kubelet checkpoint at {path} (kubelet_state_file): using config.json's cpus "
                 "at start, then the records and cgroups", id="no-checkpoint"),
    pytest.param(lambda n: n.write_kubelet_state("{"), "warning",
                 "kubelet's checkpoint {path} is refused (not valid JSON (", id="corrupt"),
    pytest.param(lambda n: n.write_checkpoint({POD: {"app": "2-3"}}, checksum=7), "warning",
                 "kubelet's checkpoint {path} is refused (field 'checksum': 7 does not match the content", id="checksum"),
    pytest.param(_none, "warning", "kubelet's checkpoint {path} is of policy 'none', not 'static': not used",
                 id="policy-none"),
])
def test_check_says_which_source_is_in_use(fake_node: Callable[..., Any], build: Callable[[Any], Any], status: str,
                                           message: str) -> None:
    from mixed_cpus_hook.ops.doctor import _exclusive_source_findings, read_exclusive_source_facts

    node = fake_node(online="0-7")
    build(node)
    facts = {"exclusive_source": read_exclusive_source_facts(load_config(node.config_path), True),
             "kubelet": {"state_path": node.kubelet_state, "state_source": "option"}}
    (finding,) = _exclusive_source_findings(facts)
    assert (finding.check, finding.status) == ("exclusive-source", status)
    assert message.format(path=node.kubelet_state) in finding.message
    assert bool(finding.fix) is (status != "ok")


def test_check_warns_when_kubelet_keeps_its_state_elsewhere(fake_node: Callable[..., Any]) -> None:
    from mixed_cpus_hook.ops.doctor import _exclusive_source_findings, read_exclusive_source_facts

    node = fake_node(online="0-7")
    elsewhere = node.write_checkpoint({POD: {"app": "2-3"}}, path=os.path.join(node.root, "kubelet-root/cpu_manager_state"))
    facts = {"exclusive_source": read_exclusive_source_facts(load_config(node.config_path), True),
             "kubelet": {"state_path": elsewhere, "state_source": "kubelet's --root-dir"}}
    ok, moved = _exclusive_source_findings(facts)
    assert ok.status == "ok" and ok.message.startswith("no kubelet checkpoint at")
    assert moved.status == "warning"
    assert moved.message == (f"kubelet's CPU manager state is {elsewhere} (kubelet's --root-dir), but the hook reads "
                             f"{node.kubelet_state}")
    assert moved.fix == f"set kubelet_state_file: {elsewhere} in the configuration"
