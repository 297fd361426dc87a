#!/usr/bin/env python3
"""Run ``mixed-cpus-hook nri`` with its request path cut into timed sections: a measuring device.

``benchmarks/nri_reference.py --sections`` runs the plugin through this (the reference tool's
NRI_REFERENCE_WRAP) to say where an answer's time goes *in the tool*, where five containerd
instances run between two answers and a section costs two to four times what it costs in a warm
loop (``nri_request_cost.py``). Each section is a function of the request path, wrapped with a
wall-clock timer (``time.perf_counter_ns``; a wrapper adds about a microsecond to its section):
the framework (reading a frame, the whole call with its decode and encode), each handler, and
inside CreateContainer, UpdateContainer and StopContainer the parts of the product's duties
(parsing and bounding the request, the node's facts, the cgroup paths, the state lock, the record
lookups and saves, the pod quota's read and write, the decision, the reply). With
``MCH_SECTIONS_GO_WORK=1`` the handlers are first replaced by the Go plugin's work
(``nri_go_work.py``), for the same framework sections beside it.

At exit the plugin writes ``{label: [nanoseconds, ...]}`` as JSON to ``$MCH_SECTIONS_OUT``: a
section inside a handler as "<event> / <section>", one sum per event (and its calls per event
under "... (calls)").

    MCH_SECTIONS_OUT=FILE PYTHON nri_sections.py MIXED-CPUS-HOOK-ARGV...
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

# (module, class or "" for the module itself, attribute, label): the sections, outermost first.
SECTIONS: Tuple[Tuple[str, str, str, str], ...] = (
    ("frontends.nri.plugin", "Plugin", "_read", "frame read (recv, demux)"),
    ("frontends.nri.handlers", "Handlers", "create_container", "CreateContainer handler"),
    ("frontends.nri.handlers", "Handlers", "update_container", "UpdateContainer handler"),
    ("frontends.nri.handlers", "Handlers", "stop_container", "StopContainer handler"),
    ("frontends.nri.handlers", "", "count_annotations", "annotations counted"),
    ("frontends.nri.handlers", "", "compute_facts", "request parsed and bounded"),
    ("frontends.nri.handlers", "", "parse_cpu", "cpu resources parsed"),
    ("frontends.nri.handlers", "", "format_adjustment", "reply's adjustment"),
    ("frontends.nri.handlers", "Handlers", "tracked", "tracked? (one stat)"),
    ("usecases.nri", "NriEngine", "facts", "node facts (online CPUs, checkpoint)"),
    ("usecases.nri", "", "read_request", "the pod's request (annotations)"),
    ("usecases.nri", "", "compute_nri_dirs", "cgroup paths checked"),
    ("usecases.nri", "", "load_container", "container record looked up"),
    ("usecases.nri", "", "load_pod", "pod record looked up"),
    ("usecases.nri", "", "require_free", "no other record holds the CPUs"),
    ("usecases.nri", "", "compute_desired", "decision: the container"),
    ("usecases.nri", "", "decide_pod_share", "decision: the pod's share"),
    ("usecases.nri", "", "build_record", "decision: the record"),
    ("usecases.nri", "", "compute_raise", "decision: the pod quota's write"),
    ("usecases.nri", "", "exists", "container cgroup there? (stat)"),
    ("usecases.nri", "", "save_changed", "records saved"),
    ("usecases.nri", "", "execute", "pod quota written and read back"),
    ("usecases.nri", "", "release_locked", "release (records, pod quota back)"),
    ("node.cgroupfs", "", "read_quota", "a quota read"),
    ("store.records", "HeldStateLock", "__enter__", "state lock taken"),
    ("store.records", "HeldStateLock", "__exit__", "state lock released"),
)


HANDLERS = {"create_container": "CreateContainer", "update_container": "UpdateContainer",
            "stop_container": "StopContainer"}


def install(out: Dict[str, List[int]], go_work: bool = False) -> None:
    """Wrap every section with a timer appending to ``out``: a section run inside a handler is
    summed per event, under "<event> / <section>" (one sum per event, so its median is what the
    section costs one such event); the handlers, frame reads and calls under their own labels."""
    if go_work:
        import nri_go_work  # beside this script

        nri_go_work.install()
    clock = time.perf_counter_ns
    current: List[Dict[str, List[int]]] = []  # the event being handled: section -> [ns, calls]

    def timed(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                took = clock() - start
                if current:
                    spent = current[-1].setdefault(label, [0, 0])
                    spent[0] += took
                    spent[1] += 1
                else:
                    out.setdefault(label, []).append(took)
        return wrapper

    def handler(fn: Callable[..., Any], event: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            current.append({})
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                took = clock() - start
                spent = current.pop()
                out.setdefault(f"{event} handler", []).append(took)
                for label, (ns, calls) in spent.items():
                    out.setdefault(f"{event} / {label}", []).append(ns)
                    out.setdefault(f"{event} / {label} (calls)", []).append(calls)
        return wrapper

    for module, owner, attr, label in SECTIONS:
        mod = importlib.import_module(f"mixed_cpus_hook.{module}")
        target = getattr(mod, owner) if owner else mod
        if hasattr(target, attr):
            fn = getattr(target, attr)
            setattr(target, attr, handler(fn, HANDLERS[attr]) if attr in HANDLERS else timed(fn, label))
    plugin = importlib.import_module("mixed_cpus_hook.frontends.nri.plugin").Plugin
    wrap_call = plugin._wrap

    def timed_wrap(self: Any, method: str, decode: Callable[[bytes], Any], handler: Callable[..., Any]) -> Any:
        return timed(wrap_call(self, method, decode, handler), f"{method} call (decode, handler, encode)")

    plugin._wrap = timed_wrap


def main(argv: List[str]) -> int:
    from nri_memory_records import run_plugin  # beside this script

    path = os.environ.get("MCH_SECTIONS_OUT", "")
    if not path:
        print("nri_sections: set MCH_SECTIONS_OUT to the file the sections go to", file=sys.stderr)
        return 2
    out: Dict[str, List[int]] = {}

    def dump() -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f)

    atexit.register(dump)
    return run_plugin(argv, lambda: install(out, os.environ.get("MCH_SECTIONS_GO_WORK") == "1"),
                      __doc__.split("\n\n")[3].strip())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
