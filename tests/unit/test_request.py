"""Does a container ask? The annotation, its only value, and allowed_namespaces."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import pytest

from mixed_cpus_hook.core.errors import PolicyError, RequestError
from mixed_cpus_hook.core.request import Request, compute_request, may_ask

PREFIX = "mixed-cpus.openshift.io"
KUBE = {"io.kubernetes.container.name": "app", "io.kubernetes.pod.namespace": "ran",
        "io.kubernetes.pod.name": "du-0", "io.kubernetes.pod.uid": "uid-1"}


ASK = {f"{PREFIX}/app": "enable"}
REQUEST = Request("ran", "du-0", "app", "uid-1", f"{PREFIX}/app")

DECISIONS = [
    pytest.param(dict(KUBE, **ASK), ("*",), REQUEST, id="asks"),
    pytest.param(dict(KUBE), ("*",), None, id="no-annotation"),
    pytest.param({f"{PREFIX}/app": "enable"}, ("*",), None, id="no-container-name-is-not-kubernetes"),
    pytest.param(dict(KUBE, **{f"{PREFIX}/sidecar": "enable"}), ("*",), None, id="another-container-asks"),
    pytest.param(dict(KUBE, **{"other.example/app": "enable"}), ("*",), None, id="another-prefix"),
    pytest.param(dict(KUBE, **{"cpu-shared.crio.io/app": "enable"}), ("*",), None, id="crio-prefix-is-not-ours"),
    pytest.param(dict(KUBE, **ASK), ("ran",), REQUEST, id="namespace-listed"),
    pytest.param(dict(KUBE, **ASK), ("kube-*", "r?n"), REQUEST, id="namespace-glob"),
    pytest.param({"io.kubernetes.container.name": "app", **ASK}, ("*",), Request("", "", "app", "", f"{PREFIX}/app"),
                 id="missing-pod-names-are-empty"),
]


@pytest.mark.parametrize("annotations,allowed,expected", DECISIONS)
def test_compute_request(annotations: Dict[str, str], allowed: Tuple[str, ...], expected: Optional[Request]) -> None:
    assert compute_request(annotations, PREFIX, allowed, "container c1") == expected


REFUSED = [
    pytest.param(dict(KUBE, **{f"{PREFIX}/app": "yes"}), ("*",), RequestError,
                 f"annotation {PREFIX}/app: value 'yes' is not 'enable'", id="value-yes"),
    pytest.param(dict(KUBE, **{f"{PREFIX}/app": "Enable"}), ("*",), RequestError, "value 'Enable' is not 'enable'",
                 id="value-capitalised"),
    pytest.param(dict(KUBE, **{f"{PREFIX}/app": ""}), ("*",), RequestError, "value '' is not 'enable'",
                 id="value-empty"),
    pytest.param(dict(KUBE, **{f"{PREFIX}/app": "0-3"}), ("*",), RequestError, "value '0-3' is not 'enable'",
                 id="value-names-cpus"),
    pytest.param(dict(KUBE, **{f"{PREFIX}/app": "enable "}), ("*",), RequestError, "value 'enable ' is not 'enable'",
                 id="value-with-space"),
    pytest.param(dict(KUBE, **ASK), ("kube-*",), PolicyError,
                 "namespace 'ran' may not ask for mixed CPUs: setting 'allowed_namespaces' in /etc/m/config.yaml "
                 "lists only kube-*; an admin must list it there", id="namespace-refused"),
    pytest.param(dict(KUBE, **ASK), (), PolicyError,
                 "namespace 'ran' may not ask for mixed CPUs: setting 'allowed_namespaces' in /etc/m/config.yaml "
                 "is empty (the default); an admin must list it there", id="no-namespace-allowed"),
    pytest.param(dict(KUBE, **ASK), ("RAN",), PolicyError, "namespace 'ran' may not ask", id="globs-case-sensitive"),
    pytest.param({"io.kubernetes.container.name": "app", **ASK}, ("ran",), PolicyError, "namespace '' may not ask",
                 id="missing-namespace-refused"),
]


@pytest.mark.parametrize("annotations,allowed,error,message", REFUSED)
def test_compute_request_refused(annotations: Dict[str, str], allowed: Tuple[str, ...], error: type,
                                 message: str) -> None:
    with pytest.raises(error) as info:
        compute_request(annotations, PREFIX, allowed, "container c1", config_where="/etc/m/config.yaml")
    assert message in info.value.message
    assert info.value.where == "container c1"


@pytest.mark.parametrize("config_where,named", [
    pytest.param("", "setting 'allowed_namespaces' in the configuration is empty", id="caller-names-no-file"),
    pytest.param("(defaults)", "in the configuration (no file: defaults) is empty", id="no-config-file"),
])
def test_refusal_names_the_configuration(config_where: str, named: str) -> None:
    with pytest.raises(PolicyError) as info:
        compute_request(dict(KUBE, **ASK), PREFIX, (), "c", config_where=config_where)
    assert named in info.value.message


def test_default_config_lets_no_namespace_ask() -> None:
    from mixed_cpus_hook.node.config import Config

    with pytest.raises(PolicyError, match="is empty \\(the default\\)"):
        compute_request(dict(KUBE, **ASK), PREFIX, Config().allowed_namespaces, "c", config_where="(defaults)")


def test_long_value_is_cut_in_the_message() -> None:
    with pytest.raises(RequestError) as info:
        compute_request(dict(KUBE, **{f"{PREFIX}/app": "x" * 10000}), PREFIX, ("*",), "c")
    assert len(info.value.message) < 200


def test_custom_prefix() -> None:
    annotations = dict(KUBE, **{"cpu.example.com/app": "enable"})
    assert compute_request(annotations, "cpu.example.com", ("*",), "c") == Request(
        "ran", "du-0", "app", "uid-1", "cpu.example.com/app")
    assert compute_request(annotations, PREFIX, ("*",), "c") is None


MAY_ASK = [
    pytest.param(dict(KUBE, **ASK), True, id="asks"),
    pytest.param(dict(KUBE, **{"any.prefix/app": "whatever"}), True, id="any-prefix-is-a-maybe"),
    pytest.param(dict(KUBE), False, id="nothing"),
    pytest.param(dict(KUBE, **{f"{PREFIX}/other": "enable"}), False, id="other-container"),
    pytest.param(ASK, False, id="no-container-name"),
    pytest.param({"io.kubernetes.container.name": "", f"{PREFIX}/": "enable"}, False, id="empty-container-name"),
]


@pytest.mark.parametrize("annotations,expected", MAY_ASK)
def test_may_ask(annotations: Dict[str, str], expected: bool) -> None:
    assert may_ask(annotations) is expected


@pytest.mark.parametrize("annotations", [pytest.param(p.values[0], id=p.id) for p in DECISIONS + REFUSED])
def test_may_ask_never_misses_a_request(annotations: Dict[str, str]) -> None:
    """The pre-check may say yes wrongly, never no: every real request (or refusal) passes it."""
    try:
        asks = compute_request(annotations, PREFIX, ("*",), "c") is not None
    except RequestError:
        asks = True
    if asks:
        assert may_ask(annotations)


@pytest.mark.parametrize("name, pattern", [
    ("ran", "ran"), ("ran", "ran2"), ("ran-du", "ran-*"), ("ran", "r?n"), ("ran", "[rs]an"), ("a.b", "a.b"),
    ("a\\b", "a\\b"), ("", ""), ("ran", ""), ("RAN", "ran"), ("ran", "ran*"), ("x]", "x]"),
], ids=lambda v: repr(v))
def test_namespace_patterns_match_as_fnmatchcase(name: str, pattern: str) -> None:
    """Plain names are compared without importing fnmatch (a cost on every start): same answers."""
    import fnmatch

    from mixed_cpus_hook.core import request

    assert vars(request)["_fnmatchcase"](name, pattern) == fnmatch.fnmatchcase(name, pattern)
