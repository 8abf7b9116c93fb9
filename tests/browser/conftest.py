"""Browser tests: Debian's ``/usr/bin/chromium`` driven by Playwright (from PyPI).

Playwright's own browser download cannot work here (no network beyond loopback), so the launch
names the system executable. The flags keep Chromium off the network it would otherwise try
(component updates, sync, background fetches) and off QUIC; a fresh profile per browser.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

from tests.support.redis_server import redis_server_url, redis_url

__all__ = ["redis_server_url", "redis_url"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
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


def _vite(example: Path, out: Path, *args: str) -> Path:
    """``example`` built by its own pinned Vite into ``out`` (the repo stays clean)."""
    vite = example / "node_modules" / "vite" / "bin" / "vite.js"
    if not vite.is_file():
        pytest.fail(f"{example}/node_modules missing: `make js-deps` installs it")
    subprocess.run(["node", str(vite), "build", *args, "--outDir", str(out), "--emptyOutDir",
                    "--logLevel", "error"], cwd=example, check=True, timeout=300)
    assert (out / "index.html").is_file()
    return out


@pytest.fixture(scope="session")
def ai_sdk_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/ai-sdk-react built once for the session's tests."""
    return _vite(EXAMPLES / "ai-sdk-react", tmp_path_factory.mktemp("ai-sdk-react"))


@pytest.fixture(scope="session")
def ag_ui_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/ag-ui-client's page (web/) built once for the session's tests."""
    return _vite(EXAMPLES / "ag-ui-client", tmp_path_factory.mktemp("ag-ui-client"), "web")
