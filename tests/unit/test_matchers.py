"""The hand matchers on the hook path agree with the patterns they stand for.

The hook's container-start path checks names, cpulists, timestamps, pod cgroup names and
runc's systemd cgroupsPath without ``re`` (compiling a pattern costs each process ~0.1 ms;
see core.validate). The patterns stay the words of the schemas; here each matcher runs
against its pattern over a table of readable cases and a seeded random corpus drawn from an
alphabet that holds every character class the pattern names, and some it refuses.
"""

from __future__ import annotations

import random
import re
from typing import Callable, List, Optional, Tuple

import pytest

from mixed_cpus_hook.core import cgroup, validate
from mixed_cpus_hook.store import records

ALPHABETS = {
    "id": "aZ09_+.-:@/ \n\u00e9\u0661",
    "cpulist": "0123-,\n \u0663x",
    "timestamp": "0129-T:Z \n\u0661",
    "pod": "podabcdefABCDEF0123456789_-.slicekubeburstable \n/\u0661",
    "systemd": "kubepods-burstable.slice:cri-o:crio-0a1b.scope@\\+_ \n/\u0661",
}


def systemd_groups(value: str) -> Optional[Tuple[str, ...]]:
    m = re.match(cgroup.SYSTEMD_PATH, value)
    return m.groups() if m else None


# name -> (pattern check, hand matcher, alphabet)
MATCHERS: List[Tuple[str, Callable[[str], object], Callable[[str], object], str]] = [
    ("ID_PATTERN", lambda v: bool(re.match(validate.ID_PATTERN, v)) and v not in (".", ".."),
     lambda v: validate.is_plain_name(v, validate.ID_PATTERN), ALPHABETS["id"]),
    ("NAME_PATTERN", lambda v: bool(re.match(validate.NAME_PATTERN, v)) and v not in (".", ".."),
     lambda v: validate.is_plain_name(v, validate.NAME_PATTERN), ALPHABETS["id"]),
    ("CPULIST_PATTERN", lambda v: bool(re.match(records.CPULIST_PATTERN, v)), validate.is_cpulist_text,
     ALPHABETS["cpulist"]),
    ("TIMESTAMP_PATTERN", lambda v: bool(re.match(records.TIMESTAMP_PATTERN, v)), validate.is_timestamp_text,
     ALPHABETS["timestamp"]),
    ("POD_DIR", lambda v: bool(re.match(cgroup.POD_DIR, v)), cgroup.is_pod_dir_name, ALPHABETS["pod"]),
    ("SYSTEMD_PATH", systemd_groups, cgroup.split_systemd_path, ALPHABETS["systemd"]),
]

TABLE = [
    # (matcher, value, expected)
    ("ID_PATTERN", "a1" * 32, True),
    ("ID_PATTERN", "x" * 1024, True),
    ("ID_PATTERN", "x" * 1025, False),
    ("ID_PATTERN", "", False),
    ("ID_PATTERN", ".", False),
    ("ID_PATTERN", "..", False),
    ("ID_PATTERN", "...", True),
    ("ID_PATTERN", "a/b", False),
    ("ID_PATTERN", "abc\n", False),
    ("ID_PATTERN", "caf\u00e9", False),
    ("ID_PATTERN", "a:b", False),
    ("NAME_PATTERN", "kubepods-pod0f1e_aaaa.slice", True),
    ("NAME_PATTERN", "a:b@c", True),
    ("NAME_PATTERN", "x" * 256, False),
    ("NAME_PATTERN", "..", False),
    ("CPULIST_PATTERN", "0", True),
    ("CPULIST_PATTERN", "0-3,8,10-11", True),
    ("CPULIST_PATTERN", "", False),
    ("CPULIST_PATTERN", "0-", False),
    ("CPULIST_PATTERN", "-1", False),
    ("CPULIST_PATTERN", "1-2-3", False),
    ("CPULIST_PATTERN", "1,,2", False),
    ("CPULIST_PATTERN", "1,", False),
    ("CPULIST_PATTERN", "0-3\n", False),
    ("CPULIST_PATTERN", "\u0663", False),
    ("TIMESTAMP_PATTERN", "2026-12-03T16:31:03Z", True),
    ("TIMESTAMP_PATTERN", "2026-12-03T16:31:03Z\n", False),
    ("TIMESTAMP_PATTERN", "2026-12-03 16:31:03Z", False),
    ("TIMESTAMP_PATTERN", "2026-12-03T16:31:0\u0661Z", False),
    ("TIMESTAMP_PATTERN", "99999-12-03T16:31:03Z", False),
    ("POD_DIR", "pod0f1e2d3c-aaaa-bbbb-cccc-123456789abc", True),
    ("POD_DIR", "kubepods-burstable-pod0f1e2d3c_aaaa_bbbb.slice", True),
    ("POD_DIR", "kubepods-pod0f1e_aaaa.slice", True),
    ("POD_DIR", "pod0f1e_aaaa.slice", True),
    ("POD_DIR", "pod", False),
    ("POD_DIR", "pod.slice", False),
    ("POD_DIR", "kubepods--pod0f1e.slice", False),
    ("POD_DIR", "kubepods-pod0f1e-aaaa.slice", False),
    ("POD_DIR", "podxyz", False),
    ("POD_DIR", "crio-0a1b.scope", False),
    ("POD_DIR", "pod0f1e\n", False),
    ("SYSTEMD_PATH", "kubepods-burstable-pod1.slice:cri-o:0a1b", ("kubepods-burstable-pod1.slice", "cri-o", "0a1b")),
    ("SYSTEMD_PATH", ":cri-o:0a1b", ("", "cri-o", "0a1b")),
    ("SYSTEMD_PATH", "a:b.slice:cri-o:x", ("a:b.slice", "cri-o", "x")),
    ("SYSTEMD_PATH", "system.slice:docker:x@y+z", ("system.slice", "docker", "x@y+z")),
    ("SYSTEMD_PATH", "kubepods.slice::0a1b", None),
    ("SYSTEMD_PATH", "kubepods.slice:cri-o:", None),
    ("SYSTEMD_PATH", "kubepods:cri-o:0a1b", None),
    ("SYSTEMD_PATH", "kubepods.slice:cri-o:a/b", None),
    ("SYSTEMD_PATH", "/kubepods/pod1/0a1b", None),
]


@pytest.mark.parametrize("name, value, expected", TABLE,
                         ids=[f"{n}-{v[:24]!r}" for n, v, _ in TABLE])
def test_table(name: str, value: str, expected: object) -> None:
    oracle, hand = next((o, h) for n, o, h, _ in MATCHERS if n == name)
    assert oracle(value) == expected, "the table disagrees with the pattern itself"
    assert hand(value) == expected


@pytest.mark.parametrize("name, oracle, hand, alphabet", MATCHERS, ids=[m[0] for m in MATCHERS])
def test_random_corpus(name: str, oracle: Callable[[str], object], hand: Callable[[str], object],
                       alphabet: str) -> None:
    rng = random.Random(name)
    seen_true = 0
    values = [v for n, v, _ in TABLE if n == name]
    for _ in range(20000):
        base = rng.choice(values)
        if rng.random() < 0.6:  # a known value, mutated or not: the accepted forms and their near misses
            chars = list(base)
            for _ in range(rng.randint(0, 2)):
                op = rng.randint(0, 2)
                pos = rng.randint(0, len(chars))
                if op == 0:
                    chars.insert(pos, rng.choice(alphabet))
                elif chars and op == 1:
                    del chars[min(pos, len(chars) - 1)]
                elif chars:
                    chars[min(pos, len(chars) - 1)] = rng.choice(alphabet)
            value = "".join(chars)
        else:
            value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        expected = oracle(value)
        assert hand(value) == expected, f"{name}: {value!r}"
        seen_true += bool(expected)
    assert seen_true > 100, f"{name}: the corpus hardly reaches the accepted forms ({seen_true})"
