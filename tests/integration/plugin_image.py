"""The plugin's container image, built from the Containerfile here, without a registry.

* Bases: the debootstrapped Debian bullseye trees of ``scripts/fetch-bullseye.sh`` (``python``:
  python3 3.9.2 only, the image's BASE; ``pip``: with pip, its build stage) imported into a
  private buildah store as ``localhost/mch-bullseye-<variant>:<stamp>`` (documentation, man
  pages and locales left out, as slim bases do), once per debootstrap.
* Build: Debian's buildah (``bud``, runc: crun refuses this machine's hybrid cgroups; the host
  network, and the host's CA bundle for pip's downloads), then ``buildah push`` to a
  docker-archive that ``ctr images import`` takes.
* Cache: the archive is kept in ``CACHE/image-<inputs>.tar``, keyed by a hash of every file the
  build reads (Containerfile, requirements, setup.cfg, pyproject.toml, README.md, LICENSE,
  hook/): an unchanged tree is never rebuilt. Older archives and the build's intermediate
  images are removed after a build, so the cache holds one image.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from typing import Dict, List, NamedTuple, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("MIXED_CPUS_HOOK_IMAGE_CACHE", "/var/cache/mixed-cpus-hook-test/image")
BUILDAH_ROOT = os.path.join(CACHE, "buildah")
RUNC = "/usr/sbin/runc"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
SLIM = ("./usr/share/doc", "./usr/share/man", "./usr/share/info", "./usr/share/locale", "./.complete")
INPUTS = ("Containerfile", "deploy/image/requirements.txt", "setup.cfg", "pyproject.toml", "README.md", "LICENSE")
NAME = "localhost/mixed-cpus-hook"


class Image(NamedTuple):
    archive: str  # docker-archive tar, for `ctr images import`
    ref: str  # the name the archive carries, e.g. localhost/mixed-cpus-hook:0.1.0
    size: int  # bytes of the uncompressed image (buildah's figure)
    labels: Dict[str, str]
    built_in: float  # seconds this call spent building (0 when the cached archive served)


def version() -> str:
    with open(os.path.join(REPO, "hook", "mixed_cpus_hook", "__init__.py"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip('"')
    raise RuntimeError("no __version__ in hook/mixed_cpus_hook/__init__.py")


def compute_inputs_hash(repo: str = REPO) -> str:
    """A hash of every file the image build reads (paths and contents)."""
    h = hashlib.sha256()
    files = [os.path.join(repo, p) for p in INPUTS]
    for cur, dirs, names in os.walk(os.path.join(repo, "hook")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.endswith(".egg-info"))
        files += [os.path.join(cur, n) for n in sorted(names) if not n.endswith((".pyc", ".pyo"))]
    for path in files:
        h.update(os.path.relpath(path, repo).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()[:16]


def run(argv: List[str], timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kwargs)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])}... exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return proc


def buildah(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run(["buildah", "--root", os.path.join(BUILDAH_ROOT, "root"), "--runroot",
                os.path.join(BUILDAH_ROOT, "run"), "--storage-driver", "overlay", *args], timeout=timeout)


def bullseye(variant: str) -> str:
    """The cached bullseye tree (debootstrapped on first use: about a minute)."""
    return run(["sh", os.path.join(REPO, "scripts", "fetch-bullseye.sh"), variant], timeout=900).stdout.strip()


def ensure_base(variant: str) -> str:
    """``localhost/mch-bullseye-<variant>:<stamp>`` in the private store, imported from the tree once."""
    root = bullseye(variant)
    stamp = str(int(os.stat(os.path.join(root, ".complete")).st_mtime))
    ref = f"localhost/mch-bullseye-{variant}:{stamp}"
    if ref in buildah("images", "--format", "{{.Name}}:{{.Tag}}").stdout.split():
        return ref
    tar = os.path.join(CACHE, f"rootfs-{variant}.{os.getpid()}.tar")
    run(["tar", "-C", root, "-cf", tar, *[f"--exclude={p}" for p in SLIM], "."])
    try:
        ctr = buildah("from", "scratch").stdout.strip()
        try:
            buildah("add", ctr, tar, "/")
            buildah("config", "--cmd", "/bin/sh", ctr)
            buildah("commit", "-q", ctr, ref)
        finally:
            buildah("rm", ctr)
    finally:
        os.unlink(tar)
    return ref


def inspect(ref: str) -> Tuple[int, Dict[str, str]]:
    doc = json.loads(buildah("inspect", "--type", "image", ref).stdout)
    labels = doc.get("OCIv1", {}).get("config", {}).get("Labels") or {}
    sizes = buildah("images", "--format", "{{.Name}}:{{.Tag}} {{.Size}}").stdout
    size = 0
    for line in sizes.splitlines():
        name, _, value = line.partition(" ")
        if name == ref:
            size = parse_size(value)
    return size, labels


def parse_size(text: str) -> int:
    """buildah's "121 MB" (decimal units) -> bytes."""
    number, _, unit = text.strip().partition(" ")
    scale = {"B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9}[unit or "B"]
    return int(float(number) * scale)


def build_image() -> Image:
    """The plugin's image as a docker-archive: the cached one when the inputs did not change."""
    os.makedirs(CACHE, exist_ok=True)
    key = compute_inputs_hash()
    ver = version()
    ref = f"{NAME}:{ver}"
    archive = os.path.join(CACHE, f"image-{key}.tar")
    meta = archive + ".json"
    if os.path.exists(archive) and os.path.exists(meta):
        with open(meta, encoding="utf-8") as f:
            doc = json.load(f)
        return Image(archive, doc["ref"], doc["size"], doc["labels"], 0.0)
    start = time.monotonic()
    base, builder = ensure_base("python"), ensure_base("pip")
    local = f"{NAME}:{ver}-{key}-{os.getpid()}"  # this build's own tag: concurrent builds never meet
    build = [f"--runtime={RUNC}", "--layers", "--network", "host", "-f", os.path.join(REPO, "Containerfile"),
             "--build-arg", f"BASE={base}", "--build-arg", f"BUILDER={builder}", "--build-arg", f"VERSION={ver}",
             "-t", local]
    if os.path.exists(CA_BUNDLE):  # what this host trusts (a TLS-intercepting proxy), for pip in the build
        build += ["--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
    buildah("bud", *build, REPO, timeout=900)
    size, labels = inspect(local)
    tmp = f"{archive}.{os.getpid()}.tmp"
    buildah("push", local, f"docker-archive:{tmp}:{ref}")  # the archive names it REF, as deploy/ does
    with open(meta + f".{os.getpid()}.tmp", "w", encoding="utf-8") as f:
        json.dump({"ref": ref, "size": size, "labels": labels}, f)
    os.replace(meta + f".{os.getpid()}.tmp", meta)
    os.replace(tmp, archive)
    for name in os.listdir(CACHE):  # one image in the cache: older archives and layers go
        if name.startswith("image-") and not name.startswith(f"image-{key}.tar") and not name.endswith(".tmp"):
            os.unlink(os.path.join(CACHE, name))
    buildah("rmi", local)
    buildah("rmi", "--prune")
    return Image(archive, ref, size, labels, time.monotonic() - start)
