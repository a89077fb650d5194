"""Conformance with the recorded behaviour of agent-coord (tests/fixtures/conformance)."""
