"""Fixtures shared by the wire tests: a scripted loopback server per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.providers.attachment_support import host, public_localhost, tls
from tests.support.wire_server import WireServer

__all__ = ["host", "public_localhost", "tls"]


@pytest.fixture
async def server() -> AsyncIterator[WireServer]:
    """A fresh ``WireServer`` (script its replies, read its recorded requests)."""
    async with WireServer() as srv:
        yield srv
