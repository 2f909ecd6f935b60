"""Test-support code: helpers shared by tests (never imported by the package)."""
