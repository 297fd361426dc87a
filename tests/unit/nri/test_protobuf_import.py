"""NRI mode imports protobuf 3.x without pkg_resources (frontends/nri/__init__.import_protobuf).

protobuf 3.x's ``google/protobuf/__init__.py`` and ``google/protobuf/pyext/__init__.py`` (RHEL 9's
python3-protobuf 3.14, Debian bullseye's 3.12: the C++ implementation's descriptor.py imports the
latter) declare their package a namespace through pkg_resources when they can import it, and through
pkgutil.extend_path when they cannot. Each case runs a fresh interpreter whose path starts with a
stand-in of that protobuf: the two ``__init__.py`` files exactly as 3.12 and 3.14 spell them, a
descriptor.py that imports pyext as the C++ one does, and a pkg_resources that says when it was
imported. The real thing (bullseye's protobuf 3.12.4 under its own python3.9) is checked by
tests/integration/test_installed_tree.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

SOURCE_ROOT = str(Path(__file__).resolve().parents[3] / "hook")

# protobuf 3.12.4 and 3.14.0, google/protobuf/__init__.py and google/protobuf/pyext/__init__.py
NAMESPACE = """try:
  __import__('pkg_resources').declare_namespace(__name__)
except ImportError:
  __path__ = __import__('pkgutil').extend_path(__path__, __name__)
"""
PKG_RESOURCES = """import sys
def declare_namespace(name):
    sys.modules[name].declared = True
"""

PROBE = """
import json, sys
sys.path[:0] = [{fake!r}, {source!r}]
{before}
import mixed_cpus_hook.frontends.nri
import google.protobuf, google.protobuf.pyext
out = {{"pkg_resources": "pkg_resources" in sys.modules and sys.modules["pkg_resources"] is not None,
       "declared": getattr(google.protobuf, "declared", False),
       "pyext_declared": getattr(google.protobuf.pyext, "declared", False),
       "path": list(google.protobuf.__path__)}}
import pkg_resources  # later imports get it as usual
out["later"] = pkg_resources.__file__
print(json.dumps(out))
"""


def fake_protobuf(root: Path) -> Path:
    site = root / "site"
    pb = site / "google" / "protobuf"
    (pb / "pyext").mkdir(parents=True)
    (pb / "__init__.py").write_text("__version__ = '3.14.0'\n\nif __name__ != '__main__':\n"
                                    + "".join("  " + line + "\n" for line in NAMESPACE.splitlines()))
    (pb / "pyext" / "__init__.py").write_text(NAMESPACE)
    (pb / "descriptor.py").write_text("from google.protobuf.pyext import __name__ as _pyext\n")
    (site / "pkg_resources.py").write_text(PKG_RESOURCES)
    return site


def run_probe(tmp_path: Path, before: str) -> Dict[str, Any]:
    site = fake_protobuf(tmp_path)
    code = PROBE.format(fake=str(site), source=SOURCE_ROOT, before=before)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: Dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    result["site"] = str(site)
    return result


@pytest.mark.parametrize("before, imported, declared", [
    pytest.param("", False, False, id="pkg-resources-not-imported-yet-stays-out"),
    pytest.param("import pkg_resources", True, True, id="pkg-resources-imported-before-is-used"),
    pytest.param("import google.protobuf", True, True, id="protobuf-imported-before-is-left-alone"),
])
def test_protobuf_3_imports_without_pkg_resources(tmp_path: Path, before: str, imported: bool,
                                                  declared: bool) -> None:
    result = run_probe(tmp_path, before)
    assert result["pkg_resources"] is imported
    assert result["declared"] is declared and result["pyext_declared"] is declared
    assert result["path"] == [str(Path(result["site"]) / "google" / "protobuf")]
    assert result["later"] == str(Path(result["site"]) / "pkg_resources.py")
