"""The runtime's CDI spec directories, read for the claims they vouch for (exclusive_source dra).

A ``DRA_CPUSET_`` variable counts only when a spec there holds it (core.cdi says why and decides);
this module reads the specs, on every request that has such a variable, so it must be cheap and
must not be led astray by what it reads:

- bounded: at most bounds.MAX_CDI_DIR_ENTRIES entries of a directory are looked at, a file larger
  than MAX_CDI_SPEC_BYTES is not read, a spec's devices and env entries are bounded in core.cdi;
- only what CDI itself reads: files named ``*.json`` or ``*.yaml`` directly in each directory (CDI
  does not look into subdirectories); a symbolic link is followed only to a file in the same
  directory, never out of it; FIFOs and devices are refused without being opened for reading;
- JSON, else YAML (``yaml.safe_load``: the pure-Python loader, whose recursion Python bounds), a
  spec that holds a claim only up to MAX_CDI_YAML_BYTES as YAML (the loader's speed: bounds.py);
- a broken file is skipped: its problem is reported once (``CdiScan.new_problems``) while it stays
  broken, and the other files still count;
- a file that holds no ``DRA_CPUSET_`` bytes cannot vouch for a claim and is not parsed (a GPU
  vendor's large YAML spec costs one read per change, never a parse);
- each file's result is kept with its stat key (device, inode, size, times): a request costs a
  directory listing and one lstat per spec file. A file changed within the last second is read
  again until it is older (its times may not have moved yet: file times follow a clock that ticks
  every few milliseconds), so an in-place rewrite is never missed.
"""

from __future__ import annotations

import json
import os
import stat
import time

from ..core.bounds import MAX_CDI_DIR_ENTRIES, MAX_CDI_SPEC_BYTES, MAX_CDI_YAML_BYTES
from ..core.cdi import CdiSpec, compute_vouched, parse_cdi_spec
from ..core.errors import CdiSpecError
from .files import FileRefused, parse_yaml_text, read_regular_file

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple
else:
    from ..core.compat import NamedTuple

SPEC_SUFFIXES = (".json", ".yaml")  # what CDI's cache reads (pkg/cdi/spec-dirs.go)
CLAIM_MARKER = b"DRA_CPUSET_"
# A file whose times are this recent may still change without its stat key changing.
RACY_NS = 1000000000


class SpecFile(NamedTuple):
    """One spec file as last read: its stat key, its spec, or why it was skipped."""

    key: Tuple[Any, ...]
    spec: Optional[CdiSpec]  # None: skipped (``problem``), or no DRA_CPUSET_ in it (not parsed)
    problem: str
    settled: bool  # its times were old enough at the read for the key to say it is unchanged


class CdiScan(NamedTuple):
    """One reading of the spec directories."""

    specs: Tuple[Tuple[str, CdiSpec], ...]  # (path, spec) of every spec read
    problems: Tuple[str, ...]  # every file or directory skipped, and why
    new_problems: Tuple[str, ...]  # those the previous scan with the same cache did not report
    missing: Tuple[str, ...]  # directories that do not exist
    files: int  # spec files looked at


class CdiSpecCache:
    """What a resident process keeps between scans: each file's result with its stat key."""

    def __init__(self) -> None:
        self.files: Dict[str, SpecFile] = {}
        self.reported: FrozenSet[str] = frozenset()
        # compute_vouched's last result, with the files' keys it was computed from (None: not to be reused)
        self.vouched: Tuple[Optional[Tuple[Any, ...]], Dict[str, FrozenSet[str]]] = (None, {})


def parse_spec_text(text: str, where: str, yaml_limit: int = MAX_CDI_YAML_BYTES) -> Any:
    """A spec file's document: JSON with the json module, else YAML (``yaml.safe_load``) when the text is
    at most ``yaml_limit`` characters."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except RecursionError:
            raise CdiSpecError("not valid JSON: nested too deeply", where) from None
        except ValueError:
            pass  # YAML's flow style starts with "{" too: YAML's parser says what is wrong
    if len(text) > yaml_limit:
        raise CdiSpecError(f"not JSON, and larger than the {yaml_limit} characters read as YAML ({len(text)})", where)
    return parse_yaml_text(text, where, CdiSpecError, "JSON or YAML")


def load_spec_file(path: str, every_spec: bool = False) -> Tuple[Optional[CdiSpec], str]:
    """(spec, "") or (None, why it is skipped); (None, "") for a file without DRA_CPUSET_ in it,
    unless ``every_spec``."""
    try:
        data = read_regular_file(path, MAX_CDI_SPEC_BYTES, follow=False)
    except FileRefused as exc:
        return None, str(exc)
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    claims = CLAIM_MARKER in data
    if not every_spec and not claims:
        return None, ""
    try:  # check (every_spec) parses a large YAML spec without a claim, which the plugin never reads
        text = data.decode("utf-8")
        return parse_cdi_spec(parse_spec_text(text, path, MAX_CDI_YAML_BYTES if claims else MAX_CDI_SPEC_BYTES),
                              path), ""
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except CdiSpecError as exc:
        return None, exc.message


def _key(path: str, st: os.stat_result, every_spec: bool) -> Tuple[Any, ...]:
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, every_spec)


def _resolve_link(path: str, directory: str) -> Tuple[str, str]:
    """(the target of a symbolic link entry, "") when it is a file of the same directory, else ("", why)."""
    target = os.path.realpath(path)
    if os.path.dirname(target) != os.path.realpath(directory):
        return "", f"a symbolic link to {target}, outside {directory}: not followed"
    return target, ""


def read_spec_entry(entry: os.DirEntry, directory: str, old: Optional[SpecFile], now_ns: int,
                    every_spec: bool = False) -> Optional[SpecFile]:
    """One directory entry: its SpecFile (``old`` again when its key is unchanged and settled), or None
    when it is not a file CDI reads (a directory) or went away since it was listed."""
    try:
        st = entry.stat(follow_symlinks=False)
        path = entry.path
        if stat.S_ISLNK(st.st_mode):
            path, why = _resolve_link(path, directory)
            if why:
                return SpecFile((entry.path, why), None, why, True)
            st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return SpecFile((entry.path,), None, f"cannot be read ({exc.strerror or exc})", False)
    if stat.S_ISDIR(st.st_mode):
        return None
    key = _key(path, st, every_spec)
    if old is not None and old.settled and old.key == key:
        return old
    if not stat.S_ISREG(st.st_mode):
        spec, problem = None, "not a regular file"  # never opened: a FIFO would block
    elif st.st_size > MAX_CDI_SPEC_BYTES:
        spec, problem = None, f"larger than {MAX_CDI_SPEC_BYTES} bytes ({st.st_size})"
    else:
        spec, problem = load_spec_file(path, every_spec)
    return SpecFile(key, spec, problem, now_ns - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_NS)


def read_cdi_specs(dirs: Sequence[str], cache: Optional[CdiSpecCache] = None, every_spec: bool = False,
                   now_ns: Optional[int] = None) -> CdiScan:
    """Every spec of ``dirs`` that may hold a claim (``every_spec``: every spec, for ``check``).

    ``now_ns``: the time the files' times are compared with (the clock's, time.time_ns()).
    """
    cache = cache if cache is not None else CdiSpecCache()
    now_ns = time.time_ns() if now_ns is None else now_ns
    files: Dict[str, SpecFile] = {}
    specs: List[Tuple[str, CdiSpec]] = []
    problems: List[str] = []
    missing: List[str] = []
    for d in dirs:
        try:
            with os.scandir(d) as entries:
                for n, entry in enumerate(entries):
                    if n >= MAX_CDI_DIR_ENTRIES:
                        problems.append(f"CDI spec directory {d}: more than {MAX_CDI_DIR_ENTRIES} entries: the rest "
                                        "is not read (a claim only there is refused)")
                        break
                    if not entry.name.endswith(SPEC_SUFFIXES):
                        continue
                    got = read_spec_entry(entry, d, cache.files.get(entry.path), now_ns, every_spec)
                    if got is None:
                        continue
                    files[entry.path] = got
                    if got.problem:
                        problems.append(f"CDI spec {entry.path}: {got.problem}: skipped")
                    elif got.spec is not None:
                        specs.append((entry.path, got.spec))
        except FileNotFoundError:
            missing.append(d)
        except OSError as exc:
            problems.append(f"CDI spec directory {d}: cannot be read ({exc.strerror or exc})")
    reported = frozenset(problems)
    new = tuple(p for p in problems if p not in cache.reported)
    cache.files, cache.reported = files, reported
    return CdiScan(tuple(specs), tuple(problems), new, tuple(missing), len(files))


def read_vouched(dirs: Sequence[str], cache: CdiSpecCache,
                 now_ns: Optional[int] = None) -> Tuple[Dict[str, FrozenSet[str]], CdiScan]:
    """core.cdi.compute_vouched of the specs of ``dirs`` now, and the scan (computed again only when a
    file changed or is too recent for its key to tell)."""
    scan = read_cdi_specs(dirs, cache, now_ns=now_ns)
    files = cache.files.values()
    key = tuple(f.key for f in files) if all(f.settled for f in files) else None
    if key is not None and cache.vouched[0] == key:
        return cache.vouched[1], scan
    vouched = compute_vouched(spec for _path, spec in scan.specs)
    cache.vouched = (key, vouched)
    return vouched, scan
