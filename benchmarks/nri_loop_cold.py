#!/usr/bin/env python3
"""The plugin's own loop from memory-cold caches, against a lean straight-line Python server.

The reference tool's floor device (``nri_reference.py --floor``: no container asks) puts this
plugin's loop at about 0.9x the Go plugin's whole answer: framing, decoding, dispatch, the answer
and the poll loop, run from caches that five containerd instances emptied. This measures that part
alone, without containerd: ``mixed-cpus-hook nri`` (each ``--hook``: a checkout's ``hook``
directory; default this one's) on a fake node where no container asks, and a lean server written as
one straight-line loop (mux and ttrpc headers unpacked by hand, the request decoded with the same
protobuf classes, the annotations read, an empty answer framed and sent), each answering
CreateContainer requests from this script over a socketpair, as a runtime sends them. Before each
request a buffer (``--flush`` MiB; default twice the largest cache sysfs lists, as in
``nri_cold_latency.py``) is copied over in place, so every line the server touches comes from
memory again; the server and this script run on one CPU (``taskset``), so the copy evicts the
server's core caches too. Variants run interleaved in ``--rounds``; the median of their p50s is
printed, with each variant's ratio to the lean server: what the plugin's loop costs over the least
a Python server does.

    .venv/bin/python benchmarks/nri_loop_cold.py [--hook A/hook --hook hook]

No root needed (a fake node; no cgroup is touched). Exits 0 once measured, 2 when it cannot run
(no ``taskset``, a single online CPU).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Dict, List, Sequence

REPO = os.path.dirname(os.path.abspath(os.path.dirname(__file__)))
sys.path.insert(0, os.path.join(REPO, "hook"))
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "nri"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from nri_cold_latency import add_cold_args, compute_flush_mib, read_cache_sizes  # noqa: E402
from peer import RuntimePeer, create_request  # noqa: E402

from mixed_cpus_hook.frontends.nri.wire import api  # noqa: E402
from mixed_cpus_hook.testing.fakenode import FakeNode  # noqa: E402

WARMUP = 30
# The lean server: argv[1] the socket's descriptor, argv[2] the hook directory (its protobuf classes).
LEAN = r"""
import socket, struct, sys
sys.path.insert(0, sys.argv[2])
from mixed_cpus_hook.frontends.nri.plugin import METHODS
from mixed_cpus_hook.frontends.nri.wire.ttrpc import RequestMessage, ResponseMessage
sock = socket.socket(fileno=int(sys.argv[1]))
MUX, TTRPC = struct.Struct(">II"), struct.Struct(">IIBB")
buf = b""
while True:
    data = sock.recv(65536)
    if not data:
        break
    buf += data
    while len(buf) >= 8:
        conn, n = MUX.unpack_from(buf)
        if len(buf) < 8 + n:
            break
        frame, buf = buf[8:8 + n], buf[8 + n:]
        length, sid, _type, _flags = TTRPC.unpack_from(frame)
        req = RequestMessage.FromString(frame[10:10 + length])
        msg = METHODS[req.method][0].FromString(req.payload)
        if req.method == "CreateContainer":  # as the plugin's floor: do the annotations ask?
            asks = {e.key: e.value for e in msg.pod.annotations}
            asks.update({e.key: e.value for e in msg.container.annotations})
            any(k.startswith("floor.invalid/") for k in asks)
        data = ResponseMessage(payload=b"").SerializeToString()
        out = TTRPC.pack(len(data), sid, 2, 0) + data
        sock.sendall(MUX.pack(conn, len(out)) + out)
"""


def compute_p50s(rounds: Dict[str, List[float]]) -> Dict[str, float]:
    """Per variant, the median over rounds of each round's p50 (microseconds)."""
    return {label: statistics.median(values) for label, values in rounds.items()}


def format_rows(p50s: Dict[str, float], base: str) -> List[str]:
    """One line per variant: its p50 and its ratio to ``base`` (the lean server)."""
    return [f"{label:44.44s} {p50:8.1f} us" + (f"  ({p50 / p50s[base]:.2f})" if label != base and p50s[base] else "")
            for label, p50 in p50s.items()]


def measure(peer: RuntimePeer, flush: memoryview, source: bytes, requests: int) -> float:
    """p50 in microseconds of a CreateContainer of a container that does not ask, each after the flush."""
    took: List[int] = []
    for n in range(WARMUP + requests):
        req = create_request(uuid.uuid4().hex * 2, ask=None)
        flush[:] = source
        start = time.perf_counter_ns()
        peer.call("CreateContainer", req, api.CreateContainerResponse)
        if n >= WARMUP:
            took.append(time.perf_counter_ns() - start)
    return statistics.median(took) / 1e3


def run_variant(hook: str, lean: bool, cpu: int, flush: memoryview, source: bytes, requests: int,
                tmp: str) -> float:
    root = tempfile.mkdtemp(prefix="mch-loop-cold-", dir=tmp)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        env = dict(os.environ, PYTHONPATH=hook, MIXED_CPUS_HOOK_CACHE_DIR=os.path.join(root, "cache"),
                   NRI_PLUGIN_SOCKET=str(theirs.fileno()))
        env.pop("JOURNAL_STREAM", None)
        if lean:
            argv = [sys.executable, "-c", LEAN, str(theirs.fileno()), hook]
        else:
            node = FakeNode(os.path.join(root, "node"), version=1, online="0-3")
            config = node.write_config("0-1")
            with open(config, "a", encoding="utf-8") as f:
                f.write("annotation_prefix: floor.invalid\n")  # no container asks: the loop alone
            argv = [sys.executable, "-m", "mixed_cpus_hook", "--config", config, "nri"]
        proc = subprocess.Popen(["taskset", "-c", str(cpu)] + argv, pass_fds=[theirs.fileno()], env=env,
                                stderr=subprocess.DEVNULL)
        theirs.close()
        try:
            peer = RuntimePeer(ours)
            if not lean:
                peer.handshake()
            return measure(peer, flush, source, requests)
        finally:
            ours.close()
            proc.terminate()
            proc.wait(30)
    finally:
        theirs.close()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_cold_args(ap, "request")
    ap.add_argument("--requests", type=int, default=300, help="requests per variant and round (default 300)")
    args = ap.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    if shutil.which("taskset") is None or len(cpus) < 2:
        print("nri_loop_cold: needs taskset and two CPUs (this script and the server share the last one)")
        return 2
    cpu = cpus[-1]
    os.sched_setaffinity(0, {cpu})
    mib = args.flush if args.flush is not None else compute_flush_mib(read_cache_sizes())
    flush = memoryview(bytearray(mib << 20))  # copied into in place: no page faults
    source = bytes(len(flush))
    hooks = [os.path.abspath(h) for h in args.hook] or [os.path.join(REPO, "hook")]
    lean_label = "lean straight-line server"
    variants = [(lean_label, hooks[0], True)] + [(h, h, False) for h in hooks]
    tmp = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    rounds: Dict[str, List[float]] = {label: [] for label, _h, _l in variants}
    for _ in range(args.rounds):
        for label, hook, lean in variants:
            rounds[label].append(run_variant(hook, lean, cpu, flush, source, args.requests, tmp))
    print(f"CreateContainer of a container that does not ask, from memory-cold caches ({mib} MiB flushed "
          f"before each), p50, medians of {args.rounds} interleaved rounds of {args.requests}; Python "
          f"{sys.version.split()[0]}, CPU {cpu}")
    for line in format_rows(compute_p50s(rounds), lean_label):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
