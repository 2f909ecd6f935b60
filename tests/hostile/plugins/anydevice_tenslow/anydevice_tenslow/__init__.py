"""Ten slow plugins (tests/hostile)."""
