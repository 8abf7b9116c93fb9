"""A/B of the production cell: first event and server CPU per run, this tree against another.

The production path of ``make bench`` (the paced ``https://`` fake model, C runs at once from
two client processes, every run on a new connection), one fresh server per cell from each tree,
the order alternating round by round (A B, B A, …); per tree the median over rounds of each
figure, and the ratio new / base per round::

    .venv/bin/python bench/ab_production.py --base /tmp/base-checkout [--new .] [--redis]
        [--rounds 6] [--runs 200] [--concurrency 50] [--env NAME=VALUE ...]

``--base``: a checkout of the commit to compare against (``git archive <commit> | tar -x -C
<dir>``); both trees run on this virtualenv. ``--env`` sets a variable on both servers (e.g.
``AGENTLOOP_OTEL=false``); ``--new-env`` on the new tree's only (the same tree twice with a
setting on one side measures what the setting costs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _systems, harness
from bench._live import FRAME_MS
from bench._procs import OUT, ROOT, Proc, start_fake
from bench._report import _get
from bench._tls import make_tls

FIGURES = (("first_event_ms", "p50"), ("first_event_ms", "p99"),
           ("server_cpu_ms_per_run", None), ("redis_cpu_ms_per_run", None),
           ("runs_per_s", None))


def _cell(fake: Proc, root: Path, env: dict[str, str], args: argparse.Namespace,
          name: str) -> dict[str, Any]:
    system = "agentloop-redis" if args.redis else "agentloop"
    return harness.measure_cell(
        system, fake, args.runs, args.concurrency, args.warmup, 0, fresh=True,
        client_procs=args.client_procs,
        start=lambda: _systems.start_agentloop(fake, redis=args.redis, name=f"ab-{name}",
                                               root=root, extra_env=env))


def _pairs(values: list[str]) -> dict[str, str]:
    return dict(v.split("=", 1) for v in values)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, required=True, help="the other tree (A)")
    p.add_argument("--new", type=Path, default=ROOT, help="the tree measured (B; default .)")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--client-procs", type=int, default=2)
    p.add_argument("--redis", action="store_true", help="the Redis backend")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--new-env", action="append", default=[], metavar="NAME=VALUE")
    args = p.parse_args(argv)
    common = _pairs(args.env)
    trees = {"base": (args.base.resolve(), common),
             "new": (args.new.resolve(), common | _pairs(args.new_env))}
    fake = start_fake(FRAME_MS, tls=make_tls(OUT / "tls"), name="fake_llm_ab_prod")
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        for rnd in range(args.rounds):
            order = ["base", "new"] if rnd % 2 == 0 else ["new", "base"]
            cells = {}
            for name in order:
                root, env = trees[name]
                cells[name] = cell = _cell(fake, root, env, args, name)
                print(f"round {rnd + 1} {name}: first event {cell['first_event_ms']}, "
                      f"server {cell['server_cpu_ms_per_run']} ms/run (redis "
                      f"{cell['redis_cpu_ms_per_run']}), {cell['runs_per_s']} runs/s, "
                      f"{cell['ok']}/{cell['runs']} ok, load {cell['load_before']}",
                      file=sys.stderr, flush=True)
            rounds.append(cells)
    finally:
        fake.stop()
    print(json.dumps(_summary(rounds), indent=1))


def _summary(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, sub in FIGURES:
        pairs = [(b, n) for r in rounds
                 if (b := _get(r["base"], key, sub)) is not None
                 and (n := _get(r["new"], key, sub)) is not None]
        if not pairs:
            continue
        name = key + (f".{sub}" if sub else "")
        out[name] = {"base_median": statistics.median(b for b, _ in pairs),
                     "new_median": statistics.median(n for _, n in pairs),
                     "ratios": [round(n / b, 3) if b else None for b, n in pairs],
                     "ratio_median": round(statistics.median(n / b for b, n in pairs if b), 3)}
    return out


if __name__ == "__main__":
    main()
