"""A/B of the live-streams step: server CPU per delivered frame, this tree against another.

On a shared, busy machine absolute figures drift with the load; ratios of runs taken
alternately do not. Each round runs one live-streams step (``bench/_live.py``: N runs
streaming ~30 frames/s to their own SSE clients over the paced https fake model) on a fresh
server from each tree, the order alternating round by round (A B, B A, A B, …), and reports
per tree the median µs of server CPU per frame and the ratio new / base per round::

    .venv/bin/python bench/ab_live.py --base /tmp/base-checkout --rounds 5 --streams 200
    .venv/bin/python bench/ab_live.py --base /tmp/base-checkout --redis

``--base``: a checkout of the commit to compare against (``git archive <commit> | tar -x -C
DIR``), ``--new`` the one measured (this checkout by default; a snapshot keeps edits made
meanwhile out); both trees run on this virtualenv.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _live, _systems
from bench._procs import OUT, ROOT, Proc, start_fake
from bench._tls import make_tls


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, required=True, help="the other tree (A)")
    p.add_argument("--new", type=Path, default=ROOT,
                   help="the tree measured against it (B; default this checkout)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--streams", type=int, default=200)
    p.add_argument("--redis", action="store_true", help="the Redis backend")
    args = p.parse_args(argv)
    trees = {"base": args.base.resolve(), "new": args.new.resolve()}
    fake = _live_fake()

    def start(root: Path) -> Callable[[], Proc]:
        return lambda: _systems.start_agentloop(
            fake, redis=args.redis, name=f"ab-{root.name}", root=root,
            extra_env={"AGENTLOOP_WORKER_CONCURRENCY": "5000"})

    def say(rnd: int, name: str, r: dict[str, Any]) -> None:
        print(f"round {rnd} {name}: {r['server_us_per_frame']} µs/frame "
              f"(+redis {r['with_redis_us_per_frame']}), {r['frames_per_s']} frames/s, "
              f"lag p50 {r['lag_ms']['p50']} ms, load {r['load_avg']}", flush=True)

    try:
        rows = _live.interleaved({name: start(root) for name, root in trees.items()},
                                 args.rounds, args.streams,
                                 ("server_us_per_frame", "with_redis_us_per_frame",
                                  "frames_per_s", "live", "lag_ms", "load_avg", "errors"), say)
    finally:
        fake.stop()
    print(json.dumps(_summary(rows), indent=1))


def _live_fake() -> Any:
    return start_fake(_live.FRAME_MS, tls=make_tls(OUT / "tls"), name="fake_llm_ab")


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": rows}
    for key in ("server_us_per_frame", "with_redis_us_per_frame"):
        pairs = [(r["base"][key], r["new"][key]) for r in rows if r["base"][key] and r["new"][key]]
        if not pairs:
            continue
        out[key] = {"base_median": statistics.median(b for b, _ in pairs),
                    "new_median": statistics.median(n for _, n in pairs),
                    "ratios": [round(n / b, 3) for b, n in pairs],
                    "ratio_median": round(statistics.median(n / b for b, n in pairs), 3)}
    return out


if __name__ == "__main__":
    main()
