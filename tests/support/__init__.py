"""Test-support helpers: real loopback servers and small, real, deterministic test content."""
