"""Integrations with other engines (Ray Train); each behind an extra."""
