"""Messages that quote input: one helper (log.quote) cuts and escapes; every log line is one line."""

from __future__ import annotations

from typing import Any, List

import pytest

from mixed_cpus_hook.node.log import format_line, quote

QUOTE = [
    pytest.param("app", {}, "'app'", id="short"),
    pytest.param("app", {"bare": True}, "app", id="short-bare"),
    pytest.param("a b ", {"bare": True}, "'a b '", id="bare-keeps-quotes-around-spaces"),
    pytest.param("\x1b[31m", {"bare": True}, "'\\x1b[31m'", id="bare-escapes"),
    pytest.param("\0", {}, "'\\x00'", id="nul"),
    pytest.param("x" * 200, {}, "'" + "x" * 120 + "'... (200 characters)", id="cut"),
    pytest.param("x" * 200, {"bare": True}, "'" + "x" * 120 + "'... (200 characters)", id="cut-bare"),
    pytest.param(b"\xff" * 300, {}, "b'" + "\\xff" * 120 + "'... (300 bytes)", id="bytes"),
    pytest.param(ValueError("v" * 10000), {}, "ValueError('" + "v" * 467, id="exception"),
    pytest.param("\udc80", {}, "'\\udc80'", id="lone-surrogate"),
]


@pytest.mark.parametrize("value,kw,expected", QUOTE)
def test_quote(value: Any, kw: Any, expected: str) -> None:
    got = quote(value, **kw)
    assert got.startswith(expected), got[:200]
    assert len(got) <= 4 * 120 + 40


@pytest.mark.parametrize("size", [10, 1 << 20, 4 << 20])
def test_quote_cost_follows_the_limit_not_the_input(size: int) -> None:
    assert len(quote("\x01" * size)) < 600


LINES = [
    pytest.param("a\nb", "a b", id="newline-joined"),
    pytest.param("esc \x1b[2J bell \x07 nul \0 del \x7f csi \x9b", "esc \\x1b[2J bell \\x07 nul \\x00 del \\x7f csi \\x9b",
                 id="control-characters-escaped"),
    pytest.param("tab\there\r", "tab\\x09here\\x0d", id="tab-and-cr"),
    pytest.param("bad \udc80 name", "bad \\udc80 name", id="lone-surrogate"),
    pytest.param("plain é ✓", "plain é ✓", id="printable-unicode-kept"),
]


@pytest.mark.parametrize("message,line", LINES)
def test_format_line(message: str, line: str) -> None:
    assert format_line(message) == line


def test_format_line_cuts_a_huge_line() -> None:
    line = format_line("y" * (1 << 20))
    assert line.endswith("... (cut: 1048576 characters)") and len(line) < 8300


class _CountingStream:
    def __init__(self) -> None:
        self.writes: List[str] = []

    def write(self, text: str) -> None:
        self.writes.append(text)

    def flush(self) -> None:
        pass


def test_released_lines_reach_the_stream_in_few_writes_and_in_order() -> None:
    """What a request logged is written once its answer is sent: one write for its lines (the
    sink still gets one call per line), a flood in writes of bounded size."""
    from mixed_cpus_hook.node import log

    stream, sunk = _CountingStream(), []
    rep = log.Reporter(stream=stream, sink=lambda prio, line: sunk.append(line), verbose=True)  # type: ignore[arg-type]
    rep.hold()
    rep.info("one")
    rep.warning("two")
    rep.emit("info", "three", to_stream=False)  # the sink's only
    assert stream.writes == [] and sunk == []
    rep.release()
    assert stream.writes == ["mixed-cpus-hook: one\nmixed-cpus-hook: warning: two\n"]
    assert sunk == ["one", "two", "three"]
    stream.writes.clear()
    rep.hold()
    for n in range(3000):
        rep.error(f"{n:05d}" + "x" * 100)
    rep.release()
    text = "".join(stream.writes)
    assert [line[len("mixed-cpus-hook: error: "):][:5] for line in text.splitlines()] == [f"{n:05d}" for n in range(3000)]
    assert 1 < len(stream.writes) <= 3000 * 125 // log.RELEASE_WRITE + 1
    assert max(len(w) for w in stream.writes) < log.RELEASE_WRITE + 200


@pytest.mark.parametrize("held", [True, False], ids=["held-made-at-release", "not-held-made-now"])
def test_a_made_line_is_made_when_it_is_logged(held: bool) -> None:
    """emit_made: the line's text is made when it is logged (after the answer while lines are held),
    in order with the others, and is the same line emit would log."""
    from mixed_cpus_hook.node import log

    stream, sunk, made = _CountingStream(), [], []
    rep = log.Reporter(stream=stream, sink=lambda prio, line: sunk.append(line), verbose=True)  # type: ignore[arg-type]

    def make(a: str, b: int) -> str:
        made.append((a, b))
        return f"{a} made {b}\nsecond line"

    if held:
        rep.hold()
    rep.info("before")
    rep.emit_made("info", make, ("x", 2), to_stream=False)
    rep.warning("after")
    assert made == ([] if held else [("x", 2)])
    if held:
        rep.release()
    assert made == [("x", 2)]
    assert sunk == ["before", "x made 2 second line", "after"]
    assert "".join(stream.writes) == "mixed-cpus-hook: before\nmixed-cpus-hook: warning: after\n"
