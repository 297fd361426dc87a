"""The click command line and its views."""
