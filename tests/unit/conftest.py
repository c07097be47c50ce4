"""Unit tests: pure, no database fixtures (tests/conftest.py's fixtures are never requested here)."""
