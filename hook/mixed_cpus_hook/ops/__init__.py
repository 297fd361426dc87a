"""Operations: the node doctor (``check``), the MachineConfig generator, the affinity probe."""
