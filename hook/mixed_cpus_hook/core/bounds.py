"""Every bound on a value from outside (a runtime, a pod, a cgroup file), with the reason for it.

The NRI plugin is one long-running process that serves whatever its runtime sends: a buggy or
hostile runtime must not be able to make it allocate, loop, log or answer without bound. Each
value is checked against its bound here *before* it costs anything (a parse, a lookup, a
record, a write), and refused with a one-line message naming it. Pure constants and checks,
standard library only (the hook path imports this module too).
"""

from __future__ import annotations

from .errors import HookError, RuntimeInputError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Optional, Type

# -- CPUs and cpulists ------------------------------------------------------------------------
# The highest CPU number: the kernel's NR_CPUS is at most 8192 (x86_64 CONFIG_MAXSMP), so no
# node has more. It also bounds the size of every parsed cpuset (8192 CPUs).
MAX_CPU = 8191
# The longest cpulist text parsed: 8192 CPUs written one by one ("0,1,2,...,8191") take about
# 38 KB; a cgroupfs file is read in one 64 KiB read. Longer text is refused before it is split.
MAX_CPULIST_TEXT = 64 << 10

# -- CFS bandwidth (kernel/sched/core.c: tg_set_cfs_bandwidth, tg_set_bandwidth) ----------------
# A period from 1 ms (min_cfs_quota_period) to 1 s (max_cfs_quota_period), in microseconds.
MIN_PERIOD = 1000
MAX_PERIOD = 1000000
# A finite quota from 1 ms (min_cfs_quota_period) to max_cfs_runtime = MAX_BW microseconds,
# MAX_BW = 2^(64 - BW_SHIFT) - 1 with BW_SHIFT 20: the kernel answers EINVAL above it. The
# raised values (base + shared x period, a container's and its pod's) must fit too, and they
# then always fit NRI's int64 fields.
MIN_QUOTA = 1000
MAX_QUOTA = (1 << 44) - 1

# -- strings from the runtime -------------------------------------------------------------------
# A container id: it names a record file ("<id>.json" and its temporary ".<id>.<pid>.tmp" must
# fit NAME_MAX, 255 bytes). containerd and CRI-O ids are 64 hexadecimal digits.
MAX_ID = 255 - len("..1234567.tmp")
# Pod and container names and the namespace: Kubernetes object names are DNS subdomains of at
# most 253 characters (namespaces and container names are DNS labels, at most 63).
MAX_NAME = 253
# A pod uid: a UUID (36 characters) or, for a static pod, a 32-digit hash; always hexadecimal
# digits and dashes (it names the pod cgroup: cgroupfs "pod<uid>", systemd "pod<uid with _>").
MAX_UID = 64
UID_CHARS = frozenset("0123456789abcdefABCDEF-")
# Annotations of one pod or one container, keys and values together: Kubernetes refuses more
# than 256 KiB for one object (TotalAnnotationSizeLimitB). Their number is checked first (it is
# known before any is read): kubelet and the runtimes add a few dozen, pods rarely more.
MAX_ANNOTATIONS_BYTES = 256 << 10
MAX_ANNOTATIONS = 4096
# A container's environment (its "NAME=value" entries: the CPU DRA driver's claims are there):
# Kubernetes sets no limit on their number; the kernel's ARG_MAX (2 MiB by default on Linux, for
# the arguments and the environment together) bounds what a process can start with.
MAX_ENV_ENTRIES = 32768
MAX_ENV_BYTES = 2 << 20
# A cgroups path or a pod's cgroup parent: PATH_MAX, and NAME_MAX for each of its components.
MAX_CGROUPS_PATH = 4096
MAX_PATH_COMPONENT = 255

# -- CDI specs (exclusive_source dra: a claim counts only when a CDI spec holds it) ---------------
# Entries looked at in one CDI spec directory, per request: the CPU DRA driver writes one spec per
# prepared claim, and a node runs some hundreds of pods (kubelet's default maximum 110, OpenShift's
# tested 500) with a few claims each, beside other drivers' few specs (one per GPU vendor). Past it
# the rest of the directory is not read (a warning names it): a claim only there is refused.
MAX_CDI_DIR_ENTRIES = 4096
# One spec file: the driver's is some 200 bytes; a GPU vendor's spec with every library it mounts is
# some 100 KB. Larger files are skipped with a warning, before they are read.
MAX_CDI_SPEC_BYTES = 1 << 20
# A spec that holds a claim and is not JSON is parsed as YAML only up to this size: PyYAML's pure-Python
# loader (the one whose recursion Python bounds) takes about 2 s per MiB (measured: a 1 MiB spec in 2.1 s
# on the 2-CPU test machine), NRI's whole budget for a request; 64 KiB is some 130 ms, once per change of
# the file. The CPU DRA driver writes JSON (some 200 bytes), which the json module reads at any size here.
MAX_CDI_YAML_BYTES = 64 << 10
# Devices in one spec (the driver writes one per file; a GPU vendor one per GPU and partition) and
# env entries in one device's containerEdits (the driver writes one): past either, the spec is skipped.
MAX_CDI_DEVICES = 1024
MAX_CDI_DEVICE_ENV = 256
# Directories in cdi_spec_dirs (containerd and CRI-O default to two).
MAX_CDI_SPEC_DIRS = 16

# -- Synchronize ----------------------------------------------------------------------------------
# A runtime may split Synchronize in parts (``more``); the plugin keeps only what it needs of each
# container and pod, and at most this much in all. kubelet runs 110 pods per node by default and
# 500 in the largest supported configurations (OpenShift's tested maximum), some 1,500 containers
# with their last exited ones; these are four to five times that. What is past them is cut before
# it is decoded: the plugin handles some 60,000 containers a second (RHEL 9's pure-Python
# protobuf decodes about as many), so a Synchronize at these bounds stays well inside NRI's 2 s.
MAX_SYNC_PODS = 2048
MAX_SYNC_CONTAINERS = 8192
# The bytes kept across the parts (trimmed messages): beyond it the rest is not looked at.
MAX_SYNC_KEPT_BYTES = 32 << 20

# -- messages --------------------------------------------------------------------------------------
# One value from outside quoted in a message (error, log line, ttrpc status): escaped and cut.
QUOTE_LIMIT = 120
# A log line (journald's LineMax defaults to 48 KiB) and a ttrpc error status: cut beyond these.
MAX_LOG_LINE = 8192
MAX_STATUS_MESSAGE = 4096

# -- the runtime connection -----------------------------------------------------------------------
# Answers the runtime has not read yet: past this the plugin reads no further request (a runtime
# that asks and never reads cannot make it buffer without end); two maximal frames fit.
MAX_OUTBOUND = 8 << 20
# A runtime that has not read a byte of a pending answer for this long is dropped (the plugin
# reconnects). NRI's own request timeout is 2 s: by then the runtime gave up on the answer.
WRITE_TIMEOUT = 5.0
# Repeated protocol errors (frames for an unknown connection, malformed requests) are counted:
# the first is logged, then one summary at most this often.
REPEAT_LOG_INTERVAL = 60.0


def check_length(value: str, limit: int, what: str, where: str,
                 error: "Type[HookError]" = RuntimeInputError) -> str:
    """``value`` itself, unless it is longer than ``limit`` or holds a NUL (then ``error``)."""
    if len(value) > limit:
        raise error(f"{what} of {len(value)} characters is longer than the {limit} allowed", where)
    if "\0" in value:
        raise error(f"{what} holds a NUL character", where)
    return value


def check_period(period: int, what: str, where: str) -> int:
    """A CFS period the kernel accepts (0: not given, left to the default)."""
    if period != 0 and not MIN_PERIOD <= period <= MAX_PERIOD:
        raise RuntimeInputError(f"{what} {period} is outside the kernel's {MIN_PERIOD}..{MAX_PERIOD} us", where)
    return period


def check_quota(quota: "Optional[int]", what: str, where: str) -> "Optional[int]":
    """A finite CFS quota the kernel accepts (None: unlimited)."""
    if quota is not None and not MIN_QUOTA <= quota <= MAX_QUOTA:
        raise RuntimeInputError(f"{what} {quota} is outside the kernel's {MIN_QUOTA}..{MAX_QUOTA} us", where)
    return quota


def check_uid(uid: str, where: str) -> str:
    """A pod uid: required, hexadecimal digits and dashes, at most MAX_UID characters."""
    if not uid:
        raise RuntimeInputError("the pod uid is empty: the pod cgroup cannot be identified", where)
    if len(uid) > MAX_UID or not UID_CHARS.issuperset(uid) or uid.strip("-") != uid:
        raise RuntimeInputError(f"pod uid {quote(uid)} is not a Kubernetes uid (hexadecimal digits and dashes, "
                                f"at most {MAX_UID})", where)
    return uid


def quote(value: Any, limit: int = QUOTE_LIMIT, bare: bool = False) -> str:
    """``value`` (text or bytes from outside) for a message: its repr, cut to ``limit`` characters.

    The one helper every message that quotes input uses (errors, log lines, ttrpc statuses): the
    cost and the length of the result are bounded whatever the input (a 4 MiB method name, a
    cpulist of a million characters), and control characters come out escaped. ``bare``: short
    printable text is written as it is, without quotes (a name in a status worded like Go's).
    """
    if bare and isinstance(value, str) and len(value) <= limit and value.isprintable() and value.strip() == value:
        return value
    if isinstance(value, (str, bytes, bytearray)) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} {'characters' if isinstance(value, str) else 'bytes'})"
    text = repr(value)
    return text if len(text) <= 4 * limit else f"{text[:4 * limit]}... (cut)"
