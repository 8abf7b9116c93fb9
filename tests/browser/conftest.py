"""Browser tests: Debian's ``/usr/bin/chromium`` driven by Playwright (from PyPI).

Playwright's own browser download cannot work here (no network beyond loopback), so the launch
names the system executable. The flags keep Chromium off the network it would otherwise try
(component updates, sync, background fetches) and off QUIC; a fresh profile per browser.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

from tests.support.redis_server import redis_server_url, redis_url

__all__ = ["redis_server_url", "redis_url"]

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """A headless Chromium for one test (the machine's own, never a download)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail("Debian's chromium is missing: make test installs it (system-deps.sh)")
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                            args=FLAGS)
        try:
            yield launched
        finally:
            await launched.close()
