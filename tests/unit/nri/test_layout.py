"""Two front ends over one engine: the hook's path never loads the NRI package or protobuf."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SOURCE_ROOT = str(Path(__file__).resolve().parents[3] / "hook")
PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import mixed_cpus_hook.frontends.hook.fastpath, mixed_cpus_hook.usecases.apply, mixed_cpus_hook.frontends.systemd.watches
print(json.dumps(sorted(sys.modules)))
"""


def test_hook_path_does_not_import_nri_or_protobuf() -> None:
    out = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE, SOURCE_ROOT], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    modules = json.loads(out)
    assert "mixed_cpus_hook.usecases.apply" in modules
    assert [m for m in modules if m.startswith(("mixed_cpus_hook.frontends.nri", "google"))] == []


def test_nri_package_imports_the_engine_not_click() -> None:
    probe = ("import json, sys; sys.path.insert(0, sys.argv[1]); import mixed_cpus_hook.frontends.nri.plugin; "
             "print(json.dumps(sorted(sys.modules)))")
    modules = json.loads(subprocess.run([sys.executable, "-c", probe, SOURCE_ROOT], capture_output=True, text=True,
                                        timeout=60, check=True).stdout)
    assert "mixed_cpus_hook.usecases.apply" in modules and "google.protobuf" in modules
    assert [m for m in modules if m.split(".")[0] in ("click", "yaml", "jsonschema")] == []
