"""CPU to build one event batch's APPEND call on Redis: its keys and arguments
(``RedisBackend._append_call``) and the RESP bytes of the EVALSHA (``redis_lean_scripts.evalsha``).

A live run on Redis writes one batch per model frame, so this runs once per frame; no I/O is
timed. 400 runs are written in turn, each batch with its own token, as a busy process does.
With ``--base`` the same is timed in another checkout's code (in a subprocess on this
virtualenv), the two alternating; each figure is the best of 7 repeats::

    .venv/bin/python bench/append_call.py [--base <checkout>] [--rounds 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BODY = (b'{"run_id":"run_01JABCDEFGHJKMNPQRSTVWXYZ12","ts":"2026-12-05T12:00:00.000Z",'
        b'"type":"text_delta","delta":"hello","depth":0}')
RUNS = 400


def measure(root: Path) -> float:
    """µs per batch in ``root``'s code (imported here: run in a process of its own)."""
    sys.path.insert(0, str(root))
    from app.store.records import EventBatch
    from app.store.redis.backend import RedisBackend
    from app.store.redis.keys import NOTIFY_CHANNEL
    from app.store.redis.lean_scripts import evalsha

    backend = RedisBackend.__new__(RedisBackend)  # no connections: only the call is built
    backend._nodes = None
    vars(backend).setdefault("_append_to", {})
    assert backend._channel("r") == NOTIFY_CHANNEL
    runs = [f"run_01JABCDEFGHJKMNPQRSTV{n:05d}" for n in range(RUNS)]
    tokens = itertools.count()
    sha = "a" * 40

    def batches() -> None:
        for run in runs:
            batch = EventBatch(events=[("text_delta", BODY)], token=f"3:{next(tokens)}")
            run_keys, args = backend._append_call(run, 3, batch)
            evalsha(sha, run_keys, args)

    best = min(timeit.repeat(batches, number=50, repeat=7))
    return round(best / (50 * RUNS) * 1e6, 2)


def _in_process(root: Path) -> float:
    out = subprocess.run([sys.executable, __file__, "--measure", str(root)], check=True,
                         capture_output=True, text=True).stdout
    return float(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, help="another checkout, timed alternately")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure is not None:
        print(measure(args.measure))
        return
    trees = {"this": ROOT} | ({"base": args.base.resolve()} if args.base else {})
    seen: dict[str, list[float]] = {name: [] for name in trees}
    for rnd in range(args.rounds):
        order = list(trees) if rnd % 2 == 0 else list(reversed(trees))
        for name in order:
            seen[name].append(_in_process(trees[name]))
        print(json.dumps({"round": rnd + 1} | {n: v[-1] for n, v in seen.items()}), flush=True)
    summary = {name: min(values) for name, values in seen.items()}
    if "base" in summary:
        summary["ratio"] = round(summary["this"] / summary["base"], 3)
    print(json.dumps({"us_per_batch": summary}))


if __name__ == "__main__":
    main()
