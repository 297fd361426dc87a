"""Does this container ask for mixed CPUs? A pure decision on its annotations."""

from __future__ import annotations

from operator import methodcaller

from .errors import PolicyError, RequestError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Mapping, NamedTuple, Optional, Sequence
else:
    from .compat import NamedTuple

CONTAINER_NAME = "io.kubernetes.container.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
POD_NAME = "io.kubernetes.pod.name"
POD_UID = "io.kubernetes.pod.uid"
ENABLE = "enable"


class Request(NamedTuple):
    """Who asks: the Kubernetes names CRI-O copies into every container's annotations."""

    namespace: str
    pod: str
    container: str
    pod_uid: str
    annotation: str


def may_ask(annotations: Mapping[str, str]) -> bool:
    """Cheap pre-check before the configuration is loaded: some key ends in /<container-name>."""
    name = annotations.get(CONTAINER_NAME)
    if not name:
        return False
    return any(map(methodcaller("endswith", "/" + name), annotations))  # no bytecode per key


def compute_request(annotations: Mapping[str, str], prefix: str,
                    allowed_namespaces: Sequence[str], where: str, config_where: str = "") -> Optional[Request]:
    """The request, or None when the container does not ask.

    The annotation's only valid value is "enable": the CPUs always come from the node's
    configuration, never from the pod. Namespaces are opt-in (``allowed_namespaces``, empty by
    default): the shared CPUs are outside the scheduler's accounting, so a pod that asks gets
    CPU time nobody counted. ``config_where`` (the configuration file) is named in the refusal.
    """
    name = annotations.get(CONTAINER_NAME)
    if not name:
        return None
    key = f"{prefix}/{name}"
    value = annotations.get(key)
    if value is None:
        return None
    if value != ENABLE:
        raise RequestError(f"annotation {key}: value {value[:64]!r} is not {ENABLE!r}", where)
    namespace = annotations.get(POD_NAMESPACE, "")
    if namespace not in allowed_namespaces and not any(  # listed as it is: matched without a glob
            glob == "*" or _fnmatchcase(namespace, glob) for glob in allowed_namespaces):
        raise PolicyError(format_refused_namespace(namespace, allowed_namespaces, config_where), where)
    return Request(namespace, annotations.get(POD_NAME, ""), name, annotations.get(POD_UID, ""), key)


def format_refused_namespace(namespace: str, allowed_namespaces: Sequence[str], config_where: str) -> str:
    """The refusal: which namespace, which setting in which file, and what it lists."""
    source = config_where or "the configuration"
    if source == "(defaults)":
        source = "the configuration (no file: defaults)"
    listed = f"lists only {', '.join(allowed_namespaces)}" if allowed_namespaces else "is empty (the default)"
    return (f"namespace {namespace!r} may not ask for mixed CPUs: setting 'allowed_namespaces' in {source} "
            f"{listed}; an admin must list it there")


def _fnmatchcase(name: str, pattern: str) -> bool:
    # fnmatch is imported only for a pattern with a wildcard ("*", "?", "[": a plain namespace
    # name matches only itself, as fnmatchcase would say): its import is a cost on every
    # container start.
    if "*" not in pattern and "?" not in pattern and "[" not in pattern:
        return name == pattern
    from fnmatch import fnmatchcase

    return fnmatchcase(name, pattern)
