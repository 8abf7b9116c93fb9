"""A throw-away ``redis-server`` on loopback for tests (never 127.0.0.1:6379 db 0).

``AGENTLOOP_TEST_REDIS_URL`` points the tests at an existing Redis instead (it is flushed before
every test, so give it a database of its own; under pytest-xdist worker ``gwN`` uses the URL's
database plus N). Otherwise one server per session (per xdist worker: they never share one, so
no worker's flush or notes reach another's) is started on a free port in a temp dir, without
persistence, and stopped at the end. ``RedisServer`` is also
used directly by tests that kill and restart their own server.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server process; ``start``/``stop`` may be repeated on the same port."""

    def __init__(self, port: int | None = None, *, persist: bool = False) -> None:
        self.port = port or free_port()
        self.persist = persist
        """With AOF fsync'ed on every write, so a killed server restarts with its data."""
        self.dir = tempfile.mkdtemp(prefix="agentloop-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.persist else "no", "--appendfsync", "always",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 5
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        client.close()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _check_not_shared(url: str) -> None:
    parts = urlsplit(url)
    db = (parts.path or "/0").strip("/") or "0"
    if parts.port in (None, 6379) and db == "0":
        raise RuntimeError("refusing to flush the machine's Redis (port 6379, db 0)")


def _worker_database(url: str) -> str:
    """``url`` with its database moved up by this xdist worker's number (``gw1``: +1)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    db = int((parts.path or "/0").strip("/") or "0") + int(worker[2:])
    return parts._replace(path=f"/{db}").geturl()


@pytest.fixture(scope="session")
def redis_server_url() -> Iterator[str]:
    """The session's Redis URL."""
    url = os.environ.get("AGENTLOOP_TEST_REDIS_URL")
    if url:
        url = _worker_database(url)
        _check_not_shared(url)
        yield url
        return
    server = RedisServer()
    server.start()
    try:
        yield server.url
    finally:
        server.cleanup()


@pytest.fixture
def redis_url(redis_server_url: str) -> str:
    """The session's Redis, flushed for this test."""
    client = redis.Redis.from_url(redis_server_url)
    client.flushdb()
    client.close()
    return redis_server_url
