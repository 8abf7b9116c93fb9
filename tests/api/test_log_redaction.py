"""Stream tokens never reach a log line (issue 9 #17): ``agentloop serve`` in a subprocess, its
real uvicorn access log and error logs captured from stderr, in both log formats.

Tokens travel in query strings (``EventSource`` cannot send headers), so every request with one
would print it in full in the access log; a bad token used to be a 500 with a traceback too.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import pytest

from app.api.auth import Authenticator
from app.telemetry.redact import redact
from tests.support.live_server import free_port
from tests.support.serve_process import start_serve, until_up
from tests.support.sse_client import read_all


async def _drive(client: httpx.AsyncClient) -> list[str]:
    """Every way a token reaches the server; returns the tokens used."""
    run = (await client.post("/runs", json={"input": "hi"})).json()
    other = (await client.post("/runs", json={"input": "hi"})).json()
    token, url = run["stream_token"], run["events_url"]
    async with httpx.AsyncClient(base_url=str(client.base_url)) as anon:
        frames = await read_all(anon, url, params={"token": token})
        last = str(frames[-1].id)
        assert (await anon.get(url, params={"token": token},
                               headers={"Last-Event-ID": last})).status_code == 204
        assert (await anon.get(f"{url}?%74oken={token}&after={last}")).status_code == 204
        assert (await anon.get(other["events_url"], params={"token": token})).status_code == 401
        assert (await anon.get(url, params={"token": token + "\u00e9"})).status_code == 401
        assert (await anon.get(url, params={"token": token[:-3]})).status_code == 401
        assert (await anon.get(f"/runs/{run['id']}", params={"token": token})).status_code == 401
        fresh = (await client.get(f"/runs/{run['id']}")).json()["stream_token"]
        resp = await anon.get(url, params={"after": last, "token": fresh})
        assert resp.status_code == 204
    return [token, fresh, other["stream_token"]]


@pytest.mark.parametrize("fmt", ["json", "text"])
async def test_no_token_in_the_access_log_or_any_other_line(fmt: str, tmp_path: Path) -> None:
    port = free_port()
    proc = await start_serve(port, tmp_path, stdout=asyncio.subprocess.PIPE,
                             stderr=asyncio.subprocess.PIPE, AGENTLOOP_API_KEYS="key-a:alpha",
                             AGENTLOOP_LOG_FORMAT=fmt, AGENTLOOP_LOG_LEVEL="INFO",
                             AGENTLOOP_DEFAULT_MODEL="demo:echo",
                             AGENTLOOP_WORKSPACE_ROOT=str(tmp_path / "ws"))
    collected = asyncio.ensure_future(proc.communicate())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10,
                                     headers={"Authorization": "Bearer key-a"}) as client:
            await until_up(client, proc)
            tokens = await _drive(client)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            out, err = await collected
    log = (out + err).decode()
    lines = [line for line in log.splitlines() if "/events" in line]
    assert len(lines) >= 7, log  # the access log is really there
    assert sum("token=[redacted]" in line for line in lines) >= 6, lines
    for token in tokens:
        payload, _, signature = token.partition(".")
        assert token not in log and signature not in log and payload not in log, log
    assert "internal server error" not in log.lower() and "Traceback" not in log, log


def test_redact_scrubs_token_params_and_token_shapes_only() -> None:
    token = Authenticator({"k": "t"}, secret=None, token_ttl=60).issue_token("run_1", "t")
    cases = {
        f'"GET /runs/r/events?token={token}&after=3 HTTP/1.1" 200':
            '"GET /runs/r/events?token=[redacted]&after=3 HTTP/1.1" 200',
        f"GET /x?after=1&%74oken={token[:5]}%2E{token[6:]}": "GET /x?after=1&%74oken=[redacted]",
        "GET /x?Token=abc&token=": "GET /x?Token=[redacted]&token=[redacted]",
        f"bad token {token}!": "bad token [redacted]!",
        "GET /runs?status=queued&limit=2": "GET /runs?status=queued&limit=2",
        "a.b tokens=1 mytoken=2": "a.b tokens=1 mytoken=2",
    }
    for line, want in cases.items():
        assert redact(line) == want, line
