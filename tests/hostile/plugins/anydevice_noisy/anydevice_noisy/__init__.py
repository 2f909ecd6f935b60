"""Plugins that write to stdout and give hostile text (tests/hostile/test_plugins.py)."""
