"""Shared test helpers (tests.support.*)."""
