"""CPU per Redis note in the notify listener: redis-py's pub/sub against the lean reader
(``app/store/redis/notes_reader.py``), interleaved round by round.

A throw-away redis-server; a publisher subprocess sends ``--notes`` notes shaped like a text
delta's (one event per note, as a live stream writes them) in pipelines of 50; this process
listens with a ``Notifier`` (every note parsed and dispatched, as in the service) and measures its
own CPU time from the first note to the last. Prints µs of listener CPU per note per round and
the medians::

    .venv/bin/python bench/notes_reader.py --notes 20000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from redis.asyncio import Redis

from app.store.redis import notify as redis_notify
from app.store.redis.keys import NOTIFY_CHANNEL
from bench._procs import start_redis

_PUBLISH = """
import sys, redis
r = redis.Redis.from_url(sys.argv[1]); n = int(sys.argv[2]); ch = sys.argv[3]
body = b'{"seq":%d,"run_id":"run_x","ts":"2026-01-01T00:00:00.000Z","type":"message_update",' \\
       b'"delta":{"type":"text_delta","text":"hello there"},"depth":0}'
p = r.pipeline(transaction=False)
for i in range(1, n + 1):
    p.publish(ch, b"e:run_x:%d:%d\\n%d\\tmessage_update\\t" % (i, i, i) + body % i)
    if i % 50 == 0:
        p.execute()
p.execute()
"""


async def _round(url: str, notes: int, lean: bool) -> float:
    redis_notify.LEAN_READER = lean
    client = Redis.from_url(url)

    async def no_cancel(_: str) -> bool:
        return False

    notifier = redis_notify.Notifier(client, no_cancel)
    seen = 0
    done = asyncio.Event()
    start = [0.0]
    original = notifier._note

    def counting(data: bytes) -> None:
        nonlocal seen
        if seen == 0:
            start[0] = time.process_time()
        original(data)
        seen += 1
        if seen == notes:
            done.set()

    notifier._note = counting  # type: ignore[method-assign]
    try:
        await notifier.ensure_started()
        notifier.watch("run_x")  # its batches kept and parsed, as for a tailed run
        pub = await asyncio.create_subprocess_exec(sys.executable, "-c", _PUBLISH, url,
                                                   str(notes), NOTIFY_CHANNEL)
        await asyncio.wait_for(done.wait(), 300)
        cpu = time.process_time() - start[0]
        await pub.wait()
        return cpu / notes * 1e6
    finally:
        await notifier.close()
        await client.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--notes", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    server = start_redis()
    url = f"redis://127.0.0.1:{server.port}/0"
    out: dict[str, list[float]] = {"pubsub": [], "lean": []}
    try:
        for rnd in range(args.rounds):
            order = [False, True] if rnd % 2 == 0 else [True, False]
            for lean in order:
                us = asyncio.run(_round(url, args.notes, lean))
                out["lean" if lean else "pubsub"].append(round(us, 2))
                print(f"round {rnd + 1} {'lean' if lean else 'pubsub'}: {us:.2f} µs/note",
                      flush=True)
    finally:
        server.stop()
    ratios = [round(n / b, 3) for b, n in zip(out["pubsub"], out["lean"], strict=True)]
    print(json.dumps({"us_per_note": out, "median": {k: statistics.median(v)
                                                     for k, v in out.items()},
                      "ratios_lean_over_pubsub": ratios,
                      "ratio_median": statistics.median(ratios)}))


if __name__ == "__main__":
    main()
