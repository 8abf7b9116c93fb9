"""Which transport for ``https://`` providers: client CPU per streamed model call.

``.venv/bin/python bench/transports.py [--calls 300] [--concurrency 20]`` prints one JSON line.

The same Chat Completions stream (``bench/fake_llm.py``'s script: 40 text deltas and usage,
frames ``DELAY_MS`` apart so each arrives on its own) is read through ``OpenAIChatProvider`` by
this process with each candidate client, over TLS on loopback, the CA trusted through
``SSL_CERT_FILE`` as in production:

- ``lean-http1``: agentloop's lean HTTP/1.1 transport (the default);
- ``httpcore-http1``: httpx's default transport, HTTP/1.1;
- ``httpcore-http2``: httpx's default transport with ``http2=True`` against an h2 server
  (``bench/fake_h2.py``): many streams share one connection.

Figures: this process's CPU (user+system) per call and per frame, medians of ``--rounds``
interleaved rounds, and the connections the servers accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._procs import OUT, ROOT, Proc, free_port, start, start_fake
from bench._tls import TLSFiles, client_context, make_tls
from providers._http import RetryPolicy
from providers._routing import provider_client
from providers.base import ModelRequest
from providers.messages import UserMessage
from providers.openai import OpenAIChatProvider

DELAY_MS = 2.0
FRAMES = 43  # 40 deltas, finish, usage, [DONE]


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _calls(client: httpx.AsyncClient, base: str, calls: int, concurrency: int) -> float:
    provider = OpenAIChatProvider(client=client, base_url=base + "/v1", api_key="x",
                                  retry=RetryPolicy(attempts=2))
    request = ModelRequest(model="fake-model", messages=[UserMessage(content="hi")])
    todo = iter(range(calls))

    async def worker() -> None:
        for _ in todo:
            async for event in provider.stream(request):
                if event.type == "error":
                    raise RuntimeError(event.error_message)

    start = _cpu()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return _cpu() - start


def _client(kind: str, ca: Path) -> httpx.AsyncClient:
    env = {"SSL_CERT_FILE": str(ca)}
    if kind == "lean-http1":
        return provider_client(env, http2=False, timeout=httpx.Timeout(30), max_connections=500)
    return httpx.AsyncClient(http2=kind == "httpcore-http2", timeout=httpx.Timeout(30),
                             verify=client_context(TLSFiles(ca, ca, ca)),
                             limits=httpx.Limits(max_connections=500), trust_env=False)


def _start_h2(tls: TLSFiles) -> Proc:
    port = free_port()
    proc = start("fake_h2", [sys.executable, str(ROOT / "bench" / "fake_h2.py"), "--port",
                             str(port), "--tls-cert", str(tls.cert), "--tls-key", str(tls.key),
                             "--delay-ms", str(DELAY_MS)], port)
    proc.ca = tls.ca
    for _ in range(100):
        if b"listening" in proc.log.read_bytes():
            return proc
        time.sleep(0.1)
    proc.stop()
    raise RuntimeError(f"fake_h2 did not start:\n{proc.log_tail()}")


async def _round(kind: str, base: str, ca: Path, calls: int, concurrency: int
                 ) -> tuple[float, str]:
    async with _client(kind, ca) as client:
        probe = await client.get(base + "/v1/models")  # which protocol was negotiated
        await _calls(client, base, concurrency, concurrency)  # warm-up: the pool fills
        return await _calls(client, base, calls, concurrency), probe.http_version


def measure(calls: int, concurrency: int, rounds: int) -> dict[str, Any]:
    tls = make_tls(OUT / "tls")
    h1 = start_fake(DELAY_MS, tls=tls, name="fake_llm_transports")
    h2 = _start_h2(tls)
    try:
        bases = {"lean-http1": h1.url, "httpcore-http1": h1.url, "httpcore-http2": h2.url}
        cpu: dict[str, list[float]] = {k: [] for k in bases}
        versions: dict[str, str] = {}
        for _ in range(rounds):
            for kind, base in bases.items():
                spent, versions[kind] = asyncio.run(_round(kind, base, tls.ca, calls,
                                                           concurrency))
                cpu[kind].append(spent)
        out: dict[str, Any] = {"bench": "transports", "calls": calls,
                               "concurrency": concurrency, "frame_delay_ms": DELAY_MS,
                               "load_avg": round(os.getloadavg()[0], 2)}
        for kind, values in cpu.items():
            per_call = statistics.median(values) / calls
            out[kind] = {"http_version": versions[kind],
                         "client_cpu_ms_per_call": round(per_call * 1000, 3),
                         "client_cpu_us_per_frame": round(per_call / FRAMES * 1e6, 1),
                         "rounds_ms_per_call": [round(v / calls * 1000, 3) for v in values]}
        return out
    finally:
        h1.stop()
        h2.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    print(json.dumps(measure(args.calls, args.concurrency, args.rounds)))


if __name__ == "__main__":
    main()
