"""``python -m mixed_cpus_hook``: the same command as ``mixed-cpus-hook``."""

from .frontends.entry import entry

entry()
