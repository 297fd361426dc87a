"""The pure core: cpulists, requests, the decision and the plan. Standard library only, no I/O;
imports nothing of the package outside ``core``."""
