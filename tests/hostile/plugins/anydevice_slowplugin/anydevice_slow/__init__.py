"""Plugins that hang before they declare anything (tests/hostile)."""
