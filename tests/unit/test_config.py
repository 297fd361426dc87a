"""Configuration: validation and defaults, YAML errors, the JSON cache, shared and online CPUs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from mixed_cpus_hook.core.errors import ConfigError, CpuListError
from mixed_cpus_hook.node.config import (CACHE_DIR_ENV,
                                         MAX_CACHE_ENTRIES,
                                         CONFIG_ENV,
                                         DEFAULT_CONFIG_PATH,
                                         Config,
                                         _cache_path,
                                         load_config,
                                         load_shared_cpus,
                                         parse_config,
                                         parse_config_text,
                                         read_online_cpus,
                                         resolve_config_path)

GOOD = [
    pytest.param(None, {}, id="empty-file-is-defaults"),
    pytest.param({}, {}, id="empty-mapping"),
    pytest.param({"shared_cpus": "0-1"}, {"shared_cpus": "0-1"}, id="shared-cpus-string"),
    pytest.param({"shared_cpus": 3}, {"shared_cpus": "3"}, id="shared-cpus-number-becomes-text"),
    pytest.param({"shared_cpus_file": "/etc/shared"}, {"shared_cpus_file": "/etc/shared"}, id="shared-file"),
    pytest.param({"annotation_prefix": "cpu.example.com"}, {"annotation_prefix": "cpu.example.com"}, id="prefix"),
    pytest.param({"failure_policy": "ignore"}, {"failure_policy": "ignore"}, id="policy-ignore"),
    pytest.param({"allowed_namespaces": ["ran-*", "du"]}, {"allowed_namespaces": ("ran-*", "du")},
                 id="namespaces-become-a-tuple"),
    pytest.param({"allowed_namespaces": []}, {"allowed_namespaces": ()}, id="no-namespace-allowed"),
    pytest.param({"cdi_spec_dirs": ["/srv/cdi"]}, {"cdi_spec_dirs": ("/srv/cdi",)}, id="cdi-dirs-become-a-tuple"),
    pytest.param({"cgroup_root": "/x/cg", "state_dir": "/x/st", "proc_root": "/x/p", "sys_root": "/x/s"},
                 {"cgroup_root": "/x/cg", "state_dir": "/x/st", "proc_root": "/x/p", "sys_root": "/x/s"},
                 id="roots"),
]


@pytest.mark.parametrize("doc,expected", GOOD)
def test_parse_config(doc: Any, expected: Dict[str, Any]) -> None:
    config = parse_config(doc, "/etc/c.yaml")
    assert config == Config(source="/etc/c.yaml", **expected)


def test_defaults() -> None:
    c = Config()
    assert (c.shared_cpus, c.shared_cpus_file, c.annotation_prefix, c.failure_policy, c.cgroup_root, c.state_dir,
            c.allowed_namespaces, c.proc_root, c.sys_root) == (
        None, "/etc/mixed-cpus-hook/shared-cpus", "mixed-cpus.openshift.io", "fail", "/sys/fs/cgroup",
        "/run/mixed-cpus-hook", (), "/proc", "/sys")


MALFORMED = [
    pytest.param([], "must be a mapping of settings, not an array", id="list"),
    pytest.param("shared_cpus", "must be a mapping of settings, not a string", id="scalar"),
    pytest.param({"shared_cpu": "0"}, "unknown setting 'shared_cpu'", id="unknown-key"),
    pytest.param({"shared_cpus": ["0"]}, "setting 'shared_cpus' must be a cpulist string, not an array", id="cpus-list"),
    pytest.param({"shared_cpus": None}, "setting 'shared_cpus' must be a cpulist string, not null", id="cpus-null"),
    pytest.param({"shared_cpus": -1}, "setting 'shared_cpus' must be a cpulist string, not an integer",
                 id="cpus-negative"),
    pytest.param({"shared_cpus": True}, "not a boolean", id="cpus-bool"),
    pytest.param({"shared_cpus_file": "shared"}, "field 'shared_cpus_file' must be an absolute path",
                 id="relative-shared-file"),
    pytest.param({"state_dir": 5}, "field 'state_dir' must be a string, not an integer", id="state-dir-number"),
    pytest.param({"cgroup_root": "/a\0b"}, "field 'cgroup_root' must be an absolute path", id="nul-in-path"),
    pytest.param({"proc_root": "/" + "p" * 4096}, "field 'proc_root' must be an absolute path", id="path-too-long"),
    pytest.param({"failure_policy": "maybe"}, "setting 'failure_policy': 'maybe' is not one of fail, ignore",
                 id="policy-maybe"),
    pytest.param({"failure_policy": True}, "field 'failure_policy' must be a string, not a boolean",
                 id="policy-yaml-boolean"),
    pytest.param({"annotation_prefix": "cpu-shared.crio.io"}, "'cpu-shared.crio.io' belongs to CRI-O",
                 id="crio-prefix"),
    pytest.param({"annotation_prefix": "Upper.example"}, "is not a DNS subdomain", id="prefix-uppercase"),
    pytest.param({"annotation_prefix": "a/b"}, "is not a DNS subdomain", id="prefix-with-slash"),
    pytest.param({"annotation_prefix": "example.com\n"}, "is not a DNS subdomain", id="prefix-trailing-newline"),
    pytest.param({"annotation_prefix": "-a.example"}, "is not a DNS subdomain", id="prefix-leading-dash"),
    pytest.param({"annotation_prefix": "a" * 254}, "is not a DNS subdomain", id="prefix-too-long"),
    pytest.param({"allowed_namespaces": "ran"}, "field 'allowed_namespaces' must be an array, not a string",
                 id="namespaces-string"),
    pytest.param({"allowed_namespaces": ["ok", ""]}, "setting 'allowed_namespaces': '' is not a non-empty string",
                 id="namespace-empty"),
    pytest.param({"allowed_namespaces": [3]}, "setting 'allowed_namespaces': 3 is not a non-empty string",
                 id="namespace-number"),
    pytest.param({"cdi_spec_dirs": "/etc/cdi"}, "field 'cdi_spec_dirs' must be an array, not a string",
                 id="cdi-dirs-string"),
    pytest.param({"cdi_spec_dirs": []}, "setting 'cdi_spec_dirs' must list 1 to 16 directories, not 0",
                 id="cdi-dirs-empty"),
    pytest.param({"cdi_spec_dirs": ["/d"] * 17}, "setting 'cdi_spec_dirs' must list 1 to 16 directories, not 17",
                 id="cdi-dirs-too-many"),
    pytest.param({"cdi_spec_dirs": ["etc/cdi"]}, "setting 'cdi_spec_dirs': 'etc/cdi' is not an absolute path",
                 id="cdi-dir-relative"),
    pytest.param({"cdi_spec_dirs": [None]}, "setting 'cdi_spec_dirs': None is not an absolute path", id="cdi-dir-null"),
    pytest.param({"cdi_spec_dirs": ["/a\0b"]}, "setting 'cdi_spec_dirs': '/a\\x00b' is not an absolute path",
                 id="cdi-dir-nul"),
]


@pytest.mark.parametrize("doc,message", MALFORMED)
def test_parse_config_malformed(doc: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "/etc/c.yaml")
    assert message in info.value.message
    assert info.value.where == "/etc/c.yaml"
    assert "\n" not in str(info.value)


YAML_ERRORS = [
    pytest.param("shared_cpus: [0\n", "not valid YAML at line 2", id="unclosed-flow"),
    pytest.param("a: b\n  c: d\n", "not valid YAML at line 2, column 4", id="bad-indent"),
    pytest.param("shared_cpus: '0-1\n", "not valid YAML", id="unclosed-quote"),
    pytest.param("\tshared_cpus: 1\n", "not valid YAML at line 1", id="tab"),
]


@pytest.mark.parametrize("text,message", YAML_ERRORS)
def test_parse_config_text_yaml_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "/etc/c.yaml")
    assert info.value.message.startswith(message)
    assert "\n" not in str(info.value)


def test_parse_config_text_comments_only_is_defaults() -> None:
    assert parse_config_text("# nothing set\n", "/c") == Config(source="/c")


RESOLVE = [
    pytest.param("/x.yaml", {CONFIG_ENV: "/env.yaml"}, ("/x.yaml", True), id="explicit-wins"),
    pytest.param(None, {CONFIG_ENV: "/env.yaml"}, ("/env.yaml", True), id="environment"),
    pytest.param(None, {CONFIG_ENV: ""}, (DEFAULT_CONFIG_PATH, False), id="empty-environment"),
    pytest.param(None, {}, (DEFAULT_CONFIG_PATH, False), id="default"),
]


@pytest.mark.parametrize("explicit,environ,expected", RESOLVE)
def test_resolve_config_path(explicit, environ, expected) -> None:
    assert resolve_config_path(explicit, environ) == expected


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_load_config_explicit_missing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path / "nope.yaml"), cache_dir=str(tmp_path / "cache"))
    assert info.value.message == "configuration file not found"
    assert info.value.where == str(tmp_path / "nope.yaml")


def test_load_config_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "failure_policy: ignore\n")
    config = load_config(None, cache_dir=str(tmp_path / "cache"), environ={CONFIG_ENV: path})
    assert (config.failure_policy, config.source) == ("ignore", path)


def test_load_config_uses_cache_dir_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "failure_policy: ignore\n")
    cache = tmp_path / "env-cache"
    load_config(path, environ={CACHE_DIR_ENV: str(cache)})
    assert os.listdir(cache) == [os.path.basename(_cache_path(str(cache), path))]


def test_load_config_unreadable(tmp_path: Path) -> None:
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path / "dir.yaml"), cache_dir=str(tmp_path / "cache"))
    assert info.value.message.startswith("cannot read configuration")


# -- the cache ----------------------------------------------------------------------------

LOAD_AND_REPORT = (
    "import sys\n"
    "from mixed_cpus_hook.node.config import load_config\n"
    "c = load_config(sys.argv[1], cache_dir=sys.argv[2])\n"
    "print(c.failure_policy, c.shared_cpus, 'yaml' in sys.modules)\n"
)


def load_in_fresh_interpreter(path: str, cache: str) -> str:
    proc = subprocess.run([sys.executable, "-I", "-c", LOAD_AND_REPORT, path, cache],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_second_load_does_not_import_yaml(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "failure_policy: ignore\nshared_cpus: 0-1\n")
    cache = str(tmp_path / "cache")
    assert load_in_fresh_interpreter(path, cache) == "ignore 0-1 True"
    assert load_in_fresh_interpreter(path, cache) == "ignore 0-1 False"
    # The file changes (a new size): YAML again, and the new values.
    write(tmp_path / "c.yaml", "failure_policy: fail\nshared_cpus: '2'\n")
    assert load_in_fresh_interpreter(path, cache) == "fail 2 True"
    assert load_in_fresh_interpreter(path, cache) == "fail 2 False"


def cache_file(path: str, cache: str) -> str:
    return _cache_path(cache, path)


def tamper(cache_path: str, **changes: Any) -> None:
    """Rewrite the cached config (keeping its key and its mode), as an attacker would."""
    mode = stat.S_IMODE(os.stat(cache_path).st_mode)
    with open(cache_path, encoding="utf-8") as f:
        data = json.load(f)
    data["config"].update(changes)
    with open(cache_path, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.chmod(cache_path, mode)


def test_cache_is_what_a_second_load_reads(tmp_path: Path) -> None:
    """The control for the tests below: a private cache with the right key is believed."""
    path = write(tmp_path / "c.yaml", "failure_policy: fail\n")
    cache = str(tmp_path / "cache")
    load_config(path, cache_dir=cache)
    assert stat.S_IMODE(os.stat(cache_file(path, cache)).st_mode) == 0o600
    tamper(cache_file(path, cache), failure_policy="ignore")
    assert load_config(path, cache_dir=cache).failure_policy == "ignore"


@pytest.mark.parametrize("mode", [pytest.param(0o620, id="group-writable"), pytest.param(0o602, id="world-writable")])
def test_cache_ignored_when_others_could_write_it(tmp_path: Path, mode: int) -> None:
    path = write(tmp_path / "c.yaml", "failure_policy: fail\n")
    cache = str(tmp_path / "cache")
    load_config(path, cache_dir=cache)
    tamper(cache_file(path, cache), failure_policy="ignore")
    os.chmod(cache_file(path, cache), mode)
    assert load_config(path, cache_dir=cache).failure_policy == "fail"


def test_cache_ignored_when_a_symlink(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "failure_policy: fail\n")
    cache = str(tmp_path / "cache")
    load_config(path, cache_dir=cache)
    real = cache_file(path, cache)
    tamper(real, failure_policy="ignore")
    os.rename(real, real + ".elsewhere")
    os.symlink(real + ".elsewhere", real)
    assert load_config(path, cache_dir=cache).failure_policy == "fail"


CHANGES = [
    pytest.param(lambda p: Path(p).write_text("failure_policy: fail\n# a longer file\n"), id="new-size"),
    pytest.param(lambda p: (Path(p).write_text("failure_policy: fail\n"),
                            os.utime(p, ns=(os.stat(p).st_atime_ns, os.stat(p).st_mtime_ns + 10**9))),
                 id="same-size-new-mtime"),
    pytest.param(lambda p: (Path(p + ".new").write_text("failure_policy: fail\n"), os.replace(p + ".new", p)),
                 id="replaced-by-rename"),
]


@pytest.mark.parametrize("change", CHANGES)
def test_cache_invalidated_when_the_file_changes(tmp_path: Path, change) -> None:
    path = write(tmp_path / "c.yaml", "failure_policy: ignore\n")
    cache = str(tmp_path / "cache")
    assert load_config(path, cache_dir=cache).failure_policy == "ignore"
    change(path)
    assert load_config(path, cache_dir=cache).failure_policy == "fail"
    assert load_config(path, cache_dir=cache).failure_policy == "fail"


def test_invalid_config_is_never_cached(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "failure_policy: maybe\n")
    cache = str(tmp_path / "cache")
    for _ in range(2):
        with pytest.raises(ConfigError, match="'maybe' is not one of"):
            load_config(path, cache_dir=cache)
    assert not os.path.exists(cache_file(path, cache))


def test_cached_config_is_validated_again(tmp_path: Path) -> None:
    """A cache entry is data, not trust: an invalid value in it is still an error."""
    path = write(tmp_path / "c.yaml", "failure_policy: fail\n")
    cache = str(tmp_path / "cache")
    load_config(path, cache_dir=cache)
    tamper(cache_file(path, cache), state_dir="relative")
    with pytest.raises(ConfigError, match="'state_dir' must be an absolute path"):
        load_config(path, cache_dir=cache)


def test_unwritable_cache_dir_only_costs_time(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "failure_policy: ignore\n")
    blocker = write(tmp_path / "not-a-dir", "")
    assert load_config(path, cache_dir=blocker).failure_policy == "ignore"


def test_cache_paths_are_encoded_not_joined(tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    a = _cache_path(cache, "/etc/a/b.yaml")
    b = _cache_path(cache, "/etc/a%2Fb.yaml")
    assert os.path.dirname(a) == os.path.dirname(b) == cache
    assert a != b


def test_writing_an_entry_prunes_those_of_gone_files(tmp_path: Path) -> None:
    """A node that saw many configuration files (fake nodes, renamed files) keeps no entry for a gone one."""
    cache = str(tmp_path / "cache")
    live = write(tmp_path / "live.yaml", "failure_policy: fail\n")
    load_config(live, cache_dir=cache)
    gone = []
    for i in range(40):
        path = write(tmp_path / f"gone%2F{i}.yaml", "failure_policy: fail\n")
        load_config(path, cache_dir=cache)
        os.unlink(path)
        gone.append(cache_file(path, cache))
    stale_tmp = cache_file(live, cache) + ".999999.tmp"  # a writer that died between write and rename
    Path(stale_tmp).write_text("{}")
    os.utime(stale_tmp, (0, 0))
    assert all(os.path.exists(g) for g in gone[-1:])
    new = write(tmp_path / "new.yaml", "failure_policy: ignore\n")
    assert load_config(new, cache_dir=cache).failure_policy == "ignore"
    assert sorted(os.listdir(cache)) == sorted(os.path.basename(cache_file(p, cache)) for p in (live, new))


def test_the_cache_stays_bounded(tmp_path: Path) -> None:
    """Even when every file still exists: at most MAX_CACHE_ENTRIES, the least recently written go first."""
    cache = str(tmp_path / "cache")
    paths = [write(tmp_path / f"c{i}.yaml", "failure_policy: fail\n") for i in range(MAX_CACHE_ENTRIES + 5)]
    for i, path in enumerate(paths):
        load_config(path, cache_dir=cache)
        os.utime(cache_file(path, cache), (i, i))
    names = sorted(os.listdir(cache))
    assert len(names) == MAX_CACHE_ENTRIES
    assert os.path.basename(cache_file(paths[-1], cache)) in names
    assert os.path.basename(cache_file(paths[0], cache)) not in names


# -- shared and online CPUs -----------------------------------------------------------------

def test_shared_cpus_from_the_setting_win_over_the_file(tmp_path: Path) -> None:
    config = Config(shared_cpus="0,2", shared_cpus_file=str(tmp_path / "absent"), source="/c.yaml")
    assert load_shared_cpus(config) == (frozenset({0, 2}), "/c.yaml: setting 'shared_cpus'")


def test_shared_cpus_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "shared", "# reserved\n0-1\n")
    assert load_shared_cpus(Config(shared_cpus_file=path)) == (frozenset({0, 1}), path)


SHARED_ERRORS = [
    pytest.param({"shared_cpus": "a"}, None, CpuListError, "bad item 'a'", "/c.yaml: setting 'shared_cpus'",
                 id="setting-not-a-cpulist"),
    pytest.param({"shared_cpus": ""}, None, ConfigError, "no shared CPUs configured", "/c.yaml: setting 'shared_cpus'",
                 id="setting-empty"),
    pytest.param({}, None, ConfigError, "shared-CPU file not found", "{file}", id="file-missing"),
    pytest.param({}, "# none yet\n", ConfigError, "no shared CPUs configured", "{file}", id="file-empty"),
    pytest.param({}, "0-1\nx\n", CpuListError, "bad item 'x'", "{file}", id="file-not-a-cpulist"),
    pytest.param({}, b"\xff\xfe", ConfigError, "cannot read shared-CPU file", "{file}", id="file-not-text"),
]


@pytest.mark.parametrize("settings,content,error,message,where", SHARED_ERRORS)
def test_load_shared_cpus_errors(tmp_path: Path, settings, content, error, message, where) -> None:
    path = tmp_path / "shared"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    config = Config(shared_cpus_file=str(path), source="/c.yaml", **settings)
    with pytest.raises(error) as info:
        load_shared_cpus(config)
    assert message in info.value.message
    assert info.value.where == where.format(file=path)


def test_read_online_cpus(tmp_path: Path) -> None:
    write(tmp_path / "devices/system/cpu/online", "0-5,8\n")
    assert read_online_cpus(str(tmp_path)) == frozenset({0, 1, 2, 3, 4, 5, 8})


def test_read_online_cpus_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        read_online_cpus(str(tmp_path))
    assert info.value.message.startswith("cannot read the online CPUs")
    assert info.value.where == str(tmp_path / "devices/system/cpu/online")
