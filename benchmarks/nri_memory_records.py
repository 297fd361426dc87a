#!/usr/bin/env python3
"""Run ``mixed-cpus-hook`` with its records in memory only: a measuring device, never a product mode.

``benchmarks/nri_reference.py --no-record-io`` runs the plugin through this (the reference tool's
NRI_REFERENCE_WRAP, with the plugin's own interpreter) to measure how much of an answer is the
record files' I/O: every record is still built, formatted to JSON and remembered exactly as in
the product, but kept in a dict instead of a file (no open, write, rename, stat or unlink). Such a
plugin loses every record when it ends: it keeps no crash-exactness at all, which is why this
lives in benchmarks/ and patches the store from outside instead of being an option.

    PYTHON nri_memory_records.py MIXED-CPUS-HOOK-ARGV...

The store module is patched before anything imports names from it, so every user of
``load_container``, ``save_pod``, ``delete_record`` and the others gets the in-memory ones.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple


def install() -> Dict[str, bytes]:
    """Replace the record store's file I/O with a dict (path -> bytes); returns the dict."""
    from mixed_cpus_hook.store import records as r

    files: Dict[str, bytes] = {}

    def write_bytes(path: str, tmp: str, data: bytes, dir_fd: Optional[int] = None, base: str = ""
                    ) -> Tuple[int, int, int]:
        files[path] = data  # as the product formatted them
        return 0, len(data), 0

    class NoJournal(dict):  # type: ignore[type-arg]
        """The plugin's journaling lock never registers: a save goes to the dict at once."""

        def __setitem__(self, key: Any, value: Any) -> None:
            pass

    def read_remembered(state_dir: str, kind: str, path: str) -> Tuple[Optional[bytes], Any, Any]:
        data = files.get(path)
        if data is None:
            r._PARSED.pop(path, None)
            return None, None, None
        hit = r._PARSED.get(path)
        return data, (hit[1] if hit is not None and hit[0] == data else None), (0, len(data), 0)

    def read_record_bytes(state_dir: str, kind: str, name: str) -> Optional[bytes]:
        return files.get(r.record_path(state_dir, kind, name))

    def delete_record(state_dir: str, kind: str, name: str) -> bool:
        path = r.record_path(state_dir, kind, name)
        r._PARSED.pop(path, None)
        return files.pop(path, None) is not None

    def container_exists(state_dir: str, cid: str) -> bool:
        return r.record_path(state_dir, "containers", cid) in files

    def list_records(state_dir: str, kind: str) -> List[str]:
        prefix = os.path.join(state_dir, kind) + os.sep
        return sorted(p[len(prefix):-len(".json")] for p in files if p.startswith(prefix))

    def list_remembered(state_dir: str, kind: str) -> List[Tuple[str, Any]]:
        prefix = os.path.join(state_dir, kind) + os.sep
        out = []
        for name in list_records(state_dir, kind):
            hit = r._PARSED.get(prefix + name + ".json")
            out.append((name, None if hit is None else hit[1]))
        return out

    r._write_bytes = write_bytes
    r._JOURNALS = NoJournal()
    # Nor does it watch the record folders (no file is written there): the lock's ``watching`` stays off.
    r.HeldStateLock.watching = property(lambda self: False, lambda self, value: None)  # type: ignore[assignment]
    r._read_remembered = read_remembered
    r.read_record_bytes = read_record_bytes
    r.delete_record = delete_record
    r.container_exists = container_exists
    r.list_records = list_records
    r.list_remembered = list_remembered
    return files


def run_plugin(argv: List[str], install_device: Callable[[], Any], usage: str) -> int:
    """``mixed-cpus-hook argv[1:]`` in this process, once ``install_device`` patched it (the
    measuring devices' main: this one and nri_go_work.py)."""
    if len(argv) < 2:
        print(usage, file=sys.stderr)
        return 2
    install_device()
    from mixed_cpus_hook.frontends.entry import entry

    sys.argv = argv[1:]
    entry()
    return 0


def main(argv: List[str]) -> int:
    return run_plugin(argv, install, __doc__.split("\n\n")[2].strip())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
