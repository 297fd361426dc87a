"""Fake nodes for the quick start, the demo and the tests."""
