"""Kernel cpulists ("0-3,8,10-11") as frozensets of CPU numbers. Pure functions only."""

from __future__ import annotations


from .bounds import MAX_CPU, MAX_CPULIST_TEXT
from .errors import CpuListError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import AbstractSet, Dict, FrozenSet, Iterable, List, Tuple

# Memos of the two conversions for small, common values: a resident process (the NRI plugin) parses
# and formats the same few cpulists on every event of every container. Pure and bounded: only
# texts of at most MEMO_TEXT characters and sets of at most MEMO_CPUS CPUs, at most MEMO_ENTRIES of
# each (then forgotten at once), so hostile input cannot make them large.
MEMO_TEXT = 64
MEMO_CPUS = 256
MEMO_ENTRIES = 512
_PARSED: Dict[str, FrozenSet[int]] = {}
_FORMATTED: Dict[FrozenSet[int], str] = {}


def parse_cpulist(text: str, where: str = "cpulist") -> FrozenSet[int]:
    """Parse a kernel cpulist; an empty or blank string is the empty set.

    Accepts what the kernel prints and accepts: ranges, single CPUs, surrounding
    whitespace and a trailing newline. Anything else is a CpuListError naming ``where``.

    The cost is bounded whatever the text: longer than bounds.MAX_CPULIST_TEXT is refused
    before it is split, and the ranges are merged before any is expanded, so "0-8191" written
    ten thousand times costs the same as once (at most MAX_CPU + 1 CPUs come out).
    """
    known = _PARSED.get(text)
    if known is not None:
        return known
    cpus = _parse(text, where)
    if len(text) <= MEMO_TEXT:
        if len(_PARSED) >= MEMO_ENTRIES:
            _PARSED.clear()
        _PARSED[text] = cpus
    return cpus


def _parse(text: str, where: str) -> FrozenSet[int]:
    if len(text) > MAX_CPULIST_TEXT:
        raise CpuListError(f"cpulist of {len(text)} characters is longer than the {MAX_CPULIST_TEXT} allowed", where)
    s = text.strip()
    if not s:
        return frozenset()
    ranges: List[Tuple[int, int]] = []
    for part in s.split(","):
        item = part.strip()
        lo_s, sep, hi_s = item.partition("-")
        if not _is_number(lo_s) or (sep and not _is_number(hi_s)):
            raise CpuListError(f"{_quote(s)} is not a cpulist (bad item {_quote(item)})", where)
        lo = int(lo_s)
        hi = int(hi_s) if sep else lo
        if hi < lo:
            raise CpuListError(f"{_quote(s)} is not a cpulist (range {_quote(item)} is reversed)", where)
        if hi > MAX_CPU:
            raise CpuListError(f"{_quote(s)} names CPU {hi}, above the limit {MAX_CPU}", where)
        ranges.append((lo, hi))
    cpus: List[int] = []
    top = -1  # the highest CPU taken so far: ranges sorted by start only extend past it
    for lo, hi in sorted(ranges):
        if hi > top:
            cpus.extend(range(max(lo, top + 1), hi + 1))
            top = hi
    return frozenset(cpus)


def _quote(text: str) -> str:
    from .bounds import quote

    return quote(text)


def _is_number(s: str) -> bool:
    return s.isdigit() and s.isascii() and len(s) <= 5


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPUs the way the kernel prints them: sorted, every run of two or more as a range."""
    if type(cpus) is frozenset:
        known = _FORMATTED.get(cpus)
        if known is not None:
            return known
        text = _format(cpus)
        if len(cpus) <= MEMO_CPUS:
            if len(_FORMATTED) >= MEMO_ENTRIES:
                _FORMATTED.clear()
            _FORMATTED[cpus] = text
        return text
    return _format(cpus)


def _format(cpus: Iterable[int]) -> str:
    ordered = sorted(set(cpus))
    parts = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j == i:
            parts.append(str(ordered[i]))
        else:
            parts.append(f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def parse_cpulist_file(text: str, where: str) -> FrozenSet[int]:
    """Parse a shared-CPU file: one cpulist, ``#`` comments and blank lines allowed.

    Several non-comment lines are joined as one list, so "2\\n3" means "2,3".
    """
    items = []
    for line in text.splitlines():
        body = line.split("#", 1)[0].strip()
        if body:
            items.append(body)
    return parse_cpulist(",".join(items), where)


def require_subset(cpus: AbstractSet[int], allowed: AbstractSet[int], what: str, where: str) -> None:
    """Raise CpuListError when ``cpus`` names a CPU outside ``allowed`` (e.g. the online set)."""
    extra = set(cpus) - set(allowed)
    if extra:
        from .bounds import quote

        raise CpuListError(f"{what} {quote(format_cpulist(extra), bare=True)} not in "
                           f"{quote(format_cpulist(allowed), bare=True) or 'the empty set'}", where)
