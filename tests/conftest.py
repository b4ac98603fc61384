"""Shared fixtures: the fake NVML library (built from C by the session) and friends."""

pytest_plugins = ["tests.fakenvml.plugin"]
