"""The front ends: the OCI hook, the NRI plugin, the systemd units' commands, the click CLI."""
