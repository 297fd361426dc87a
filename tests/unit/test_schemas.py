"""The JSON Schemas are the contract: the fast path's hand-written checks must agree with them.

Every document of the corpora below is checked twice, with the hand-written checks
(``validate.check_*``; the record store's ``parse_*_record``) and with
``jsonschema.Draft7Validator``; both must give the verdict the table expects. Every record the
engine writes on a fake node is checked against the schema too.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Callable, Dict, List

import jsonschema
import pytest
import yaml

from mixed_cpus_hook.core.errors import ConfigError, RecordError, StateError
from mixed_cpus_hook.core.validate import CONFIG_KEYS, check_config, check_state
from mixed_cpus_hook.node.config import Config
from mixed_cpus_hook.store.records import (compute_migrated_pod,
                                           format_container_record,
                                           format_pod_record,
                                           parse_container_record,
                                           parse_pod_record)

NEWER_KEYWORDS = {"$defs", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
                  "$vocabulary", "dependentRequired", "dependentSchemas", "unevaluatedProperties",
                  "unevaluatedItems", "prefixItems", "minContains", "maxContains"}


def validator(schemas: Dict[str, Any], name: str, definition: str = "") -> jsonschema.Draft7Validator:
    schema = schemas[name]
    if definition:
        schema = dict(schema, **{"$ref": f"#/definitions/{definition}"})
        schema.pop("oneOf", None)
    return jsonschema.Draft7Validator(schema)


def keys_anywhere(doc: Any) -> List[str]:
    if isinstance(doc, dict):
        return list(doc) + [k for v in doc.values() for k in keys_anywhere(v)]
    if isinstance(doc, list):
        return [k for v in doc for k in keys_anywhere(v)]
    return []


def test_schema_files(schemas: Dict[str, Any]) -> None:
    assert sorted(schemas) == ["config", "record", "state"]


@pytest.mark.parametrize("name", ["config", "record", "state"])
def test_schema_is_a_valid_draft7_schema(schemas: Dict[str, Any], name: str) -> None:
    schema = schemas[name]
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["$id"].endswith(f"/{name}.schema.json")
    assert schema["title"] and schema["description"]
    assert not NEWER_KEYWORDS & set(keys_anywhere(schema)), "keywords newer than draft-07 (jsonschema 3.2)"


def test_config_schema_documents_every_setting(schemas: Dict[str, Any]) -> None:
    props = schemas["config"]["properties"]
    assert list(props) == list(CONFIG_KEYS)
    assert set(props) == set(Config._fields) - {"source"}
    for key, prop in props.items():
        assert prop.get("title") and prop.get("description"), key
        default = getattr(Config(), key)
        if default is None:
            assert "default" not in prop, key
        else:
            assert prop["default"] == (list(default) if isinstance(default, tuple) else default), key


REPO = Path(__file__).resolve().parents[2]


def readme_config_table() -> Dict[str, str]:
    """The settings the README's configuration table names: setting -> its default column."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    table = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| `")]
    return {key: row[2].strip() for row in rows for key in re.findall(r"`([a-z_]+)`", row[1])}


def shipped_config_settings() -> Dict[str, Any]:
    """rpm/config.yaml's commented-out settings (``#key: value`` and the list items below), parsed."""
    lines = (REPO / "rpm" / "config.yaml").read_text(encoding="utf-8").splitlines()
    uncommented = "\n".join(line[1:] for line in lines if re.match(r"^#([a-z_]+:|  - )", line))
    return yaml.safe_load(uncommented)


def test_every_setting_is_in_the_readme_table_and_the_shipped_config(schemas: Dict[str, Any]) -> None:
    """The README's table and rpm/config.yaml (which says it shows every setting) never drift from the schema."""
    props = schemas["config"]["properties"]
    assert sorted(readme_config_table()) == sorted(props)
    assert sorted(shipped_config_settings()) == sorted(props)


def test_the_shipped_config_shows_each_default(schemas: Dict[str, Any]) -> None:
    """Each commented-out value in rpm/config.yaml is the default, or an example of a setting without one."""
    shown = shipped_config_settings()
    for key, prop in schemas["config"]["properties"].items():
        if "default" in prop and prop["default"] != []:
            assert shown[key] == prop["default"], key
        else:
            check_config({key: shown[key]}, "rpm/config.yaml", ConfigError)


# -- state ------------------------------------------------------------------------------------

RUNC = {"ociVersion": "1.0.2-dev", "id": "0123abcd", "status": "creating", "pid": 4242,
        "bundle": "/run/containers/storage/overlay-containers/0123abcd/userdata",
        "annotations": {"io.kubernetes.container.name": "app", "mixed-cpus.openshift.io/app": "enable"}}


def rec(base: Dict[str, Any], **changes: Any) -> Dict[str, Any]:
    """A copy of ``base`` with fields replaced, or removed where the value is DROP."""
    doc = copy.deepcopy(base)
    for key, value in changes.items():
        if value is DROP:
            doc.pop(key)
        else:
            doc[key] = value
    return doc


def st(**changes: Any) -> Dict[str, Any]:
    return rec(RUNC, **changes)


DROP = object()

STATES = [
    pytest.param(RUNC, True, id="runc"),
    pytest.param({"ociVersion": "1.0", "id": "c1", "status": "created", "pid": 1, "bundle": "/b", "root": "/run/crun",
                  "annotations": {}}, True, id="crun"),
    pytest.param(st(annotations=DROP), True, id="no-annotations"),
    pytest.param(st(pid=DROP), True, id="no-pid"),
    pytest.param(st(status=DROP), True, id="no-status"),
    pytest.param(st(pid=0), True, id="pid-zero"),
    pytest.param(st(pid=4194304), True, id="pid-max"),
    pytest.param(st(id="a" * 242), True, id="id-242"),
    pytest.param(st(id="A_b+c.d-e"), True, id="id-all-char-classes"),
    pytest.param(st(id="..."), True, id="id-three-dots"),
    pytest.param(st(bundle="/"), True, id="bundle-root"),
    pytest.param(st(bundle="/" + "b" * 4095), True, id="bundle-4096"),
    pytest.param(st(extra={"x": [1]}), True, id="unknown-fields-allowed"),
    pytest.param([], False, id="array"),
    pytest.param("state", False, id="string"),
    pytest.param(None, False, id="null"),
    pytest.param(st(id=DROP), False, id="no-id"),
    pytest.param(st(bundle=DROP), False, id="no-bundle"),
    pytest.param(st(ociVersion=DROP), False, id="no-oci-version"),
    pytest.param(st(ociVersion=1), False, id="oci-version-number"),
    pytest.param(st(id=""), False, id="id-empty"),
    pytest.param(st(id="../etc"), False, id="id-climbs"),
    pytest.param(st(id="a/b"), False, id="id-slash"),
    pytest.param(st(id="."), False, id="id-dot"),
    pytest.param(st(id=".."), False, id="id-dotdot"),
    pytest.param(st(id="abc\n"), False, id="id-trailing-newline"),
    pytest.param(st(id="a b"), False, id="id-space"),
    pytest.param(st(id="a" * 243), False, id="id-243"),
    pytest.param(st(id=12), False, id="id-number"),
    pytest.param(st(pid=-1), False, id="pid-negative"),
    pytest.param(st(pid=4194305), False, id="pid-too-large"),
    pytest.param(st(pid="12"), False, id="pid-string"),
    pytest.param(st(pid=True), False, id="pid-boolean"),
    pytest.param(st(pid=1.5), False, id="pid-fraction"),
    pytest.param(st(pid=None), False, id="pid-null"),
    pytest.param(st(status=None), False, id="status-null"),
    pytest.param(st(bundle="relative/b"), False, id="bundle-relative"),
    pytest.param(st(bundle=""), False, id="bundle-empty"),
    pytest.param(st(bundle="/b\0c"), False, id="bundle-nul"),
    pytest.param(st(bundle="/" + "b" * 4096), False, id="bundle-4097"),
    pytest.param(st(annotations=[]), False, id="annotations-array"),
    pytest.param(st(annotations=None), False, id="annotations-null"),
    pytest.param(st(annotations={"a": True}), False, id="annotation-boolean"),
    pytest.param(st(annotations={"a": None}), False, id="annotation-null"),
]


def hand_verdict(check: Callable[..., None], error: type, doc: Any) -> bool:
    try:
        check(doc, "doc", error)
    except error:
        return False
    return True


@pytest.mark.parametrize("doc,valid", STATES)
def test_state_checks_agree_with_the_schema(schemas: Dict[str, Any], doc: Any, valid: bool) -> None:
    assert hand_verdict(check_state, StateError, doc) is valid, "validate.check_state"
    assert validator(schemas, "state").is_valid(doc) is valid, "state.schema.json"


# -- config -----------------------------------------------------------------------------------

CONFIGS = [
    pytest.param({}, True, id="empty"),
    pytest.param({"shared_cpus": "0-1"}, True, id="shared-cpus"),
    pytest.param({"shared_cpus": "garbage"}, True, id="shared-cpus-checked-later-as-a-cpulist"),
    pytest.param({"shared_cpus": 0}, True, id="shared-cpus-number"),
    pytest.param({"shared_cpus_file": "/etc/x"}, True, id="shared-file"),
    pytest.param({"annotation_prefix": "mixed-cpus.openshift.io"}, True, id="prefix-default"),
    pytest.param({"annotation_prefix": "a"}, True, id="prefix-one-letter"),
    pytest.param({"annotation_prefix": "a1-b.c-2"}, True, id="prefix-dashes"),
    pytest.param({"annotation_prefix": "a" * 63 + "." + "b" * 63}, True, id="prefix-long-labels"),
    pytest.param({"failure_policy": "fail"}, True, id="fail"),
    pytest.param({"failure_policy": "ignore"}, True, id="ignore"),
    pytest.param({"allowed_namespaces": []}, True, id="no-namespaces"),
    pytest.param({"allowed_namespaces": ["*", "ran-?", "[a-c]*"]}, True, id="globs"),
    pytest.param({"cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"]}, True, id="cdi-dirs"),
    pytest.param({"cdi_spec_dirs": ["/d"] * 16}, True, id="cdi-dirs-16"),
    pytest.param({k: "/x" for k in ("shared_cpus_file", "cgroup_root", "state_dir", "proc_root", "sys_root")}, True,
                 id="every-path"),
    pytest.param({"state_dir": "/" + "s" * 4095}, True, id="path-4096"),
    pytest.param(None, False, id="null"),
    pytest.param([], False, id="array"),
    pytest.param("fail", False, id="string"),
    pytest.param({"shared-cpus": "0"}, False, id="unknown-key-dash"),
    pytest.param({"Failure_policy": "fail"}, False, id="unknown-key-case"),
    pytest.param({1: "x"}, False, id="non-string-key"),
    pytest.param({"shared_cpus": -1}, False, id="shared-cpus-negative"),
    pytest.param({"shared_cpus": 1.5}, False, id="shared-cpus-fraction"),
    pytest.param({"shared_cpus": True}, False, id="shared-cpus-boolean"),
    pytest.param({"shared_cpus": None}, False, id="shared-cpus-null"),
    pytest.param({"shared_cpus": ["0", "1"]}, False, id="shared-cpus-list"),
    pytest.param({"shared_cpus_file": "shared"}, False, id="shared-file-relative"),
    pytest.param({"shared_cpus_file": None}, False, id="shared-file-null"),
    pytest.param({"cgroup_root": ""}, False, id="cgroup-root-empty"),
    pytest.param({"state_dir": "/a\0"}, False, id="state-dir-nul"),
    pytest.param({"proc_root": "/" + "p" * 4096}, False, id="path-4097"),
    pytest.param({"sys_root": 1}, False, id="sys-root-number"),
    pytest.param({"annotation_prefix": "cpu-shared.crio.io"}, False, id="prefix-crio"),
    pytest.param({"annotation_prefix": ""}, False, id="prefix-empty"),
    pytest.param({"annotation_prefix": "Mixed.example"}, False, id="prefix-uppercase"),
    pytest.param({"annotation_prefix": "a..b"}, False, id="prefix-empty-label"),
    pytest.param({"annotation_prefix": "a-.b"}, False, id="prefix-label-ends-with-dash"),
    pytest.param({"annotation_prefix": "a/b"}, False, id="prefix-slash"),
    pytest.param({"annotation_prefix": "ab\n"}, False, id="prefix-trailing-newline"),
    pytest.param({"annotation_prefix": "a" * 254}, False, id="prefix-254"),
    pytest.param({"failure_policy": "maybe"}, False, id="policy-maybe"),
    pytest.param({"failure_policy": "Fail"}, False, id="policy-case"),
    pytest.param({"failure_policy": False}, False, id="policy-yaml-no"),
    pytest.param({"allowed_namespaces": "ran"}, False, id="namespaces-string"),
    pytest.param({"allowed_namespaces": [""]}, False, id="namespace-empty"),
    pytest.param({"allowed_namespaces": [None]}, False, id="namespace-null"),
    pytest.param({"allowed_namespaces": None}, False, id="namespaces-null"),
    pytest.param({"cdi_spec_dirs": []}, False, id="cdi-dirs-empty"),
    pytest.param({"cdi_spec_dirs": ["/d"] * 17}, False, id="cdi-dirs-17"),
    pytest.param({"cdi_spec_dirs": "/etc/cdi"}, False, id="cdi-dirs-string"),
    pytest.param({"cdi_spec_dirs": ["cdi"]}, False, id="cdi-dir-relative"),
    pytest.param({"cdi_spec_dirs": [None]}, False, id="cdi-dir-null"),
    pytest.param({"cdi_spec_dirs": ["/a\0"]}, False, id="cdi-dir-nul"),
]


@pytest.mark.parametrize("doc,valid", CONFIGS)
def test_config_checks_agree_with_the_schema(schemas: Dict[str, Any], doc: Any, valid: bool) -> None:
    assert hand_verdict(check_config, ConfigError, doc) is valid, "validate.check_config"
    assert validator(schemas, "config").is_valid(doc) is valid, "config.schema.json"


# -- records ----------------------------------------------------------------------------------

CG = "/sys/fs/cgroup"
POD_DIR = "kubepods.slice/kubepods-pod0f1e_aaaa.slice"
CONTAINER = {
    "schema": 2, "id": "0123abcd", "namespace": "ran", "pod": "du-0", "container": "app", "pod_uid": "0f1e-aaaa",
    "cgroup_version": 2,
    "cgroup": {"cpuset": f"{CG}/{POD_DIR}/crio-0123abcd.scope", "cpu": f"{CG}/{POD_DIR}/crio-0123abcd.scope"},
    "pod_cgroup": {"cpuset": f"{CG}/{POD_DIR}", "cpu": f"{CG}/{POD_DIR}"},
    "pod_key": "kubepods-pod0f1e_aaaa.slice",
    "exclusive": "2-3", "shared": "0-1", "desired": "0-3",
    "quota": {"base": 200000, "applied": 400000, "period": 100000},
    "created": "2025-01-31T12:00:00Z", "updated": "2025-01-31T12:00:01Z",
}
POD = {"schema": 2, "key": "kubepods-pod0f1e_aaaa.slice", "cgroup": {"cpuset": f"{CG}/{POD_DIR}", "cpu": f"{CG}/{POD_DIR}"},
       "quota": {"base": 200000, "applied": 400000, "period": 100000},
       "members": [{"id": "0123abcd", "share_mcpu": 2000}]}


def member(cid: str, share: Any = 1000) -> Dict[str, Any]:
    return {"id": cid, "share_mcpu": share}


RECORDS = [
    pytest.param(CONTAINER, True, id="container"),
    pytest.param(rec(CONTAINER, pod_cgroup=None, pod_key=None), True, id="container-without-pod"),
    pytest.param(rec(CONTAINER, quota={"base": None, "applied": None, "period": 100000}), True,
                 id="container-unlimited-quota"),
    pytest.param(rec(CONTAINER, cgroup_version=1, exclusive="4,6-7", desired="0-1,4,6-7",
                     cgroup={"cpuset": f"{CG}/cpuset/k/p/c", "cpu": f"{CG}/cpu,cpuacct/k/p/c"}), True, id="container-v1"),
    pytest.param(rec(CONTAINER, namespace="", pod="", container="", pod_uid=""), True, id="container-no-kube-names"),
    pytest.param(rec(CONTAINER, mode="nri", phase="creating", exclusive_source="kubelet-checkpoint",
                     last_reapply="2025-01-31T12:00:02Z", reapplies=3, pins_maybe_lost=True), True,
                 id="container-every-optional-field"),
    pytest.param(rec(CONTAINER, quota={"base": 1, "applied": 2, "period": 1, "ours": [1, 2]}), True,
                 id="container-quota-ours"),
    pytest.param(POD, True, id="pod"),
    pytest.param(rec(POD, members=[member("a"), member("b", 0), member("c", 2500)]), True, id="pod-three-members"),
    pytest.param(rec(POD, quota=None), True, id="pod-quota-unknown"),
    pytest.param(rec(POD, key="pod0f1e-aaaa"), True, id="pod-cgroupfs-key"),
    pytest.param({}, False, id="empty"),
    pytest.param([], False, id="array"),
    pytest.param(rec(CONTAINER, schema=3), False, id="container-schema-3"),
    pytest.param(rec(CONTAINER, schema=True), False, id="container-schema-bool"),
    pytest.param(rec(CONTAINER, updated=DROP), False, id="container-no-updated"),
    pytest.param(rec(CONTAINER, id="../x"), False, id="container-id-climbs"),
    pytest.param(rec(CONTAINER, id="x\n"), False, id="container-id-newline"),
    pytest.param(rec(CONTAINER, cgroup={"cpuset": "rel", "cpu": "/x"}), False, id="container-cgroup-relative"),
    pytest.param(rec(CONTAINER, cgroup={"cpuset": "/x"}), False, id="container-cgroup-half"),
    pytest.param(rec(CONTAINER, cgroup={"cpuset": "/x", "cpu": "/y", "io": "/z"}), False, id="container-cgroup-extra"),
    pytest.param(rec(CONTAINER, cgroup={"cpuset": "/x\0", "cpu": "/y"}), False, id="container-cgroup-nul"),
    pytest.param(rec(CONTAINER, cgroup={"cpuset": "/" + "x" * 4096, "cpu": "/y"}), False,
                 id="container-cgroup-too-long"),
    pytest.param(rec(CONTAINER, pod_key="a/b"), False, id="container-pod-key-slash"),
    pytest.param(rec(CONTAINER, pod_key=".."), False, id="container-pod-key-dotdot"),
    pytest.param(rec(CONTAINER, exclusive=""), False, id="container-exclusive-empty"),
    pytest.param(rec(CONTAINER, exclusive="a"), False, id="container-exclusive-garbage"),
    pytest.param(rec(CONTAINER, exclusive=" 2-3"), False, id="container-exclusive-space"),
    pytest.param(rec(CONTAINER, desired="0-3\n"), False, id="container-desired-newline"),
    pytest.param(rec(CONTAINER, cgroup_version=3), False, id="container-cgroup-v3"),
    pytest.param(rec(CONTAINER, cgroup_version=True), False, id="container-cgroup-version-bool"),
    pytest.param(rec(CONTAINER, quota={"base": 1, "applied": 2}), False, id="container-quota-no-period"),
    pytest.param(rec(CONTAINER, quota={"base": -1, "applied": 2, "period": 1}), False, id="container-quota-negative"),
    pytest.param(rec(CONTAINER, quota={"base": 1, "applied": 2, "period": 0}), False, id="container-period-zero"),
    pytest.param(rec(CONTAINER, quota={"base": 1, "applied": 2, "period": 1, "x": 1}), False,
                 id="container-quota-unknown-key"),
    pytest.param(rec(CONTAINER, quota={"base": 1, "applied": 2, "period": 1, "ours": [True]}), False,
                 id="container-quota-ours-bool"),
    pytest.param(rec(CONTAINER, quota=None), False, id="container-quota-null"),
    pytest.param(rec(CONTAINER, quota={"base": (1 << 44) - 1, "applied": (1 << 44) - 1, "period": 1000000}), True,
                 id="container-quota-at-the-kernel-maximum"),
    pytest.param(rec(CONTAINER, quota={"base": 1, "applied": 1 << 44, "period": 100000}), False,
                 id="container-quota-above-the-kernel-maximum"),
    pytest.param(rec(CONTAINER, quota={"base": 1, "applied": 2, "period": 1000001}), False,
                 id="container-period-above-the-kernel-maximum"),
    pytest.param(rec(CONTAINER, quota={"base": 1, "applied": 2, "period": 100000, "ours": [1 << 63]}), False,
                 id="container-ours-above-the-kernel-maximum"),
    pytest.param(rec(CONTAINER, created="yesterday"), False, id="container-created-not-a-time"),
    pytest.param(rec(CONTAINER, last_reapply="yesterday"), False, id="container-last-reapply-not-a-time"),
    pytest.param(rec(CONTAINER, reapplies=-1), False, id="container-reapplies-negative"),
    pytest.param(rec(CONTAINER, pins_maybe_lost=1), False, id="container-pins-not-bool"),
    pytest.param(rec(CONTAINER, mode="cri"), False, id="container-mode-unknown"),
    pytest.param(rec(CONTAINER, extra=1), False, id="container-unknown-key"),
    pytest.param(rec(CONTAINER, namespace=None), False, id="container-namespace-null"),
    pytest.param(rec(POD, members=[]), False, id="pod-no-members"),
    pytest.param(rec(POD, members=["0123abcd"]), False, id="pod-members-of-schema-1"),
    pytest.param(rec(POD, members=[member("../a")]), False, id="pod-member-climbs"),
    pytest.param(rec(POD, members=[member("a", -1)]), False, id="pod-member-share-negative"),
    pytest.param(rec(POD, members=[member("a", 8192001)]), False, id="pod-member-share-too-big"),
    pytest.param(rec(POD, members=[member("a", "1000")]), False, id="pod-member-share-text"),
    pytest.param(rec(POD, members=[dict(member("a"), x=1)]), False, id="pod-member-unknown-key"),
    pytest.param(rec(POD, key="a/b"), False, id="pod-key-slash"),
    pytest.param(rec(POD, key="x" * 256), False, id="pod-key-too-long"),
    pytest.param(rec(POD, cgroup=None), False, id="pod-cgroup-null"),
    pytest.param(rec(POD, quota=DROP), False, id="pod-no-quota"),
    pytest.param(rec(POD, schema="2"), False, id="pod-schema-string"),
    pytest.param(dict(POD, **{"id": "0123abcd"}), False, id="pod-and-container-keys-mixed"),
]
# What the store's parser refuses beyond the schema (JSON Schema cannot say it): the schema
# finds these valid, the parser does not, with this message.
BEYOND_THE_SCHEMA = [
    pytest.param(rec(POD, members=[member("a"), member("a", 2000)]), "pods", "members is not a non-empty list",
                 id="pod-member-id-twice"),
    pytest.param(rec(CONTAINER, desired="0-2"), "containers", "desired is not exclusive + shared",
                 id="container-desired-not-the-union"),
]


def parse(doc: Any) -> Any:
    """The store's parse of ``doc`` as the file its id (or key) names."""
    if isinstance(doc, dict) and "key" in doc:
        return parse_pod_record(doc, doc["key"], "/state/pods/x.json")
    name = doc.get("id") if isinstance(doc, dict) and isinstance(doc.get("id"), str) else "x"
    return parse_container_record(doc, name, "/state/containers/x.json")


def parse_ok(doc: Any) -> bool:
    try:
        parse(doc)
    except RecordError:
        return False
    return True


@pytest.mark.parametrize("doc,valid", RECORDS)
def test_record_corpus(schemas: Dict[str, Any], doc: Any, valid: bool) -> None:
    """The schema and the store's hand-written parser agree on every document."""
    assert validator(schemas, "record").is_valid(doc) is valid
    assert parse_ok(doc) is valid


@pytest.mark.parametrize("doc,kind,message", BEYOND_THE_SCHEMA)
def test_record_rules_beyond_the_schema(schemas: Dict[str, Any], doc: Any, kind: str, message: str) -> None:
    assert validator(schemas, "record").is_valid(doc)
    with pytest.raises(RecordError) as info:
        parse(doc)
    assert message in info.value.message


def test_record_round_trip() -> None:
    for doc in (CONTAINER, POD):
        fmt = format_pod_record if "key" in doc else format_container_record
        again = fmt(parse(doc))
        assert parse(again) == parse(doc)


def test_a_schema_1_pod_record_is_migrated_with_its_members_shares() -> None:
    v1 = rec(POD, schema=1, members=["a", "b"])
    shares = {"a": 2000, "b": 1000}
    migrated = compute_migrated_pod(v1, shares.__getitem__)
    assert migrated["schema"] == 2 and migrated["members"] == [member("a", 2000), member("b", 1000)]
    assert parse_pod_record(migrated, POD["key"], "x").members == (("a", 2000), ("b", 1000))


def test_record_kinds_are_exclusive(schemas: Dict[str, Any]) -> None:
    assert validator(schemas, "record", "container_record").is_valid(CONTAINER)
    assert not validator(schemas, "record", "container_record").is_valid(POD)
    assert validator(schemas, "record", "pod_record").is_valid(POD)
    assert not validator(schemas, "record", "pod_record").is_valid(CONTAINER)


# -- what the engine actually writes ------------------------------------------------------------

def all_records(node: Any) -> List[Dict[str, Any]]:
    return list(node.records("containers").values()) + list(node.records("pods").values())


def assert_records_valid(schemas: Dict[str, Any], node: Any, expect: int) -> None:
    docs = all_records(node)
    assert len(docs) == expect
    v = validator(schemas, "record")
    for doc in docs:
        errors = [e.message for e in v.iter_errors(doc)]
        assert errors == [], json.dumps(doc, indent=1)


def test_records_the_engine_writes_match_the_schema(schemas: Dict[str, Any], node: Any, run_hook: Callable,
                                                    run_cli: Callable) -> None:
    a = node.add_container("ctr-a", name="a", quota=200000, pod_quota=400000)
    b = node.add_container("ctr-b", name="b", quota=200000, pod_quota=400000)
    free = node.add_container("ctr-free", name="f", quota=None, pod_quota=None,
                              pod_uid="99999999-aaaa-bbbb-cccc-123456789abc")
    node.mkdir("custom/standalone", "2-3")  # not under a pod cgroup
    lone = node.add_container("ctr-lone", name="l", quota=100000)
    node.edit_spec(lone, lambda s: s["linux"].update(cgroupsPath="/custom/standalone"))
    if node.version == 2:
        node.grant_effective("custom/standalone")
    for paths in (a, b, free, lone):
        result = run_hook(["--config", node.config_path, "apply", "--state", paths["state"]])
        assert result.code == 0, result.err
    assert_records_valid(schemas, node, expect=4 + 2)
    assert node.records("containers")["ctr-lone"]["pod_key"] is None
    assert node.records("containers")["ctr-free"]["quota"]["applied"] is None
    node.write(a["rel"], "cpuset.cpus", "2-3")  # drift, so that reconcile rewrites a record
    assert run_cli(["--config", node.config_path, "reconcile"]).code == 0
    assert run_hook(["--config", node.config_path, "release", "--state", b["state"]]).code == 0
    assert_records_valid(schemas, node, expect=3 + 2)

