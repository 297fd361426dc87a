"""One exception hierarchy: every failure carries its exit code and a one-line message.

The message names what is wrong and where (a file, a field, an annotation), because the
only places it is ever seen are a runtime's error text and the journal.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


class HookError(Exception):
    """A failure the hook reports on one line; ``exit_code`` is what the process returns."""

    exit_code = EXIT_ERROR
    kind = "error"

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class UsageError(HookError):
    """Wrong command line: exit 2, like click."""

    exit_code = EXIT_USAGE
    kind = "usage error"


class ConfigError(HookError):
    """The hook's own configuration (YAML, shared-CPU file) is unreadable or invalid."""

    kind = "config error"


class StateError(HookError):
    """The OCI state on stdin is not what a runtime sends."""

    kind = "invalid state"


class SpecError(HookError):
    """The bundle's config.json is unreadable or invalid."""

    kind = "invalid config.json"


class RequestError(HookError):
    """The pod's annotation asks for something we do not do."""

    kind = "invalid request"


class PolicyError(HookError):
    """The request is well formed but this node's policy refuses it."""

    kind = "refused"


class CpuListError(HookError):
    """A kernel cpulist is malformed, or names CPUs that are not online."""

    kind = "invalid cpulist"


class CgroupError(HookError):
    """The container's cgroup cannot be found, is outside the cgroup root, or is unusable."""

    kind = "cgroup error"


class WriteError(HookError):
    """The kernel refused a cgroupfs write; earlier writes were rolled back."""

    kind = "write refused"


class RuntimeInputError(HookError):
    """A value the container runtime sent (NRI) is malformed or outside the bounds of bounds.py."""

    kind = "invalid runtime input"


class RecordError(HookError):
    """A record in the state directory is unreadable or invalid."""

    kind = "record error"


class CdiSpecError(HookError):
    """A CDI spec file (exclusive_source dra: where claims are trusted from) is not of CDI's shape."""

    kind = "invalid CDI spec"


class KubeletStateError(HookError):
    """kubelet's CPU manager checkpoint is unreadable or not of kubelet's shape."""

    kind = "invalid kubelet state"


class UnknownContainerError(HookError):
    """A container id (or prefix) given on the command line names no tracked container, or several."""

    kind = "unknown container"


class SystemdError(HookError):
    """systemctl failed (not installed, systemd not running, a unit refused): the message says which call."""

    kind = "systemd"


class DependencyError(HookError):
    """A library the command needs cannot be imported (protobuf for NRI mode)."""

    kind = "missing dependency"
