"""Container images without a registry: an OCI image-layout archive built from busybox-static.

One uncompressed layer (``/bin/busybox`` with a symlink per applet, and the empty directories a
runtime mounts on), shared by two images: a busybox image whose command is ``sh``, and a pause
image for containerd's ``sandbox_image`` (busybox ``sh`` that sleeps and exits on SIGTERM: PID 1
of a pid namespace ignores signals it has no handler for). The archive is what ``ctr images
import`` reads (index.json with ``io.containerd.image.name`` annotations, oci-layout, blobs/);
it is built reproducibly (fixed mtimes and owners), so the digests are the same on every run.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from typing import Dict, List, Tuple

BUSYBOX = "/bin/busybox"
BUSYBOX_IMAGE = "localhost/mch-busybox:1"
PAUSE_IMAGE = "localhost/mch-pause:1"
PAUSE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def busybox_applets(busybox: str = BUSYBOX) -> List[str]:
    """The applets this busybox binary provides (``busybox --list``)."""
    out = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True, timeout=30).stdout
    return sorted(a for a in out.split() if a and "/" not in a and a != "busybox")


def _info(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.size, ti.linkname = kind, mode, size, link
    ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "root", "root"
    return ti


def build_layer(busybox: str = BUSYBOX) -> bytes:
    """The rootfs layer tar: /bin/busybox, /bin/<applet> symlinks, empty /proc /dev /sys /tmp /etc."""
    with open(busybox, "rb") as f:
        binary = f.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp"):
            tar.addfile(_info(d, tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755))
        tar.addfile(_info("bin/busybox", tarfile.REGTYPE, 0o755, len(binary)), io.BytesIO(binary))
        for applet in busybox_applets(busybox):
            tar.addfile(_info(f"bin/{applet}", tarfile.SYMTYPE, 0o777, link="busybox"))
    return buf.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def image_blobs(layer: bytes, name: str, entrypoint: List[str], cmd: List[str]) -> Tuple[Dict[str, bytes], dict]:
    """The config and manifest blobs of one image over ``layer``, and its index.json entry."""
    config = _json({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": [PATH_ENV], "Entrypoint": entrypoint, "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
    })
    manifest = _json({
        "schemaVersion": 2, "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": _digest(config), "size": len(config)},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": _digest(layer), "size": len(layer)}],
    })
    entry = {"mediaType": MEDIA_MANIFEST, "digest": _digest(manifest), "size": len(manifest),
             "platform": {"architecture": "amd64", "os": "linux"},
             "annotations": {"io.containerd.image.name": name,
                             "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}}
    return {_digest(config): config, _digest(manifest): manifest}, entry


def write_oci_archive(path: str, busybox: str = BUSYBOX) -> List[str]:
    """Write the archive with both images to ``path``; returns the image names in it."""
    layer = build_layer(busybox)
    blobs = {_digest(layer): layer}
    manifests = []
    for name, entrypoint, cmd in ((BUSYBOX_IMAGE, [], ["/bin/sh"]),
                                  (PAUSE_IMAGE, ["/bin/sh", "-c", PAUSE_SCRIPT], [])):
        more, entry = image_blobs(layer, name, entrypoint, cmd)
        blobs.update(more)
        manifests.append(entry)
    files = {"oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
             "index.json": _json({"schemaVersion": 2, "manifests": manifests})}
    for digest, data in sorted(blobs.items()):
        files["blobs/sha256/" + digest.split(":", 1)[1]] = data
    tmp = path + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            tar.addfile(_info(d, tarfile.DIRTYPE, 0o755))
        for name, data in files.items():
            tar.addfile(_info(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    os.replace(tmp, path)
    return [m["annotations"]["io.containerd.image.name"] for m in manifests]
