"""Kernel cpulists: parse, format, the shared-CPU file format and subset checks."""

from __future__ import annotations

import pytest

from mixed_cpus_hook.core.cpuset import MAX_CPU, format_cpulist, parse_cpulist, parse_cpulist_file, require_subset
from mixed_cpus_hook.core.errors import CpuListError

PARSE = [
    pytest.param("", set(), id="empty"),
    pytest.param("  \n", set(), id="blank"),
    pytest.param("0", {0}, id="single"),
    pytest.param("0-3", {0, 1, 2, 3}, id="range"),
    pytest.param("0-3\n", {0, 1, 2, 3}, id="kernel-trailing-newline"),
    pytest.param("2,0", {0, 2}, id="unsorted"),
    pytest.param("0-1,8,10-11", {0, 1, 8, 10, 11}, id="mixed"),
    pytest.param(" 1 , 3 ", {1, 3}, id="spaces-around-items"),
    pytest.param("1-1", {1}, id="one-cpu-range"),
    pytest.param("0-2,1-3", {0, 1, 2, 3}, id="overlapping-ranges"),
    pytest.param("007", {7}, id="leading-zeros"),
    pytest.param(f"{MAX_CPU}", {MAX_CPU}, id="max-cpu"),
    pytest.param("5,0-3,2-8,4", set(range(9)), id="nested-and-contained-ranges"),
    # What a hostile runtime sends: the cost follows the output (8192 CPUs at most), not the ranges.
    pytest.param(",".join([f"0-{MAX_CPU}"] * 9000), set(range(MAX_CPU + 1)), id="widest-range-9000-times"),
    pytest.param(",".join(str(c) for c in range(MAX_CPU, -1, -1)), set(range(MAX_CPU + 1)),
                 id="every-cpu-one-by-one-backwards"),
]


@pytest.mark.parametrize("text,cpus", PARSE)
def test_parse_cpulist(text: str, cpus: set) -> None:
    assert parse_cpulist(text) == frozenset(cpus)


MALFORMED = [
    pytest.param("a", "bad item 'a'", id="letter"),
    pytest.param("3-1", "range '3-1' is reversed", id="reversed-range"),
    pytest.param("1,,2", "bad item ''", id="empty-item"),
    pytest.param("1,", "bad item ''", id="trailing-comma"),
    pytest.param("-1", "bad item '-1'", id="negative"),
    pytest.param("1-", "bad item '1-'", id="open-range"),
    pytest.param("1-2-3", "bad item '1-2-3'", id="double-range"),
    pytest.param("0x1", "bad item '0x1'", id="hex"),
    pytest.param("1.5", "bad item '1.5'", id="decimal"),
    pytest.param("\u0663", "bad item", id="non-ascii-digit"),
    pytest.param("1 2", "bad item '1 2'", id="space-separated"),
    pytest.param("0-999999999", "bad item '0-999999999'", id="huge-number"),
    pytest.param(f"0-{MAX_CPU + 1}", f"names CPU {MAX_CPU + 1}, above the limit {MAX_CPU}", id="above-max-cpu"),
    pytest.param("0;1", "bad item '0;1'", id="semicolon"),
    pytest.param("0," * 40000, "cpulist of 80000 characters is longer than the 65536 allowed", id="over-64KiB"),
    pytest.param("a" * 60000, "'aaaa", id="long-garbage-quoted-and-cut"),
    pytest.param("2,\x1b[2J", "bad item '\\x1b[2J'", id="escape-quoted"),
]


@pytest.mark.parametrize("text,message", MALFORMED)
def test_parse_cpulist_malformed(text: str, message: str) -> None:
    with pytest.raises(CpuListError) as info:
        parse_cpulist(text, "somewhere")
    assert message in info.value.message
    assert info.value.where == "somewhere"
    assert str(info.value).startswith("somewhere: ")
    assert "\n" not in str(info.value)
    assert len(str(info.value)) < 600 and str(info.value).isprintable()


FORMAT = [
    pytest.param(set(), "", id="empty"),
    pytest.param({5}, "5", id="single"),
    pytest.param({0, 1}, "0-1", id="pair-is-a-range"),
    pytest.param({3, 2, 1, 0}, "0-3", id="run"),
    pytest.param({0, 2, 4}, "0,2,4", id="gaps"),
    pytest.param({0, 1, 8, 10, 11}, "0-1,8,10-11", id="mixed"),
    pytest.param([1, 1, 2], "1-2", id="duplicates"),
]


@pytest.mark.parametrize("cpus,text", FORMAT)
def test_format_cpulist(cpus, text: str) -> None:
    assert format_cpulist(cpus) == text


@pytest.mark.parametrize("text", ["0", "0-3", "0-1,8,10-11", "1,3,5-7,9", f"0,{MAX_CPU}"])
def test_format_parse_roundtrip(text: str) -> None:
    assert format_cpulist(parse_cpulist(text)) == text


FILES = [
    pytest.param("0-1\n", {0, 1}, id="one-line"),
    pytest.param("# shared CPUs\n0-1\n", {0, 1}, id="comment-line"),
    pytest.param("0-1 # reserved\n", {0, 1}, id="trailing-comment"),
    pytest.param("2\n3\n", {2, 3}, id="lines-are-joined"),
    pytest.param("\n\n4\n\n", {4}, id="blank-lines"),
    pytest.param("# nothing\n", set(), id="only-comments-is-empty"),
]


@pytest.mark.parametrize("text,cpus", FILES)
def test_parse_cpulist_file(text: str, cpus: set) -> None:
    assert parse_cpulist_file(text, "/etc/x") == frozenset(cpus)


def test_parse_cpulist_file_names_the_file() -> None:
    with pytest.raises(CpuListError) as info:
        parse_cpulist_file("# x\n0-1\nfoo\n", "/etc/mixed-cpus-hook/shared-cpus")
    assert info.value.where == "/etc/mixed-cpus-hook/shared-cpus"
    assert "bad item 'foo'" in info.value.message


SUBSETS = [
    pytest.param({0, 1}, {0, 1, 2, 3}, None, id="subset"),
    pytest.param(set(), {0}, None, id="empty-is-a-subset"),
    pytest.param({0, 4, 5}, {0, 1, 2, 3}, "shared CPUs 4-5 not in 0-3", id="two-outside"),
    pytest.param({1}, set(), "shared CPUs 1 not in the empty set", id="nothing-allowed"),
]


@pytest.mark.parametrize("cpus,allowed,message", SUBSETS)
def test_require_subset(cpus: set, allowed: set, message) -> None:
    if message is None:
        require_subset(frozenset(cpus), frozenset(allowed), "shared CPUs", "here")
        return
    with pytest.raises(CpuListError) as info:
        require_subset(frozenset(cpus), frozenset(allowed), "shared CPUs", "here")
    assert info.value.message == message
    assert info.value.where == "here"
