"""Plugins that call back into the registry or hang in a probe hook (tests/hostile)."""
