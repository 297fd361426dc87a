"""Hand-written checks that mirror the JSON Schemas in ``schemas/`` for the hook's fast path.

jsonschema takes longer to import than the whole hook may take, so the createRuntime path
validates with these functions instead. The schemas stay the contract: the test suite runs
both over a corpus of good and bad documents and requires that they agree.
Each function raises ``error_cls(message, where)`` naming the first offending field.
"""

from __future__ import annotations

import re

from .bounds import MAX_CDI_SPEC_DIRS
from .errors import HookError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Dict, Mapping, Optional, Type

# The patterns are the schemas' words; the hook path checks them with the hand matchers below
# (is_plain_name, is_cpulist_text, is_timestamp_text, core.cgroup's is_pod_dir_name and
# compute_systemd_path): each process compiles a regular expression it uses (0.05-0.1 ms
# apiece, five on a steady apply), and a container start pays that. tests/unit/test_matchers.py
# runs each matcher against its pattern over a table and a seeded random corpus.
# \Z, not $: "$" also matches before a newline.
# runc's rule for container ids, minus "." and ".." which would name a directory.
ID_PATTERN = r"^[A-Za-z0-9_+.-]{1,1024}\Z"
# The longest container id the state directory can hold: a record's temporary file is
# ".<id>.<pid>.tmp" (pid up to 4194304, 7 digits), and a file name is at most 255 bytes.
MAX_ID_LENGTH = 255 - len("..1234567.tmp")
# A file name we derive from a cgroup or pod name: no separators, no dot-only names.
NAME_PATTERN = r"^[A-Za-z0-9_+.:@-]{1,255}\Z"
# A DNS subdomain, the part of an annotation key before the "/".
PREFIX_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
# Prefixes CRI-O strips or acts on itself.
FORBIDDEN_PREFIXES = ("cpu-shared.crio.io",)
POLICIES = ("fail", "ignore")
EXCLUSIVE_SOURCES = ("kubelet", "dra")
POOL = "pool"  # shared_cpus: the pool that follows the exclusive allocations
CONFIG_KEYS = (
    "shared_cpus",
    "shared_cpus_file",
    "reserved_cpus",
    "exclusive_source",
    "pool_quota_cpus",
    "cdi_spec_dirs",
    "annotation_prefix",
    "failure_policy",
    "cgroup_root",
    "state_dir",
    "allowed_namespaces",
    "proc_root",
    "sys_root",
    "kubelet_state_file",
    "metrics_file",
)


ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
DIGITS = "0123456789"
# The characters of ID_PATTERN and NAME_PATTERN.
ID_CHARS = ALNUM + "_+.-"
NAME_CHARS = ALNUM + "_+.:@-"
# pattern -> (its characters, its longest match), for the patterns is_plain_name matches by hand.
_PLAIN = {ID_PATTERN: (ID_CHARS, 1024), NAME_PATTERN: (NAME_CHARS, 255)}


def is_plain_name(value: str, pattern: str = ID_PATTERN) -> bool:
    """True for a name that is safe as one path component (not "." or "..").

    ``pattern`` is ID_PATTERN or NAME_PATTERN (matched without ``re``; see above) or any other
    pattern, matched with ``re``.
    """
    if type(value) is not str or value in (".", ".."):
        return False
    plain = _PLAIN.get(pattern)
    if plain is None:
        return re.match(pattern, value) is not None
    chars, longest = plain
    return 0 < len(value) <= longest and not value.strip(chars)


def is_cpulist_text(value: str) -> bool:
    """True for a cpulist as the kernel prints it: ``[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*``."""
    for part in value.split(","):
        low, dash, high = part.partition("-")
        if not low or low.strip(DIGITS) or (dash and (not high or high.strip(DIGITS))):
            return False
    return True


def is_timestamp_text(value: str) -> bool:
    """True for a UTC timestamp to the second, ``YYYY-MM-DDTHH:MM:SSZ`` (digits not range-checked)."""
    return (len(value) == 20 and value[4] == value[7] == "-" and value[10] == "T" and value[13] == value[16] == ":"
            and value[19] == "Z"
            and not (value[:4] + value[5:7] + value[8:10] + value[11:13] + value[14:16] + value[17:19]).strip(DIGITS))


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _field(doc: Mapping[str, Any], key: str, kind: type, where: str, err: Type[HookError],
           required: bool = False) -> Any:
    if key not in doc:
        if required:
            raise err(f"required field {key!r} is missing", where)
        return None
    value = doc[key]
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        expected = {str: "a string", int: "an integer", dict: "an object", list: "an array"}[kind]
        raise err(f"field {key!r} must be {expected}, not {_type_name(value)}", where)
    return value


def is_abs_path(value: Any) -> bool:
    """An absolute path as the schema's ``absolute_path``: starts with "/", no NUL byte, at most 4096 characters."""
    return isinstance(value, str) and value.startswith("/") and "\0" not in value and len(value) <= 4096


def _abs_path(doc: Mapping[str, Any], key: str, where: str, err: Type[HookError],
              required: bool = False) -> Optional[str]:
    value = _field(doc, key, str, where, err, required)
    if value is not None and not is_abs_path(value):
        raise err(f"field {key!r} must be an absolute path, not {value!r}", where)
    return value


def _string_map(value: Any, key: str, where: str, err: Type[HookError]) -> Dict[str, str]:
    for k, v in value.items():
        if not isinstance(v, str):
            raise err(f"field {key!r}: value of {k!r} must be a string, not {_type_name(v)}", where)
    return value


def check_state(doc: Any, where: str, err: Type[HookError]) -> None:
    """The OCI runtime state (runtime-spec "state"), as runc and crun send it to hooks."""
    if not isinstance(doc, dict):
        raise err(f"must be a JSON object, not {_type_name(doc)}", where)
    _field(doc, "ociVersion", str, where, err, required=True)
    cid = _field(doc, "id", str, where, err, required=True)
    if len(cid) > MAX_ID_LENGTH:
        raise err(f"field 'id': {len(cid)} characters, more than the {MAX_ID_LENGTH} a file name in the state "
                  "directory can hold", where)
    if not is_plain_name(cid):
        raise err(f"field 'id': {cid[:80]!r} is not a plain container id", where)
    _field(doc, "status", str, where, err)
    pid = _field(doc, "pid", int, where, err)
    if pid is not None and not 0 <= pid <= 4194304:
        raise err(f"field 'pid': {pid} is not a process id", where)
    _abs_path(doc, "bundle", where, err, required=True)
    ann = _field(doc, "annotations", dict, where, err)
    if ann is not None:
        _string_map(ann, "annotations", where, err)


def check_config(doc: Any, where: str, err: Type[HookError]) -> None:
    """The hook's YAML configuration after YAML parsing (an empty file is an empty object)."""
    if not isinstance(doc, dict):
        raise err(f"must be a mapping of settings, not {_type_name(doc)}", where)
    for key in doc:
        if key not in CONFIG_KEYS:
            raise err(f"unknown setting {key!r} (known: {', '.join(CONFIG_KEYS)})", where)
    for key in ("shared_cpus", "reserved_cpus"):
        value = doc.get(key)
        if key in doc and not isinstance(value, str) and not (
            isinstance(value, int) and not isinstance(value, bool) and value >= 0
        ):
            raise err(f"setting {key!r} must be a cpulist string, not {_type_name(value)}", where)
    source = _field(doc, "exclusive_source", str, where, err)
    if source is not None and source not in EXCLUSIVE_SOURCES:
        raise err(f"setting 'exclusive_source': {source!r} is not one of {', '.join(EXCLUSIVE_SOURCES)}", where)
    if source == "dra" and doc.get("shared_cpus") != POOL:
        raise err("setting 'exclusive_source': dra needs 'shared_cpus: pool' (claims take their CPUs from the "
                  "pool)", where)
    budget = doc.get("pool_quota_cpus")
    if "pool_quota_cpus" in doc and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                                     or not 0 <= budget <= 8192):
        raise err(f"setting 'pool_quota_cpus' must be a number of CPUs from 0 to 8192, not {budget!r:.40}", where)
    for key in ("shared_cpus_file", "cgroup_root", "state_dir", "proc_root", "sys_root", "kubelet_state_file", "metrics_file"):
        _abs_path(doc, key, where, err)
    prefix = _field(doc, "annotation_prefix", str, where, err)
    if prefix is not None and (len(prefix) > 253 or not re.match(PREFIX_PATTERN, prefix)):
        raise err(f"setting 'annotation_prefix': {prefix!r} is not a DNS subdomain", where)
    if prefix in FORBIDDEN_PREFIXES:
        raise err(f"setting 'annotation_prefix': {prefix!r} belongs to CRI-O, which strips or acts on it", where)
    policy = _field(doc, "failure_policy", str, where, err)
    if policy is not None and policy not in POLICIES:
        raise err(f"setting 'failure_policy': {policy!r} is not one of {', '.join(POLICIES)}", where)
    dirs = _field(doc, "cdi_spec_dirs", list, where, err)
    if dirs is not None and not 1 <= len(dirs) <= MAX_CDI_SPEC_DIRS:
        raise err(f"setting 'cdi_spec_dirs' must list 1 to {MAX_CDI_SPEC_DIRS} directories, not {len(dirs)}", where)
    for item in dirs or ():
        if not is_abs_path(item):
            raise err(f"setting 'cdi_spec_dirs': {item!r:.80} is not an absolute path", where)
    globs = _field(doc, "allowed_namespaces", list, where, err)
    for item in globs or ():
        if not isinstance(item, str) or not item:
            raise err(f"setting 'allowed_namespaces': {item!r} is not a non-empty string", where)
