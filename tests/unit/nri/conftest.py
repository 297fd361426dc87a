"""The hostile-runtime suite's report: the worst canary answer time, at the end of the run."""

from __future__ import annotations

from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from .hostile import ANSWER_TIMES, CANARY_LIMIT, DURATIONS

    if not ANSWER_TIMES:
        return
    worst = max(ANSWER_TIMES, key=ANSWER_TIMES.__getitem__)
    terminalreporter.write_sep("-", "hostile runtime: canary answer times")
    terminalreporter.write_line(f"{len(ANSWER_TIMES)} cases; worst {ANSWER_TIMES[worst] * 1000:.1f} ms after {worst} "
                                f"(limit {CANARY_LIMIT * 1000:.0f} ms); median "
                                f"{sorted(ANSWER_TIMES.values())[len(ANSWER_TIMES) // 2] * 1000:.1f} ms")
    slowest = sorted(DURATIONS.items(), key=lambda kv: -kv[1])[:5]
    terminalreporter.write_line("slowest answers within a case: " + ", ".join(
        f"{name.split('[', 1)[-1].rstrip(']')} {took * 1000:.0f} ms" for name, took in slowest))
