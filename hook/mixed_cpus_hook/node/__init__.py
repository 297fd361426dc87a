"""Adapters to the node: cgroupfs, kubelet's checkpoint, OCI state and config.json, the
configuration, capped file reads, the journal. Each takes its root as a parameter."""
