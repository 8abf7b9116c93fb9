"""redis-server CPU per APPEND script call: this tree's script against another checkout's.

A live run on Redis runs the APPEND script once per model frame (``app/store/redis/scripts.py``),
so its cost inside redis-server is part of every frame's. This loads each tree's script into
one fresh redis-server, writes ``--calls`` one-event batches with it (a text delta, a token
each, spread over 300 runs, pipelined ``PIPELINE`` at a time), with one subscriber draining
the notes as each agentloop process does, and reads redis-server's own CPU time before and
after (``/proc/<pid>/schedstat``: nanoseconds, where ``/proc/<pid>/stat`` counts 10 ms
ticks). The trees alternate round by round; the figure is the median over rounds::

    .venv/bin/python bench/append_script.py --base <checkout> [--rounds 7] [--calls 30000]

Not timed: the client, the network path's cost in the kernel beyond redis-server's own
syscalls. Both scripts must leave the same log and the same seqs (checked after each round).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import threading
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import ROOT, start_redis

RUNS = 300
PIPELINE = 50
BODY = (b'{"run_id":"run_01JABCDEFGHJKMNPQRSTVWXYZ12","ts":"2026-12-05T12:00:00.000Z",'
        b'"type":"message_update","assistant_message_event":{"type":"text_delta",'
        b'"content_index":0,"delta":" hello"},"depth":0}')
CHANNEL = "al:notify"


def script_of(root: Path) -> str:
    """The APPEND script of the tree at ``root`` (the module holds only strings)."""
    spec = importlib.util.spec_from_file_location(f"scripts_{abs(hash(root))}",
                                                  root / "app" / "store" / "redis" / "scripts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.APPEND)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def _keys(run: int) -> list[str]:
    tag = f"al:{{run_{run}}}"
    return [f"{tag}:run", f"{tag}:events", f"{tag}:ckpt", f"{tag}:inflight:steer",
            f"{tag}:inflight:follow_up"]


def one_round(client: redis.Redis, pid: int, sha: str, calls: int) -> tuple[float, list[int]]:
    """µs of redis-server CPU per call, and each run's last seq after the round."""
    for run in range(RUNS):
        keys = _keys(run)
        client.delete(*keys)
        client.hset(keys[0], mapping={"status": '"running"', "attempt": "1", "last_seq": "1",
                                      "token": "1:0"})
    before = cpu_seconds(pid)
    pipe = client.pipeline(transaction=False)
    for n in range(calls):
        run = n % RUNS
        pipe.evalsha(sha, 5, *_keys(run), "1", f"1:{n + 1}", 1, 0, 0, 0, CHANNEL,
                     f"e:run_{run}", "message_update", BODY)
        if len(pipe) == PIPELINE:
            pipe.execute()
    pipe.execute()
    spent = cpu_seconds(pid) - before
    seqs = [int(client.hget(_keys(run)[0], "last_seq") or 0) for run in range(RUNS)]
    return spent / calls * 1e6, seqs


def measure(trees: dict[str, Path], rounds: int, calls: int) -> dict[str, object]:
    server = start_redis()
    stop = threading.Event()
    drainer: threading.Thread | None = None
    closing: list[Any] = []
    try:
        client = redis.Redis(port=server.port)
        pubsub = redis.Redis(port=server.port).pubsub()  # type: ignore[no-untyped-call]
        closing += [pubsub, client]
        pubsub.subscribe(CHANNEL)

        def drain() -> None:
            while not stop.is_set():
                pubsub.get_message(timeout=0.05)

        drainer = threading.Thread(target=drain, daemon=True)
        drainer.start()
        pid = server.popen.pid
        shas = {name: client.script_load(script_of(root)) for name, root in trees.items()}
        seen: dict[str, list[float]] = {name: [] for name in trees}
        for rnd in range(rounds):
            order = list(trees) if rnd % 2 == 0 else list(reversed(trees))
            finals = set()
            for name in order:
                us, seqs = one_round(client, pid, shas[name], calls)
                seen[name].append(round(us, 2))
                finals.add(tuple(seqs))
            if len(finals) != 1:
                raise RuntimeError("the scripts left different seqs")
            print(json.dumps({"round": rnd + 1} | {n: v[-1] for n, v in seen.items()}),
                  flush=True)
        summary: dict[str, object] = {name: statistics.median(v) for name, v in seen.items()}
        if "base" in summary:
            summary["ratio"] = round(statistics.median(
                t / b for t, b in zip(seen["this"], seen["base"], strict=True)), 3)
        return summary
    finally:
        stop.set()
        if drainer is not None:
            drainer.join(timeout=10)  # before its connection and the server go
        for connection in closing:
            connection.close()
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, help="another checkout, measured alternately")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=30_000)
    args = p.parse_args()
    trees = {"this": ROOT} | ({"base": args.base.resolve()} if args.base else {})
    print(json.dumps({"redis_us_per_call": measure(trees, args.rounds, args.calls)}))


if __name__ == "__main__":
    main()
