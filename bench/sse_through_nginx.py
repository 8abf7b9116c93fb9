"""Does the one-line ``: ping`` keep an idle event stream open through a real reverse proxy?

    apt-get install nginx   # not installed by `make`; this is a one-off measurement
    .venv/bin/python bench/sse_through_nginx.py [--idle 8] [--proxy-timeout 2]

Starts the service (memory backend, no worker) and nginx in front of it with
``proxy_read_timeout`` = ``--proxy-timeout`` s and buffering off (the configuration an SSE
deployment uses), opens a run's event stream through nginx, lets it idle for ``--idle`` s,
then appends the run's ``agent_end``. For each ping interval it prints one JSON line: whether
the stream survived the idle period and delivered the end, the pings received, and how long the
stream lasted. A ping interval above the proxy's timeout shows the cut the pings prevent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.api.conftest import serve
from tests.api.test_events import append, end
from tests.support.live_server import free_port
from tests.support.sse_client import open_stream

NGINX_CONF = """
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {dir}; proxy_temp_path {dir}; fastcgi_temp_path {dir};
  uwsgi_temp_path {dir}; scgi_temp_path {dir};
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://127.0.0.1:{upstream};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout {timeout_ms}ms;
    }}
  }}
}}
"""


async def one(ping: float, idle: float, proxy_timeout: float) -> dict[str, object]:
    async with serve(worker=False, sse_ping_seconds=ping) as api:
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            conf = Path(tmp) / "nginx.conf"
            conf.write_text(NGINX_CONF.format(dir=tmp, port=port, upstream=api.server.port,
                                              timeout_ms=round(proxy_timeout * 1000)))
            nginx = await asyncio.create_subprocess_exec(
                shutil.which("nginx") or "nginx", "-c", str(conf), "-g", "daemon off;")
            try:
                return await _measure(api, f"http://127.0.0.1:{port}", ping, idle)
            finally:
                nginx.terminate()
                await nginx.wait()


async def _measure(api, proxy_url: str, ping: float, idle: float) -> dict[str, object]:
    async with httpx.AsyncClient(base_url=proxy_url) as client:
        for _ in range(100):  # nginx is up once it answers
            try:
                await client.get("/healthz")
                break
            except httpx.TransportError:
                await asyncio.sleep(0.05)
        run = await api.create()
        started, ids = time.monotonic(), []
        async with open_stream(client, run["events_url"]) as stream:
            try:
                async for frame in stream:
                    ids.append(frame.id)
                    if len(ids) == 1:
                        await asyncio.sleep(idle)
                        await append(api, run["id"], end())
            except httpx.HTTPError as exc:
                ids.append(f"cut: {type(exc).__name__}")
        return {"ping_interval_s": min(ping, 5.0), "delivered": ids,
                "survived": ids[-1:] == [2], "pings": stream.comments.count("ping"),
                "lasted_s": round(time.monotonic() - started, 2)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=float, default=8.0)
    parser.add_argument("--proxy-timeout", type=float, default=2.0)
    args = parser.parse_args()
    for ping in (1.0, 15.0):
        result = await one(ping, args.idle, args.proxy_timeout)
        print(json.dumps({"proxy": "nginx", "proxy_read_timeout_s": args.proxy_timeout,
                          "idle_s": args.idle, **result}))


if __name__ == "__main__":
    asyncio.run(main())
