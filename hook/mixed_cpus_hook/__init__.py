"""mixed-cpus-hook: run a Guaranteed container on its exclusive CPUs plus the node's shared CPUs.

The package is split so that the OCI hook path (``fastpath``) imports only the standard
library; the full command line (``cli``) adds click, PyYAML, jsonschema and psutil.

An installed package may also hold the hook path's compiled modules in one file,
``__pycache__/hookpath.<cache tag>.bundle`` (written by ``make install`` and the image build
with ``python3 -m mixed_cpus_hook.ops.hookbundle``). The runtime waits for the hook on every
container start, and importing its ~30 modules one .pyc at a time costs about 2 ms of it (a
directory scan, two stats, an open and five more system calls, and the import machinery's
Python, per module). The finder below serves those modules from the one file instead, each
only while its source file still has the size and modification time it was compiled from:
an edited, replaced or missing source falls back to the ordinary import, as a stale .pyc
does. A bundle built by another Python (its magic number differs) or unreadable is ignored.
``mixed-cpus-hook check`` reports which of the two a node uses ("hook-bundle").
"""

__version__ = "0.1.0"

BUNDLE_FORMAT = 2  # the table's shape: a bundle of another format is ignored


def _serve_bundle() -> None:
    """Put the bundle's finder first on ``sys.meta_path``, if this install has a current bundle."""
    import sys

    try:
        import marshal
        from os import stat
        from os.path import dirname, join

        from _frozen_importlib import ModuleSpec
        from _frozen_importlib_external import MAGIC_NUMBER

        here = dirname(__file__)
        with open(join(here, "__pycache__", f"hookpath.{sys.implementation.cache_tag}.bundle"), "rb") as f:
            data = f.read()
        if data[:4] != MAGIC_NUMBER:
            return
        fmt, table = marshal.loads(memoryview(data)[4:])  # a view: no copy of the whole file
        if fmt != BUNDLE_FORMAT or type(table) is not dict:
            return
    except Exception:  # noqa: BLE001 - a missing or unreadable bundle is only slower, never an error
        return

    class BundleFinder:
        """Finds the bundle's modules whose source is unchanged since the bundle was built, and loads them."""

        served = table  # name -> (path relative to the package, is a package, size, mtime_ns, code, its .pyc's path)

        @classmethod
        def find_spec(cls, name: str, path: object = None, target: object = None) -> object:
            entry = cls.served.get(name)
            if entry is None:
                return None
            rel, is_package, size, mtime_ns, _, cached = entry
            origin = f"{here}/{rel}"
            try:
                st = stat(origin)
            except OSError:
                st = None
            if st is None or st.st_size != size or st.st_mtime_ns != mtime_ns:
                del cls.served[name]  # stale: the ordinary finders take it, now and later
                return None
            spec = ModuleSpec(name, cls, origin=origin, is_package=is_package)  # type: ignore[arg-type]
            spec.has_location = True  # __file__ is the source, as for any module
            spec.cached = f"{here}/{cached}"  # __cached__ as usual, without computing it per import
            if is_package:
                spec.submodule_search_locations = [dirname(origin)]  # its other modules: the usual way
            return spec

        @staticmethod
        def create_module(spec: object) -> None:
            return None

        @classmethod
        def exec_module(cls, module: object) -> None:
            exec(cls.served[module.__name__][4], module.__dict__)  # type: ignore[attr-defined]

        @classmethod
        def get_code(cls, fullname: str) -> object:  # runpy (python -m) asks the loader for it
            return cls.served[fullname][4]

        @classmethod
        def is_package(cls, fullname: str) -> bool:
            return bool(cls.served[fullname][1])

        @staticmethod
        def get_source(fullname: str) -> None:  # tracebacks read the file the code names
            return None

    sys.meta_path.insert(0, BundleFinder)  # type: ignore[arg-type]


_serve_bundle()
