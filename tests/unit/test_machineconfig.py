"""`mixed-cpus-hook machineconfig`: Ignition 3.2 validity, round trip of the files, units, errors.

Also keeps the unit lists in step: rpm/units/ -> rpm/90-mixed-cpus-hook.preset -> the spec's
%hook_units -> machineconfig.DEFAULT_UNITS.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Dict

import jsonschema
import pytest
import yaml

from mixed_cpus_hook.core.cpuset import parse_cpulist_file
from mixed_cpus_hook.core.errors import ConfigError, CpuListError, UsageError
from mixed_cpus_hook.node.config import DEFAULT_CONFIG_PATH, Config, parse_config_text
from mixed_cpus_hook.ops.machineconfig import (DEFAULT_UNITS,
                                               ROLE_LABEL,
                                               compute_machineconfig,
                                               NRI_UNITS,
                                               compute_preset,
                                               decode_data_url,
                                               embedded_files,
                                               encode_data_url,
                                               has_install_section,
                                               is_template,
                                               parse_preset,
                                               render)

REPO = Path(__file__).resolve().parents[2]
IGNITION_SCHEMA = REPO / "tests" / "data" / "ignition-v3_2.schema.json"
PRESET = REPO / "rpm" / "90-mixed-cpus-hook.preset"
NRI_PRESET = REPO / "rpm" / "90-mixed-cpus-hook-nri.preset"
SPEC = REPO / "rpm" / "mixed-cpus-hook.spec"
UNITS_DIR = REPO / "rpm" / "units"
SHARED_FILE = "/etc/mixed-cpus-hook/shared-cpus"


def strict(schema: Any) -> Any:
    """The schema with additionalProperties: false on every object that lists its properties.

    Ignition's published schema allows any extra key; a misspelt key would pass it but be
    refused by Ignition's own (strict) parser, so the test is stricter than the schema. An
    ``allOf`` of object schemas (a file is a node plus file fields) is merged first.
    """
    schema = copy.deepcopy(schema)

    def resolve(node: Any) -> Any:
        while isinstance(node, dict) and set(node) == {"$ref"}:
            target: Any = schema
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part]
            node = target
        return node

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        if "allOf" in node and all("properties" in resolve(m) for m in node["allOf"]):
            merged: Dict[str, Any] = {"type": "object", "properties": {}, "required": []}
            for member in node["allOf"]:
                member = resolve(member)
                merged["properties"].update(member["properties"])
                merged["required"] += member.get("required", [])
            node = merged
        node = {k: walk(v) for k, v in node.items()}
        if "properties" in node and node.get("type") in ("object", ["object", "null"]):
            node.setdefault("additionalProperties", False)
        return node

    return walk(schema)


@pytest.fixture(scope="module")
def ignition_validator() -> Any:
    with open(IGNITION_SCHEMA, encoding="utf-8") as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(strict(schema))


def validate_mc(validator: Any, mc: Dict[str, Any]) -> None:
    errors = sorted(validator.iter_errors(mc["spec"]["config"]), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    assert mc["spec"]["config"]["ignition"]["version"] == "3.2.0"


# -- the MachineConfig ------------------------------------------------------------------------

@pytest.mark.parametrize("role,shared,expected", [
    ("worker", "2-3", "2-3"),
    ("worker-cnf", "0,32", "0,32"),
    ("master", " 3,2 ", "2-3"),
])
def test_valid_ignition_and_round_trip(ignition_validator: Any, role: str, shared: str, expected: str) -> None:
    mc = compute_machineconfig(role, shared)
    validate_mc(ignition_validator, mc)
    assert mc["apiVersion"] == "machineconfiguration.openshift.io/v1"
    assert mc["kind"] == "MachineConfig"
    assert mc["metadata"] == {"name": f"99-{role}-mixed-cpus-hook", "labels": {ROLE_LABEL: role}}
    files = embedded_files(mc)
    assert sorted(files) == sorted([DEFAULT_CONFIG_PATH, SHARED_FILE])
    # The shared-CPU file reads back as the given set, through the hook's own parser.
    assert parse_cpulist_file(files[SHARED_FILE].decode(), SHARED_FILE) == parse_cpulist_file(expected, "x")
    # The default configuration is comments only: every default applies.
    config = parse_config_text(files[DEFAULT_CONFIG_PATH].decode(), DEFAULT_CONFIG_PATH)
    assert config == Config(source=DEFAULT_CONFIG_PATH)
    for f in mc["spec"]["config"]["storage"]["files"]:
        assert f["mode"] == 0o644 and f["overwrite"] is True
        assert f["contents"]["source"].startswith("data:text/plain;charset=utf-8;base64,")
        assert set(f) == {"path", "mode", "overwrite", "contents"}


def test_strict_schema_catches_misspelt_keys(ignition_validator: Any) -> None:
    mc = compute_machineconfig("worker", "2-3")
    for edit in (lambda c: c["storage"]["files"][0].update(mdoe=420),
                 lambda c: c["storage"]["files"][0]["contents"].update(sorce="data:,"),
                 lambda c: c["systemd"]["units"][0].update(enable=True),
                 lambda c: c["storage"]["files"][0].update(mode="0644")):
        bad = copy.deepcopy(mc)
        edit(bad["spec"]["config"])
        assert list(ignition_validator.iter_errors(bad["spec"]["config"])), edit


def test_units_enabled_and_no_templates(ignition_validator: Any) -> None:
    mc = compute_machineconfig("worker", "2-3")
    units = mc["spec"]["config"]["systemd"]["units"]
    assert units == [{"name": u, "enabled": True} for u in DEFAULT_UNITS]
    assert DEFAULT_UNITS and not any(is_template(u) for u in DEFAULT_UNITS)
    custom = compute_machineconfig("worker", "2-3", units=["a.path", "b.timer", "a.path"])
    assert [u["name"] for u in custom["spec"]["config"]["systemd"]["units"]] == ["a.path", "b.timer"]
    validate_mc(ignition_validator, custom)
    with pytest.raises(UsageError, match="template"):
        compute_machineconfig("worker", "2-3", units=["mixed-cpus-hook-watch@.path"])


def test_given_config_is_laid_down_verbatim(ignition_validator: Any, tmp_path: Path) -> None:
    text = ("# ours\nfailure_policy: ignore\nallowed_namespaces: [\"ran-*\"]\n"
            "shared_cpus_file: /etc/mixed-cpus-hook/cpus.txt\n")
    mc = compute_machineconfig("worker", "4-5", config_text=text, name="50-custom")
    validate_mc(ignition_validator, mc)
    assert mc["metadata"]["name"] == "50-custom"
    files = embedded_files(mc)
    assert files[DEFAULT_CONFIG_PATH].decode() == text
    # The shared CPUs go where the configuration reads them.
    assert sorted(files) == sorted([DEFAULT_CONFIG_PATH, "/etc/mixed-cpus-hook/cpus.txt"])
    assert parse_cpulist_file(files["/etc/mixed-cpus-hook/cpus.txt"].decode(), "x") == frozenset({4, 5})


def test_shared_cpus_setting_must_agree() -> None:
    ok = compute_machineconfig("worker", "2-3", config_text="shared_cpus: \"2,3\"\n")
    assert parse_config_text(embedded_files(ok)[DEFAULT_CONFIG_PATH].decode(), "x").shared_cpus == "2,3"
    with pytest.raises(ConfigError, match="--shared-cpus is 2-3") as info:
        compute_machineconfig("worker", "2-3", config_text="shared_cpus: 1\n", config_where="my.yaml")
    assert info.value.where == "my.yaml"


ALLOW = [
    pytest.param(None, ["ran", "ran-*"], ("ran", "ran-*"), id="default-config-gets-the-list"),
    pytest.param("failure_policy: ignore\n", ["du"], ("du",), id="added-to-a-given-config"),
    pytest.param("failure_policy: ignore", ["du"], ("du",), id="given-config-without-final-newline"),
    pytest.param("allowed_namespaces: [du]\n", ["du", "du"], ("du",), id="same-as-the-config-and-deduplicated"),
    pytest.param("allowed_namespaces: [du]\n", [], ("du",), id="config-alone"),
    pytest.param(None, ["it's-\"odd\""], ("it's-\"odd\"",), id="quoted-safely"),
    pytest.param(None, [], (), id="none-at-all"),
]


@pytest.mark.parametrize("config,globs,expected", ALLOW)
def test_allow_namespace(ignition_validator: Any, config: Any, globs: list, expected: tuple) -> None:
    mc = compute_machineconfig("worker", "2-3", config_text=config, allowed_namespaces=globs)
    validate_mc(ignition_validator, mc)
    text = embedded_files(mc)[DEFAULT_CONFIG_PATH].decode()
    assert parse_config_text(text, "x").allowed_namespaces == expected
    if config is not None:
        assert text.startswith(config)


@pytest.mark.parametrize("config,globs,exc,match", [
    pytest.param("allowed_namespaces: [du]\n", ["ran"], ConfigError,
                 "setting 'allowed_namespaces' is du, but --allow-namespace is ran", id="disagrees-with-config"),
    pytest.param(None, [""], UsageError, "'' is not a namespace glob", id="empty-glob"),
    pytest.param(None, ["a\nb: 1"], UsageError, "is not a namespace glob", id="newline-injection"),
])
def test_allow_namespace_refused(config: Any, globs: list, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        compute_machineconfig("worker", "2-3", config_text=config, allowed_namespaces=globs)


def test_cli_allow_namespace_repeatable_and_warns_without(run_cli: Any) -> None:
    res = run_cli(["machineconfig", "--role", "worker", "--shared-cpus", "2-3", "--allow-namespace", "ran",
                   "--allow-namespace", "du-*"])
    assert res.code == 0, res.err
    assert res.err == ""
    text = embedded_files(yaml.safe_load(res.out))[DEFAULT_CONFIG_PATH].decode()
    assert parse_config_text(text, "x").allowed_namespaces == ("ran", "du-*")
    res = run_cli(["machineconfig", "--role", "worker", "--shared-cpus", "2-3"])
    assert res.code == 0
    assert "lists no allowed_namespaces: no pod may ask for mixed CPUs (add --allow-namespace GLOB)" in res.err


@pytest.mark.parametrize("role,shared,config,exc,match", [
    ("Worker", "2-3", None, UsageError, "not a DNS label"),
    ("worker_1", "2-3", None, UsageError, "not a DNS label"),
    ("-worker", "2-3", None, UsageError, "not a DNS label"),
    ("w" * 64, "2-3", None, UsageError, "not a DNS label"),
    ("worker", "", None, UsageError, "empty"),
    ("worker", "3-2", None, CpuListError, "reversed"),
    ("worker", "a", None, CpuListError, "not a cpulist"),
    ("worker", "2-3", "failure_policy: maybe\n", ConfigError, "failure_policy"),
    ("worker", "2-3", "bogus: 1\n", ConfigError, "unknown setting"),
    ("worker", "2-3", "a: [\n", ConfigError, "not valid YAML"),
])
def test_refusals(role: str, shared: str, config: Any, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        compute_machineconfig(role, shared, config_text=config)


def test_data_urls() -> None:
    data = "a: 1\n# é, 100%, spaces and , commas\n".encode()
    assert decode_data_url(encode_data_url(data)) == data
    assert decode_data_url("data:,a%20b%0A%25") == b"a b\n%"
    assert decode_data_url("data:text/plain;charset=utf-8,x%2Cy") == b"x,y"
    with pytest.raises(ValueError):
        decode_data_url("https://example.invalid/x")


def test_render_yaml_and_json_round_trip() -> None:
    mc = compute_machineconfig("worker", "2-3")
    assert yaml.safe_load(render(mc, "yaml")) == mc
    assert json.loads(render(mc, "json")) == mc
    # Order a person reads: apiVersion, kind, metadata, spec.
    assert render(mc, "yaml").splitlines()[0] == "apiVersion: machineconfiguration.openshift.io/v1"


# -- the command --------------------------------------------------------------------------------

def test_cli_prints_the_machineconfig(run_cli: Any, ignition_validator: Any, tmp_path: Path) -> None:
    res = run_cli(["machineconfig", "--role", "worker", "--shared-cpus", "2-3"])
    assert res.code == 0, res.err
    mc = yaml.safe_load(res.out)
    assert mc == compute_machineconfig("worker", "2-3")
    validate_mc(ignition_validator, mc)
    cfg = tmp_path / "config.yaml"
    cfg.write_text("failure_policy: ignore\n")
    res = run_cli(["machineconfig", "--role", "worker-cnf", "--shared-cpus", "0,1", "--config", str(cfg),
                   "-o", "json"])
    assert res.code == 0, res.err
    mc = json.loads(res.out)
    assert embedded_files(mc)[DEFAULT_CONFIG_PATH] == b"failure_policy: ignore\n"
    assert mc["metadata"]["labels"] == {ROLE_LABEL: "worker-cnf"}


def test_cli_units_from_a_preset(run_cli: Any, tmp_path: Path) -> None:
    preset = tmp_path / "x.preset"
    preset.write_text("enable one.path\nenable two@.service\ndisable three.timer\n")
    res = run_cli(["machineconfig", "--role", "worker", "--shared-cpus", "2", "--preset", str(preset)])
    assert res.code == 0, res.err
    assert yaml.safe_load(res.out)["spec"]["config"]["systemd"]["units"] == [{"name": "one.path", "enabled": True}]


@pytest.mark.parametrize("argv,code,match", [
    (["machineconfig", "--shared-cpus", "2-3"], 2, "--role"),
    (["machineconfig", "--role", "worker"], 2, "--shared-cpus"),
    (["machineconfig", "--role", "Worker", "--shared-cpus", "2-3"], 2, "DNS label"),
    (["machineconfig", "--role", "worker", "--shared-cpus", "x"], 1, "not a cpulist"),
    (["machineconfig", "--role", "worker", "--shared-cpus", "2", "--config", "/nonexistent/c.yaml"], 2,
     "/nonexistent/c.yaml: cannot read"),
    (["machineconfig", "--role", "worker", "--shared-cpus", "2", "-o", "xml"], 2, "xml"),
])
def test_cli_errors(run_cli: Any, argv: list, code: int, match: str) -> None:
    res = run_cli(argv)
    assert res.code == code
    assert res.out == ""
    assert match in res.err


# -- unit lists in step -------------------------------------------------------------------------

def test_parse_preset() -> None:
    text = ("# comment\n\nenable a.path\nenable  b.timer # trailing\ndisable c.service\nenable d@.service\n"
            "enable e@x.service\nenable *.timer\nenable a.path\n")
    assert parse_preset(text) == ["a.path", "b.timer", "e@x.service"]
    assert is_template("x@.path") and not is_template("x@1.path") and not is_template("x.path")


def test_compute_preset() -> None:
    units = {"b.path": "[Path]\nPathExists=/x\n[Install]\nWantedBy=multi-user.target\n",
             "a.timer": "[Timer]\nOnBootSec=1\n\n[Install]\nWantedBy=timers.target\n",
             "w@.path": "[Path]\n[Install]\nWantedBy=multi-user.target\n",
             "c.service": "[Service]\nType=oneshot\nExecStart=/bin/true\n"}
    assert parse_preset(compute_preset(units)) == ["a.timer", "b.path"]
    assert has_install_section("[Unit]\n [Install] \n") and not has_install_section("# [Install]\n")


def test_presets_match_units_dir() -> None:
    """Each mode's preset is what `make preset` generates from rpm/units/: NRI_UNITS are NRI mode's, the rest hook mode's."""
    units = {p.name: p.read_text() for p in sorted(UNITS_DIR.iterdir())
             if p.suffix in (".service", ".path", ".timer")}
    assert NRI_UNITS <= set(units)
    hook = {n: t for n, t in units.items() if n not in NRI_UNITS}
    nri = {n: t for n, t in units.items() if n in NRI_UNITS}
    assert PRESET.read_text() == compute_preset(hook, "hook"), "run `make preset`"
    assert NRI_PRESET.read_text() == compute_preset(nri, "nri"), "run `make preset`"
    assert parse_preset(NRI_PRESET.read_text()) == sorted(NRI_UNITS)


def test_default_units_and_spec_match_preset() -> None:
    enabled = parse_preset(PRESET.read_text())
    assert list(DEFAULT_UNITS) == enabled, "machineconfig.DEFAULT_UNITS differs from the preset"
    m = re.search(r"^%global hook_units (.+)$", SPEC.read_text(), re.M)
    assert m, "no %global hook_units in the spec"
    assert m.group(1).split() == enabled, "%hook_units in rpm/mixed-cpus-hook.spec differs from the preset"


def test_nri_mode_enables_crio_nri_and_the_plugin(run_cli: Any, ignition_validator: Any) -> None:
    from mixed_cpus_hook.ops.machineconfig import CRIO_NRI_DROPIN, NRI_UNIT, compute_nri_mode

    res = run_cli(["machineconfig", "--role", "worker", "--shared-cpus", "2-3", "--mode", "nri",
                   "--allow-namespace", "ran"])
    assert res.code == 0, res.err
    mc = yaml.safe_load(res.out)
    validate_mc(ignition_validator, mc)
    assert mc == compute_nri_mode(compute_machineconfig("worker", "2-3", allowed_namespaces=["ran"]))
    files = embedded_files(mc)
    dropin = files[CRIO_NRI_DROPIN].decode()
    try:
        import tomllib
    except ImportError:  # Python 3.9: RHEL 9's tomli
        import tomli as tomllib
    assert tomllib.loads(dropin) == {"crio": {"nri": {"enable_nri": True, "nri_listen": "/var/run/nri/nri.sock"}}}
    # One node, one mode: the image layers the nri-mode package, which has no hook-mode unit to enable.
    assert mc["spec"]["config"]["systemd"]["units"] == [{"name": NRI_UNIT, "enabled": True}]
    hook_units = yaml.safe_load(run_cli(["machineconfig", "--role", "worker", "--shared-cpus", "2-3"]).out)
    assert [u["name"] for u in hook_units["spec"]["config"]["systemd"]["units"]] == list(DEFAULT_UNITS)


def test_nri_mode_without_an_image_is_refused(run_cli: Any) -> None:
    res = run_cli(["machineconfig", "--role", "worker", "--shared-cpus", "2-3", "--mode", "nri", "--no-image"])
    assert res.code == 2 and res.out == ""
    assert "--mode nri: NRI mode needs python3-protobuf" in res.err
