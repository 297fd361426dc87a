"""What the systemd units run: watch links and units, the sync, the settle."""
