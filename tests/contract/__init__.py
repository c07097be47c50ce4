"""Contract tests: the same behaviours against every backend (see behaviours.py)."""
