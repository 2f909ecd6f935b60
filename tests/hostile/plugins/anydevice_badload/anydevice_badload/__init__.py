"""Available devices whose plugin breaks after selection (tests/hostile/test_plugins.py)."""
