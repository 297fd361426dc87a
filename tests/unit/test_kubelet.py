"""kubelet's CPU manager checkpoint: both entry formats, checksums kubelet computed, malformed files."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict

import pytest

from mixed_cpus_hook.core.errors import KubeletStateError
from mixed_cpus_hook.node.kubelet import (MAX_SIZE,
                                          Checkpoint,
                                          compute_assigned,
                                          compute_data_checksum,
                                          compute_fnv32a,
                                          compute_offline,
                                          compute_others,
                                          load_checkpoint,
                                          parse_checkpoint)

WHERE = "/var/lib/kubelet/cpu_manager_state"

# Files whose checksum kubelet computed. "node:" rows are `cat /var/lib/kubelet/cpu_manager_state`
# from real nodes, published in gengwg/k8s static_cpu_policy_kubelet.md and lx1036/code
# go/k8s/kubelet/pkg/cm/cpumanager/cpu-manager.md; "k8s:" rows are the contents kubelet's own
# tests restore successfully (kubernetes pkg/kubelet/cm/cpumanager/state/state_checkpoint_test.go,
# checksums produced by kubelet's code). Their checksums must verify.
KUBELET_WRITTEN = [
    pytest.param(
        '{"policyName":"static","defaultCpuSet":"0,50-127,178-255","entries":{'
        '"b200f08b-399a-4079-bfce-e415cb5344b8":{"gengwg-test":"2-49,130-177"},'
        '"d633f2d8-f174-43b3-8713-0b80d38d9259":{"node-exporter":"129"},'
        '"d6a85864-cf3f-45a3-baee-a9b3d5c2c4bc":{"driver":"128","registrar":"1"}},"checksum":1279870076}',
        "static", "0,50-127,178-255", {"b200f08b-399a-4079-bfce-e415cb5344b8": {"gengwg-test": "2-49,130-177"},
                                       "d633f2d8-f174-43b3-8713-0b80d38d9259": {"node-exporter": "129"},
                                       "d6a85864-cf3f-45a3-baee-a9b3d5c2c4bc": {"driver": "128", "registrar": "1"}},
        {}, id="node:static-three-pods"),
    pytest.param(
        '{"policyName":"static","defaultCpuSet":"0,2-127,130-255","entries":{'
        '"c049633f-a288-4c3f-a20b-69fa1bba4ca9":{"node-exporter":"129"},'
        '"f3209a26-d78e-4a22-81bb-55a8bcabae83":{"driver":"128","registrar":"1"}},"checksum":3270456661}',
        "static", "0,2-127,130-255", {"c049633f-a288-4c3f-a20b-69fa1bba4ca9": {"node-exporter": "129"},
                                      "f3209a26-d78e-4a22-81bb-55a8bcabae83": {"driver": "128", "registrar": "1"}},
        {}, id="node:static-two-pods"),
    pytest.param(
        '{"policyName":"static","defaultCpuSet":"0,13-63,141-191","entries":{'
        '"b761e594-0b6c-40e7-8dcf-bc45db599c19":{"gengwg-test":"2-12,64-127,130-140,192-255"},'
        '"d633f2d8-f174-43b3-8713-0b80d38d9259":{"node-exporter":"129"},'
        '"d6a85864-cf3f-45a3-baee-a9b3d5c2c4bc":{"driver":"128","registrar":"1"}},"checksum":636988944}',
        "static", "0,13-63,141-191", {"b761e594-0b6c-40e7-8dcf-bc45db599c19": {"gengwg-test": "2-12,64-127,130-140,192-255"},
                                      "d633f2d8-f174-43b3-8713-0b80d38d9259": {"node-exporter": "129"},
                                      "d6a85864-cf3f-45a3-baee-a9b3d5c2c4bc": {"driver": "128", "registrar": "1"}},
        {}, id="node:static-big-pod"),
    pytest.param(
        '{"policyName":"static","defaultCpuSet":"0,2-12,14-23","entries":{"235148fe-393f-47a8-a17d-bd55bc1a836b":'
        '{"cgroup1-0":"1,13"}},"checksum":1552716370}',
        "static", "0,2-12,14-23", {"235148fe-393f-47a8-a17d-bd55bc1a836b": {"cgroup1-0": "1,13"}}, {},
        id="node:static-one-pod"),
    pytest.param('{"policyName":"none","defaultCpuSet":"","checksum":3242152201}', "none", "", {}, {},
                 id="node:policy-none"),
    pytest.param('{"policyName": "none", "defaultCPUSet": "4-6", "entries": {}, "checksum": 354655845}',
                 "none", "4-6", {}, {}, id="k8s:v2-empty-entries"),
    pytest.param('{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"pod": {"container1": "4-6", '
                 '"container2": "1-3"}}, "checksum": 3610638499}',
                 "none", "1-3", {"pod": {"container1": "4-6", "container2": "1-3"}}, {}, id="k8s:v2-entries"),
    pytest.param('{"policyName": "other", "defaultCPUSet": "1-3", "entries": {}, "checksum": 1394507217}',
                 "other", "1-3", {}, {}, id="k8s:v2-other-policy"),
    pytest.param('{"policyName": "none", "defaultCPUSet": "1-3", "checksum": 1694838852}',
                 "none", "1-3", {}, {}, id="k8s:v1-checksum-no-entries"),
    pytest.param('{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"containerID1": "4-6", '
                 '"containerID2": "1-3"}, "checksum": 3680390589}',
                 "none", "1-3", {}, {"containerID1": "4-6", "containerID2": "1-3"}, id="k8s:v1-container-ids"),
    pytest.param('{"policyName": "static", "defaultCPUSet": "7-9", "entries": {"containerID1": "4-6", '
                 '"containerID2": "1-3"}, "checksum": 2026311253}',
                 "static", "7-9", {}, {"containerID1": "4-6", "containerID2": "1-3"}, id="k8s:v1-static"),
]


# V3 (kubelet 1.36 with the PodLevelResourceManagers gate): V2's fields plus "podEntries" (pod uid ->
# {"cpuSet": cpulist}: CPUs exclusive to a whole pod), one checksum over go-spew's rendering of the
# V3 struct, each pod's cpuset a cpuset.CPUSet. Kubelet's own row (state_checkpoint_test.go,
# "Restore checkpoint from v3 (migration)"), its checksum computed by kubelet's code.
KUBELET_V3 = ('{"policyName": "static", "defaultCPUSet": "1-2", "entries": {"pod1": {"container1": "5-6", '
              '"container2": "3-4"}}, "podEntries": {"pod2": {"cpuSet": "7-9"}}, "checksum": 2284712151}')


def test_kubelet_written_v3_with_pod_entries_verifies() -> None:
    ckpt = parse_checkpoint(KUBELET_V3.encode(), WHERE)
    assert ckpt.checksum_verified
    assert ckpt.entries == {"pod1": {"container1": frozenset({5, 6}), "container2": frozenset({3, 4})}}
    assert ckpt.pod_entries == {"pod2": frozenset({7, 8, 9})}
    # A pod's pod-level CPUs belong to it: never adopted by a container of another pod.
    assert compute_others(ckpt, "pod1", "container1") == frozenset({3, 4, 7, 8, 9})
    assert compute_others(ckpt, "pod2", "app") == frozenset({3, 4, 5, 6})
    assert compute_offline(ckpt, frozenset(range(9))) == (("podEntries.pod2", "9"),)


def test_one_changed_cpu_breaks_the_v3_checksum() -> None:
    with pytest.raises(KubeletStateError, match="field 'checksum': 2284712151 does not match the content"):
        parse_checkpoint(KUBELET_V3.replace('"7-9"', '"7-8"').encode(), WHERE)


POD_ENTRIES_MALFORMED = [
    pytest.param('{"pod2": []}', "field 'podEntries.pod2' must be an object, not an array", id="entry-array"),
    pytest.param('{"pod2": {"cpuSet": 7}}', "field 'podEntries.pod2.cpuSet' must be a cpulist string, not an integer",
                 id="cpuset-number"),
    pytest.param('{"pod2": {"cpuSet": "x"}}', "field 'podEntries.pod2.cpuSet': 'x' is not a cpulist", id="cpuset-bad"),
    pytest.param('[]', "field 'podEntries' must be an object, not an array", id="not-an-object"),
]


@pytest.mark.parametrize("pod_entries,message", POD_ENTRIES_MALFORMED)
def test_pod_entries_malformed(pod_entries: str, message: str) -> None:
    text = f'{{"policyName": "static", "defaultCpuSet": "0", "podEntries": {pod_entries}}}'
    with pytest.raises(KubeletStateError, match=re.escape(message)):
        parse_checkpoint(text.encode(), WHERE)


# kubelet's newest format (kubernetes PR 137820, then 139102 "CPU manager checkpoint generalization
# to v4 with embedded v2", for PodLevelResourceManagers): the state is the JSON string "data", and
# "dataChecksum" is checksum.New(Data): fnv32a over go-spew's %#v of the Go string, i.e. over
# "(string)" + data. The (data, checksum) pairs below are kubelet's own: the contents its
# state_checkpoint_test.go restores successfully, checksums computed by kubelet's code (the test
# file of PR 137820, which stored the same checksum of the same string under "checksum"). The outer
# fields are the V2 copy for older kubelets, which a V4 reader ignores: here deliberately stale.
KUBELET_DATA_WRITTEN = [
    pytest.param('{"policyName":"none","defaultCPUSet":"4-6"}', 657950972, "none", "4-6", {},
                 id="k8s:v4-default-cpuset"),
    pytest.param('{"policyName":"static","defaultCPUSet":"7-9","entries":{"pod":{"container1":"4-6",'
                 '"container2":"1-3"}}}', 1420829534, "static", "7-9",
                 {"pod": {"container1": "4-6", "container2": "1-3"}}, id="k8s:v4-entries"),
    pytest.param('{"policyName":"other","defaultCPUSet":"1-3"}', 2380595610, "other", "1-3", {},
                 id="k8s:v4-other-policy"),
    pytest.param('{"policyName":"none","defaultCPUSet":"4-6","unknownField":"value"}', 3492408555, "none", "4-6", {},
                 id="k8s:v4-unknown-field"),
    pytest.param('{"policyName":"static","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6",'
                 '"container2":"7-9"}},"podEntries":{"pod":{"cpuSet":"4-10"}}}', 2328898362, "static", "1-3",
                 {"pod": {"container1": "4-6", "container2": "7-9"}}, id="k8s:v4-pod-level-entries"),
]


def _v4_file(data: str, data_checksum: Any, **outer: Any) -> bytes:
    doc: Dict[str, Any] = {"policyName": "static", "defaultCpuSet": "0-63", "entries": {"stale": {"x": "9"}},
                           "checksum": 0, "data": data}
    if data_checksum is not None:
        doc["dataChecksum"] = data_checksum
    doc.update(outer)
    return json.dumps(doc).encode()


@pytest.mark.parametrize("data,data_checksum,policy,default,entries", KUBELET_DATA_WRITTEN)
def test_kubelet_written_data_checksums_verify(data: str, data_checksum: int, policy: str, default: str,
                                               entries: Dict[str, Any]) -> None:
    ckpt = parse_checkpoint(_v4_file(data, data_checksum), WHERE)
    assert ckpt.checksum_verified
    assert (ckpt.policy, ckpt.default, ckpt.entries) == (policy, _sets({"d": default})["d"], _sets(entries))
    assert compute_data_checksum(data) == data_checksum


@pytest.mark.parametrize("data,data_checksum", [p.values[:2] for p in KUBELET_DATA_WRITTEN],
                         ids=[p.id for p in KUBELET_DATA_WRITTEN])
def test_one_changed_byte_breaks_the_data_checksum(data: str, data_checksum: int) -> None:
    changed = data.replace('"defaultCPUSet":"', '"defaultCPUSet":"0,')
    with pytest.raises(KubeletStateError, match=f"field 'dataChecksum': {data_checksum} does not match the "
                                                "content of 'data'"):
        parse_checkpoint(_v4_file(changed, data_checksum), WHERE)


# kubelet's own failing rows: a checksum that does not match, and data with no dataChecksum at all
# (kubelet then reads the file as a corrupt V4 checkpoint and does not fall back to older versions).
DATA_MALFORMED = [
    pytest.param(_v4_file('{"policyName":"none","defaultCPUSet":"4-6"}', 1234),
                 "field 'dataChecksum': 1234 does not match the content of 'data' (657950972)", id="k8s:v4-bad-checksum"),
    pytest.param(_v4_file('{"policyName":"none","defaultCPUSet":"4-6"}', None, checksum=657950972),
                 "field 'dataChecksum' is missing", id="data-without-data-checksum"),
    pytest.param(_v4_file('{"policyName":"none","defaultCPUSet":"4-6"}', 0),
                 "field 'dataChecksum': 0 does not match", id="data-checksum-zero"),
    pytest.param(_v4_file('{"policyName":"none","defaultCPUSet":"4-6"}', "657950972"),
                 "field 'dataChecksum' must be an unsigned integer", id="data-checksum-string"),
    pytest.param(_v4_file('{"policyName":"none","defaultCPUSet":"1.3"}', 3033143655),
                 "field 'defaultCpuSet': '1.3' is not a cpulist", id="k8s:v4-unparsable-default"),
    pytest.param(_v4_file('{"policyName":"static","defaultCPUSet":"1-3","entries":{"pod":{"container1":"4-6",'
                          '"container2":"asd"}}}', 3794806925),
                 "field 'entries.pod.container2': 'asd' is not a cpulist", id="k8s:v4-unparsable-entry"),
]


@pytest.mark.parametrize("data,message", DATA_MALFORMED)
def test_parse_data_malformed(data: bytes, message: str) -> None:
    with pytest.raises(KubeletStateError) as info:
        parse_checkpoint(data, WHERE)
    assert message in str(info.value) and str(info.value).startswith(WHERE + ": ")


def _sets(entries: Dict[str, Any]) -> Dict[str, Any]:
    from mixed_cpus_hook.core.cpuset import parse_cpulist

    return {k: _sets(v) if isinstance(v, dict) else parse_cpulist(v) for k, v in entries.items()}


@pytest.mark.parametrize("text,policy,default,entries,by_id", KUBELET_WRITTEN)
def test_kubelet_written_checkpoints_verify(text: str, policy: str, default: str, entries: Dict[str, Any],
                                           by_id: Dict[str, str]) -> None:
    ckpt = parse_checkpoint(text.encode(), WHERE)
    assert ckpt.checksum_verified
    assert (ckpt.policy, ckpt.default, ckpt.entries, ckpt.by_container_id, ckpt.where) == (
        policy, _sets({"d": default})["d"], _sets(entries), _sets(by_id), WHERE)


@pytest.mark.parametrize("text", [p.values[0] for p in KUBELET_WRITTEN], ids=[p.id for p in KUBELET_WRITTEN])
def test_one_changed_cpu_breaks_the_checksum(text: str) -> None:
    doc = json.loads(text)
    key = next(k for k in doc if k.lower() == "defaultcpuset")
    doc[key] = "0-1" if doc[key] != "0-1" else "0-2"
    with pytest.raises(KubeletStateError, match="field 'checksum': .* does not match the content"):
        parse_checkpoint(json.dumps(doc).encode(), WHERE)


GOOD = [
    pytest.param({"policyName": "static", "defaultCpuSet": "0-1", "entries": {"u1": {"app": "2-3"}}},
                 "static", {0, 1}, {"u1": {"app": frozenset({2, 3})}}, id="no-checksum-is-accepted"),
    pytest.param({"policyName": "static", "defaultCpuSet": "0-7", "checksum": 0}, "static", set(range(8)), {},
                 id="checksum-zero-no-entries"),
    pytest.param({"POLICYNAME": "static", "DefaultCpuSet": "0", "ENTRIES": {}}, "static", {0}, {},
                 id="field-names-case-insensitive-like-go"),
    pytest.param({"policyName": "static", "defaultCpuSet": "0-1", "podEntries": {"u2": {"cpuSet": "7-9"}},
                  "entries": {"u1": {"a": "2"}}}, "static", {0, 1}, {"u1": {"a": frozenset({2})}},
                 id="unknown-fields-ignored"),
    pytest.param({"policyName": "static", "defaultCpuSet": "", "entries": {"u1": {}}}, "static", set(),
                 {"u1": {}}, id="pod-without-containers"),
    pytest.param({"policyName": "static", "defaultCpuSet": "2", "data": ""}, "static", {2}, {},
                 id="empty-data-no-data-checksum-is-the-v2-file"),
]


@pytest.mark.parametrize("doc,policy,default,entries", GOOD)
def test_parse_good(doc: Dict[str, Any], policy: str, default: set, entries: Dict[str, Any]) -> None:
    ckpt = parse_checkpoint(json.dumps(doc).encode(), WHERE)
    assert (ckpt.policy, ckpt.default, ckpt.entries) == (policy, frozenset(default), entries)
    assert not ckpt.checksum_verified


MALFORMED = [
    pytest.param(b"", "not valid JSON", id="empty-file"),
    pytest.param(b"{", "not valid JSON", id="truncated"),
    pytest.param(b"\xff\xfe{}", "not valid JSON", id="not-utf8"),
    pytest.param(b"[]", "must be a JSON object, not an array", id="array"),
    pytest.param(b'{"machineState": {}, "policyName": "None", "checksum": 4236770233}',
                 "field 'defaultCpuSet' is missing (not a CPU manager checkpoint)", id="memory-manager-file"),
    pytest.param(b'{"defaultCpuSet": "0"}', "field 'policyName' is missing", id="no-policy"),
    pytest.param(b'{"policyName": 1, "defaultCpuSet": "0"}', "field 'policyName' must be a string, not an integer",
                 id="policy-number"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": null}',
                 "field 'defaultCpuSet' must be a string, not null", id="default-null"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "1.3"}',
                 "field 'defaultCpuSet': '1.3' is not a cpulist", id="default-not-a-cpulist"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "entries": null}',
                 "field 'entries' must be an object, not null", id="entries-null"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "entries": []}',
                 "field 'entries' must be an object, not an array", id="entries-array"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "entries": {"u": 3}}',
                 "field 'entries.u' must be an object (V2) or a cpulist string (V1), not an integer",
                 id="entry-number"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "entries": {"u": {"app": "asd"}}}',
                 "field 'entries.u.app': 'asd' is not a cpulist", id="entry-not-a-cpulist"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "entries": {"u": {"app": ["2"]}}}',
                 "field 'entries.u.app' must be a cpulist string, not an array", id="entry-array"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "entries": {"id": "4-6", "u": {"a": "2"}}}',
                 "mixes V1 (container id) and V2 (pod uid) entries", id="v1-and-v2-mixed"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "entries": {"id": "9-1"}}',
                 "field 'entries.id': '9-1' is not a cpulist (range '9-1' is reversed)", id="v1-reversed"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "checksum": "12"}',
                 "field 'checksum' must be an unsigned integer", id="checksum-string"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "checksum": -1}',
                 "field 'checksum' must be an unsigned integer", id="checksum-negative"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "checksum": 1e3}',
                 "field 'checksum' must be an unsigned integer", id="checksum-float"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "checksum": 1337}',
                 "field 'checksum': 1337 does not match the content", id="checksum-wrong"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "data": 5}',
                 "field 'data' must be a string, not an integer", id="data-number"),
    pytest.param(b'{"policyName": "static", "defaultCpuSet": "0", "data": "{"}',
                 "field 'data' is not valid JSON", id="data-not-json"),
    pytest.param(_v4_file('{"policyName": "static"}', compute_data_checksum('{"policyName": "static"}')),
                 "data: field 'defaultCpuSet' is missing", id="data-incomplete"),
    pytest.param(_v4_file("", 1), "field 'data' is not valid JSON", id="data-empty-with-checksum"),
]


@pytest.mark.parametrize("data,message", MALFORMED)
def test_parse_malformed(data: bytes, message: str) -> None:
    with pytest.raises(KubeletStateError) as info:
        parse_checkpoint(data, WHERE)
    text = str(info.value)
    assert message in text
    assert text.startswith(WHERE + ": ") and "\n" not in text
    assert info.value.kind == "invalid kubelet state" and info.value.exit_code == 1


def _v2() -> Checkpoint:
    return parse_checkpoint(json.dumps({"policyName": "static", "defaultCpuSet": "0-1,8-9", "entries": {
        "uid-a": {"app": "2-3", "side": "4"}, "uid-b": {"app": "5-6"}}}).encode(), WHERE)


def _v1() -> Checkpoint:
    return parse_checkpoint(b'{"policyName": "static", "defaultCpuSet": "0-1", "entries": {"cid1": "2-3", '
                            b'"cid2": "4-5"}}', WHERE)


ASSIGNED = [
    pytest.param(_v2, "uid-a", "app", "", {2, 3}, {4, 5, 6}, id="v2-own-entry"),
    pytest.param(_v2, "uid-a", "side", "", {4}, {2, 3, 5, 6}, id="v2-second-container"),
    pytest.param(_v2, "uid-b", "app", "", {5, 6}, {2, 3, 4}, id="v2-same-name-other-pod"),
    pytest.param(_v2, "uid-a", "nope", "", None, {2, 3, 4, 5, 6}, id="v2-no-entry-for-container"),
    pytest.param(_v2, "uid-x", "app", "", None, {2, 3, 4, 5, 6}, id="v2-unknown-pod"),
    pytest.param(_v2, "", "app", "", None, {2, 3, 4, 5, 6}, id="v2-no-pod-uid"),
    pytest.param(_v1, "uid-a", "app", "cid2", {4, 5}, {2, 3}, id="v1-by-container-id"),
    pytest.param(_v1, "uid-a", "app", "", None, {2, 3, 4, 5}, id="v1-without-id"),
]


@pytest.mark.parametrize("make,uid,name,cid,assigned,others", ASSIGNED)
def test_assigned_and_others(make: Any, uid: str, name: str, cid: str, assigned: Any, others: set) -> None:
    ckpt = make()
    got = compute_assigned(ckpt, uid, name, cid)
    assert got == (None if assigned is None else frozenset(assigned))
    assert compute_others(ckpt, uid, name, cid) == frozenset(others)


def test_offline_cpus_are_named() -> None:
    assert compute_offline(_v2(), frozenset(range(0, 6))) == (
        ("defaultCpuSet", "8-9"), ("entries.uid-b.app", "6"))
    assert compute_offline(_v1(), frozenset({0, 1, 2, 3})) == (("entries.cid2", "4-5"),)
    assert compute_offline(_v2(), frozenset(range(16))) == ()


def test_data_checksum_of_a_lone_surrogate_is_that_of_go_replacement_character() -> None:
    # Go's JSON decoder reads "\\ud800" as U+FFFD; the checksum is over the bytes Go holds.
    assert compute_data_checksum('{"a":"\\ud800"}'.encode().decode("unicode_escape")) == \
        compute_data_checksum('{"a":"\\ufffd"}'.encode().decode("unicode_escape"))


def test_fnv32a_known_values() -> None:
    # FNV-1a test vectors (draft-eastlake-fnv).
    assert compute_fnv32a(b"") == 0x811C9DC5
    assert compute_fnv32a(b"a") == 0xE40C292C
    assert compute_fnv32a(b"foobar") == 0xBF9CF968


GOOD_FILE = b'{"policyName":"static","defaultCpuSet":"0,2-12,14-23","entries":{"235148fe-393f-47a8-a17d-bd55bc1a836b":' \
    b'{"cgroup1-0":"1,13"}},"checksum":1552716370}'


def test_load_absent_is_none(tmp_path: Any) -> None:
    assert load_checkpoint(str(tmp_path / "cpu_manager_state")) is None


def test_load_regular_file(tmp_path: Any) -> None:
    path = tmp_path / "cpu_manager_state"
    path.write_bytes(GOOD_FILE)
    ckpt = load_checkpoint(str(path))
    assert ckpt is not None and ckpt.where == str(path) and ckpt.checksum_verified
    assert compute_assigned(ckpt, "235148fe-393f-47a8-a17d-bd55bc1a836b", "cgroup1-0") == frozenset({1, 13})


def _symlink(tmp_path: Any) -> str:
    target = tmp_path / "elsewhere"
    target.write_bytes(GOOD_FILE)
    os.symlink(target, tmp_path / "cpu_manager_state")
    return str(tmp_path / "cpu_manager_state")


def _fifo(tmp_path: Any) -> str:
    os.mkfifo(tmp_path / "cpu_manager_state")
    return str(tmp_path / "cpu_manager_state")


def _directory(tmp_path: Any) -> str:
    os.mkdir(tmp_path / "cpu_manager_state")
    return str(tmp_path / "cpu_manager_state")


def _too_big(tmp_path: Any) -> str:
    path = tmp_path / "cpu_manager_state"
    path.write_bytes(b" " * (MAX_SIZE + 1))
    return str(path)


def _unreadable(tmp_path: Any) -> str:
    path = tmp_path / "cpu_manager_state"
    path.write_bytes(GOOD_FILE)
    path.chmod(0)
    if os.access(path, os.R_OK):  # root reads anything: use a path under a file instead
        return str(tmp_path / "cpu_manager_state" / "x")
    return str(path)


LOAD_MALFORMED = [
    pytest.param(_symlink, "is a symbolic link; kubelet writes a regular file", id="symlink"),
    pytest.param(_fifo, "not kubelet's CPU manager state: not a regular file (a FIFO)", id="fifo-does-not-hang"),
    pytest.param(_directory, "Is a directory", id="directory"),
    pytest.param(_too_big, f"not kubelet's CPU manager state: larger than {MAX_SIZE} bytes", id="too-big"),
    pytest.param(_unreadable, "cannot read the kubelet CPU manager state", id="unreadable"),
]


@pytest.mark.parametrize("make,message", LOAD_MALFORMED)
def test_load_malformed(tmp_path: Any, make: Any, message: str) -> None:
    path = make(tmp_path)
    with pytest.raises(KubeletStateError) as info:
        load_checkpoint(path)
    assert message in str(info.value) and str(info.value).startswith(path + ": ")
