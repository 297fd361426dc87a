#!/usr/bin/env python3
"""What the worst runtime input costs the NRI plugin: each bound of bounds.py at its limit.

In-process, on a fake node (online 0-7, shared 0-1): the plugin's own code for one request,
from the bytes the runtime sends to the answer, without the socket. Each scenario runs
``--rounds`` times; the median and the worst are printed, in milliseconds. The protobuf
implementation (upb, cpp or python: RHEL 9's protobuf 3.14 may be the slow pure-Python one)
is printed first, since decoding is most of some costs.

1. ``cpulist-64KiB-wide-ranges``: parse_cpulist of "0-8191" repeated to 64 KiB (the text bound);
   ``cpulist-8192-singles``: every CPU written alone (the longest list of a maximal node).
2. ``create-100k-annotations``: a CreateContainer whose container has 100,000 annotations,
   decoded into api.READ (the count is then refused before any entry is read); ``...-as-map``:
   the same bytes decoded into the map-declared classes, for comparison.
3. ``synchronize-70k-containers``: one Synchronize part listing 70,000 containers: cut to the
   bound (8,192) before decoding, then handled (none asks or is tracked).
4. ``mux-20000-unknown-frames``: 20,000 one-byte mux frames for an unknown connection, demuxed.

Runs anywhere (no root). Exit 0 once measured.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "hook"))

from google.protobuf.internal import api_implementation  # noqa: E402

from mixed_cpus_hook.node.config import load_config  # noqa: E402
from mixed_cpus_hook.core.cpuset import parse_cpulist  # noqa: E402
from mixed_cpus_hook.testing.fakenode import FakeNode  # noqa: E402
from mixed_cpus_hook.node.log import Reporter  # noqa: E402
from mixed_cpus_hook.frontends.nri.wire import api, mux  # noqa: E402
from mixed_cpus_hook.frontends.nri.handlers import Handlers  # noqa: E402


def scenarios(workdir: str) -> Dict[str, Callable[[], object]]:
    node = FakeNode(os.path.join(workdir, "node"), version=2, online="0-7")
    os.environ["MIXED_CPUS_HOOK_CACHE_DIR"] = os.path.join(workdir, "cache")
    handlers = Handlers(load_config(node.write_config("0-1")), Reporter(stream=io.StringIO(), sink=None))
    handlers.engine.facts()
    wide = ",".join(["0-8191"] * ((64 << 10) // 7))  # 65,533 characters
    singles = ",".join(str(c) for c in range(8192))
    create = api.CreateContainerRequest()
    create.container.id = "c" * 64
    for i in range(100000):
        create.container.annotations[f"{i:x}"] = ""
    create_bytes = create.SerializeToString()
    sync_bytes = api.SynchronizeRequest(
        containers=[api.Container(id=f"c{i}", pod_sandbox_id="p") for i in range(70000)]).SerializeToString()
    frames = b"\0\0\0\x07\0\0\0\x01x" * 20000

    def create_read() -> object:
        return handlers.create_container(api.READ["CreateContainerRequest"].FromString(create_bytes))

    def synchronize() -> object:
        return handlers.synchronize(handlers.decode_synchronize(sync_bytes))

    return {
        "cpulist-64KiB-wide-ranges": lambda: parse_cpulist(wide),
        "cpulist-8192-singles": lambda: parse_cpulist(singles),
        "create-100k-annotations": create_read,
        "create-100k-annotations-as-map": lambda: api.CreateContainerRequest.FromString(create_bytes),
        "synchronize-70k-containers": synchronize,
        "mux-20000-unknown-frames": lambda: mux.Demux().feed(frames),
    }


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    print(f"python {sys.version.split()[0]}, protobuf {api_implementation.Type()}")
    with tempfile.TemporaryDirectory() as workdir:
        for name, run in scenarios(workdir).items():
            times = []
            for _ in range(args.rounds):
                start = time.perf_counter()
                run()
                times.append((time.perf_counter() - start) * 1000)
            print(f"  {name:34} median {statistics.median(times):8.1f} ms   worst {max(times):8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
