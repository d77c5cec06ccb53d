"""Soak of the real ``tiercompact serve`` process (tests/soak/harness.py)."""
