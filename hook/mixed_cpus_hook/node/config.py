"""The hook's configuration: defaults, parsing, and a cache the hook path reads without YAML.

Importing PyYAML costs more than the hook's whole budget on a container start, so the
first load of a YAML file stores the validated result as JSON in a root-owned cache keyed
by the file's identity (device, inode, size, mtime, ctime); later loads only stat the file
and read that JSON. Any change to the file changes the key.
"""

from __future__ import annotations

import json
import os

from ..core.cpuset import parse_cpulist, parse_cpulist_file
from ..core.errors import ConfigError
from ..core.validate import check_config
from .files import FileRefused, parse_yaml_text, read_regular_file

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Dict, FrozenSet, Mapping, NamedTuple, Optional, Tuple
else:
    from ..core.compat import NamedTuple

DEFAULT_CONFIG_PATH = "/etc/mixed-cpus-hook/config.yaml"
CONFIG_ENV = "MIXED_CPUS_HOOK_CONFIG"
CACHE_DIR_ENV = "MIXED_CPUS_HOOK_CACHE_DIR"
DEFAULT_CACHE_DIR = "/run/mixed-cpus-hook/config-cache"
# Caps on the hook's own files: a config of settings is a few hundred bytes, a cpulist less.
MAX_CONFIG_BYTES = 1 << 20
MAX_SHARED_CPUS_BYTES = 64 << 10
# The cache keeps one entry per configuration path. A node normally has one; writing an entry
# prunes those of files that are gone and keeps the directory at this many (the least recently
# written go first), so fake nodes, tests and renamed files never pile up.
MAX_CACHE_ENTRIES = 16
STALE_TMP_SECONDS = 60
# CDI's own default spec directories (static, then generated), containerd's and CRI-O's default too.
DEFAULT_CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


class Config(NamedTuple):
    """Settings after defaults are applied; see schemas/config.schema.json."""

    shared_cpus: Optional[str] = None
    shared_cpus_file: str = "/etc/mixed-cpus-hook/shared-cpus"
    reserved_cpus: Optional[str] = None
    exclusive_source: str = "kubelet"
    pool_quota_cpus: float = 1
    cdi_spec_dirs: Tuple[str, ...] = DEFAULT_CDI_SPEC_DIRS
    annotation_prefix: str = "mixed-cpus.openshift.io"
    failure_policy: str = "fail"
    cgroup_root: str = "/sys/fs/cgroup"
    state_dir: str = "/run/mixed-cpus-hook"
    allowed_namespaces: Tuple[str, ...] = ()
    proc_root: str = "/proc"
    sys_root: str = "/sys"
    kubelet_state_file: str = "/var/lib/kubelet/cpu_manager_state"
    metrics_file: Optional[str] = None
    source: str = "(defaults)"


def parse_config(doc: Any, where: str) -> Config:
    """Validate a parsed YAML document and apply defaults."""
    if doc is None:
        doc = {}
    check_config(doc, where, ConfigError)
    values: Dict[str, Any] = dict(doc)
    for key in ("shared_cpus", "reserved_cpus"):
        if key in values:
            values[key] = str(values[key])
    for key in ("allowed_namespaces", "cdi_spec_dirs"):
        if key in values:
            values[key] = tuple(values[key])
    return Config(source=where, **values)


NOT_JSON = object()  # parse_json_config: the text is not JSON


def parse_json_config(text: str, where: str) -> Any:
    """The document of a configuration written as JSON (JSON is YAML), else ``NOT_JSON``.

    A node without PyYAML (RHCOS without a custom image: ``machineconfig --no-image`` writes
    the configuration as JSON) reads it with the json module; text that does not parse as
    JSON goes to the YAML parser, which gives YAML's own error messages.
    """
    if not text.lstrip().startswith("{"):
        return NOT_JSON
    try:
        return json.loads(text)
    except RecursionError:
        raise ConfigError("not valid YAML: nested too deeply", where) from None
    except ValueError:
        return NOT_JSON


def parse_config_text(text: str, where: str) -> Config:
    """Parse the configuration's text: JSON with the json module, else YAML (imports PyYAML).

    Neither runs on the hook path unless the cache misses.
    """
    doc = parse_json_config(text, where)
    if doc is not NOT_JSON:
        return parse_config(doc, where)
    return parse_config(parse_yaml_text(text, where, ConfigError), where)  # PyYAML lazily: see module docstring


def resolve_config_path(explicit: Optional[str], environ: Optional[Mapping[str, str]] = None) -> Tuple[str, bool]:
    """The config path to use and whether it was asked for (a missing default means defaults)."""
    env = os.environ if environ is None else environ
    if explicit:
        return explicit, True
    if env.get(CONFIG_ENV):
        return env[CONFIG_ENV], True
    return DEFAULT_CONFIG_PATH, False


def _stat_key(st: os.stat_result) -> list:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _cache_path(cache_dir: str, path: str) -> str:
    # One cache file per config path; the path is encoded, never joined as-is.
    return os.path.join(cache_dir, os.path.abspath(path).replace("%", "%25").replace("/", "%2F") + ".json")


def _cached_config_path(name: str) -> str:
    """The configuration path a cache file name encodes (the inverse of _cache_path's encoding)."""
    import re

    return re.sub("%(25|2F)", lambda m: "%" if m.group(1) == "25" else "/", name[: -len(".json")])


def _prune_cache(cache_dir: str, keep: str) -> None:
    """Remove the entries of gone files and crashed writers' temporaries, then the oldest beyond
    MAX_CACHE_ENTRIES. Best effort; only on a cache miss (never on the usual container start)."""
    import time

    kept = []
    try:
        with os.scandir(cache_dir) as entries:
            for entry in entries:
                if entry.name == keep:
                    continue
                st = entry.stat(follow_symlinks=False)
                if entry.name.endswith(".tmp"):
                    stale = st.st_mtime < time.time() - STALE_TMP_SECONDS
                else:
                    stale = not os.path.lexists(_cached_config_path(entry.name))
                if stale:
                    os.unlink(entry.path)
                else:
                    kept.append((st.st_mtime, entry.path))
        for _mtime, path in sorted(kept)[: max(0, len(kept) - (MAX_CACHE_ENTRIES - 1))]:
            os.unlink(path)
    except OSError:
        pass


def _read_cache(cache_file: str, key: list) -> Optional[Dict[str, Any]]:
    try:
        fd = os.open(cache_file, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        # Trust only a cache that nobody else could have written.
        if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
            return None
        data = json.loads(os.read(fd, 1 << 20))
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)
    if isinstance(data, dict) and data.get("key") == key and isinstance(data.get("config"), dict):
        return data["config"]
    return None


def _write_cache(cache_file: str, key: list, doc: Dict[str, Any]) -> None:
    """Best effort: a node where the cache cannot be written is only slower."""
    try:
        os.makedirs(os.path.dirname(cache_file), mode=0o700, exist_ok=True)
        tmp = f"{cache_file}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, json.dumps({"key": key, "config": doc}).encode())
        finally:
            os.close(fd)
        os.replace(tmp, cache_file)
    except OSError:
        return
    _prune_cache(os.path.dirname(cache_file), os.path.basename(cache_file))


def load_config(path: Optional[str] = None, cache_dir: Optional[str] = None,
                environ: Optional[Mapping[str, str]] = None) -> Config:
    """Load the configuration: ``--config``, else $MIXED_CPUS_HOOK_CONFIG, else the default file.

    A missing default file means all defaults; a missing file that was asked for is an error.
    """
    env = os.environ if environ is None else environ
    cfg_path, explicit = resolve_config_path(path, env)
    cache_dir = cache_dir or env.get(CACHE_DIR_ENV) or DEFAULT_CACHE_DIR
    try:
        st = os.stat(cfg_path)
    except FileNotFoundError:
        if explicit:
            raise ConfigError("configuration file not found", cfg_path) from None
        return Config()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration: {exc.strerror}", cfg_path) from None
    key = _stat_key(st)
    cache_file = _cache_path(cache_dir, cfg_path)
    cached = _read_cache(cache_file, key)
    if cached is not None:
        return parse_config(cached, cfg_path)
    try:
        text = read_regular_file(cfg_path, MAX_CONFIG_BYTES).decode("utf-8")
    except FileRefused as exc:
        raise ConfigError(f"configuration file is {exc}", cfg_path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read configuration: {getattr(exc, 'strerror', None) or exc}", cfg_path) from None
    config = parse_config_text(text, cfg_path)
    doc = {k: v for k, v in config._asdict().items() if k != "source" and v != getattr(Config(), k)}
    doc = {k: list(v) if isinstance(v, tuple) else v for k, v in doc.items()}
    _write_cache(cache_file, key, doc)
    return config


def is_pool(config: Config) -> bool:
    """Whether the shared CPUs are the pool that follows the exclusive allocations (shared_cpus: pool)."""
    return config.shared_cpus == "pool"


def compute_pool_quota_mcpu(config: Config) -> int:
    """pool_quota_cpus in millicpus (the quota budget of a mixed container's time on the pool)."""
    return int(round(config.pool_quota_cpus * 1000))


def load_reserved_cpus(config: Config) -> FrozenSet[int]:
    """reserved_cpus (never in the pool, never claimable); empty when unset."""
    if config.reserved_cpus is None:
        return frozenset()
    return parse_cpulist(config.reserved_cpus, f"{config.source}: setting 'reserved_cpus'")


def load_shared_cpus(config: Config) -> Tuple[FrozenSet[int], str]:
    """The node's shared CPUs and where they came from (the setting or the file); a fixed set only
    (with shared_cpus: pool, node.facts computes the pool)."""
    if is_pool(config):
        raise ConfigError("the shared CPUs are the pool (shared_cpus: pool): they follow the exclusive "
                          "allocations and are not a fixed list", f"{config.source}: setting 'shared_cpus'")
    if config.shared_cpus is not None:
        where = f"{config.source}: setting 'shared_cpus'"
        cpus = parse_cpulist(config.shared_cpus, where)
    else:
        where = config.shared_cpus_file
        try:
            # newlines translated as text mode would (the file may come from a CRLF editor)
            text = read_regular_file(where, MAX_SHARED_CPUS_BYTES).decode("utf-8").replace("\r\n", "\n")
        except FileRefused as exc:
            raise ConfigError(f"shared-CPU file is {exc}", where) from None
        except FileNotFoundError:
            raise ConfigError(
                "shared-CPU file not found (write the node's shared cpulist there, or set 'shared_cpus')", where
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read shared-CPU file: {getattr(exc, 'strerror', None) or exc}", where) from None
        cpus = parse_cpulist_file(text, where)
    if not cpus:
        raise ConfigError("no shared CPUs configured (the cpulist is empty)", where)
    return cpus, where


def read_online_cpus(sys_root: str = "/sys") -> FrozenSet[int]:
    """The CPUs the kernel has online, from <sys_root>/devices/system/cpu/online."""
    path = online_file(sys_root)
    return parse_cpulist(read_online_text(path), path)


def online_file(sys_root: str = "/sys") -> str:
    return os.path.join(sys_root, "devices/system/cpu/online")


def read_online_text(path: str) -> str:
    """The text of the online CPUs file ``path`` (ConfigError when it cannot be read)."""
    try:
        # os.open/os.read: three system calls where a buffered open() makes nine (read every
        # event); bytes.decode: open(encoding="ascii") would import encodings.ascii.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 65536)
        finally:
            os.close(fd)
        return data.decode("ascii").replace("\r\n", "\n").replace("\r", "\n")
    except OSError as exc:
        raise ConfigError(f"cannot read the online CPUs: {exc.strerror}", path) from None
