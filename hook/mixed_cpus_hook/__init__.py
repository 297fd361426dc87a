"""mixed-cpus-hook: run a Guaranteed container on its exclusive CPUs plus the node's shared CPUs.

The package is split so that the OCI hook path (``fastpath``) imports only the standard
library; the full command line (``cli``) adds click, PyYAML, jsonschema and psutil.
"""

__version__ = "0.1.0"
