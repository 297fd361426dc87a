"""scripts/install-deps.sh (the first step of `make test` and CI) parses and lists every group.

The table of groups is one single-quoted shell string: a stray quote inside it (an apostrophe in a
reason) splits it into commands and the script dies before installing anything (exit 3 from
`runc crun ...` run as a command). Without apt on PATH the script only prints the table, so it
is run here with an empty PATH and every group must come out whole.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-deps.sh"
GROUPS = {
    "runtimes": ["runc", "crun", "podman", "buildah", "strace", "inotify-tools"],
    "vm": ["qemu-system-x86", "linux-image-amd64"],
    "packaging": ["rpm", "rpmlint"],
    "system-python": ["python3-click", "debootstrap"],
    "tools": ["zsh", "hyperfine"],
}


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
def test_without_apt_the_script_lists_every_group_whole(tmp_path: Path) -> None:
    sh = shutil.which("sh")
    assert sh is not None
    done = subprocess.run([sh, str(SCRIPT)], capture_output=True, text=True, timeout=30,
                          env={"PATH": str(tmp_path)})
    assert done.returncode == 1, done.stderr
    assert "not found" not in done.stderr, done.stderr
    listed = {}
    for line in done.stderr.splitlines():
        if line.startswith("  ") and ": " in line:
            group, rest = line.strip().split(": ", 1)
            listed[group] = rest.split("  (", 1)[0].split()
    assert set(listed) == set(GROUPS), done.stderr
    for group, packages in GROUPS.items():
        assert set(packages) <= set(listed[group]), (group, listed[group])
