"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.metrics_server import MetricsPeer


@pytest.fixture
def peer() -> Iterator[MetricsPeer]:
    """A fake vLLM/sglang server on loopback (``metrics_server``), ended after the test."""
    running = MetricsPeer()
    try:
        yield running
    finally:
        running.close()
