"""What a ``/metrics`` scrape costs under ``agentloop serve --processes N`` once many processes
have exited (a crash loop), with their files left as they were and once folded
(``app.telemetry.multiprocess``)::

    .venv/bin/python bench/metrics_scrape.py [--exited 1000] [--rounds 7]

One real process counts into a fresh shared directory the way a child does (runs, tokens,
latencies, the queue depth) and exits; its files are copied under ``--exited`` other pids, as
that many more exited processes would leave them (after the supervisor's
``mark_process_dead``).
Prints the median time of ``metrics_response`` over the directory (what a child's event loop
spends per scrape) before and after the supervisor folds them, and how many files each time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client.multiprocess import mark_process_dead  # noqa: E402

from app.telemetry.metrics import metrics_response  # noqa: E402
from app.telemetry.multiprocess import fold_exited  # noqa: E402

_CHILD = """
from app.telemetry import metrics as m
m.RUNS_CREATED.inc(3)
m.RUNS_ENDED.labels("completed", "stop").inc(3)
m.PROVIDER_LATENCY.labels("openai").observe(1.5)
m.PROVIDER_FIRST_BYTE.labels("openai").observe(0.1)
m.TOOL_LATENCY.labels("unknown", "ok").observe(0.2)
m.TOKENS.labels("input", "openai", "gpt").inc(50)
m.QUEUE_DEPTH.labels("steer").inc(0)
m.ACTIVE_RUNS.inc(1)
"""
FIRST_PID = 10_000_000
"""Made-up pids of the exited processes (above any real one)."""


def _scrape_ms(path: str, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        metrics_response(path)
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 2)


def measure(exited: int, rounds: int) -> dict[str, object]:
    """The scrape's median ms and file count with ``exited`` processes' files, then folded."""
    path = tempfile.mkdtemp(prefix="metrics-scrape-")
    try:
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": path, "PYTHONPATH": str(ROOT)}
        child = subprocess.run([sys.executable, "-c", _CHILD], env=env, check=True)
        assert child.returncode == 0
        [counter] = Path(path).glob("counter_*.db")
        pid = counter.name.removeprefix("counter_").removesuffix(".db")
        files = list(Path(path).glob(f"*_{pid}.db"))
        for n in range(exited):
            for f in files:
                shutil.copy(f, f.with_name(f.name.replace(pid, str(FIRST_PID + n))))
        pids = [int(pid), *(FIRST_PID + n for n in range(exited))]  # it has exited too
        for one in pids:
            mark_process_dead(one, path)  # type: ignore[no-untyped-call]
        before = {"files": len(list(Path(path).glob("*.db"))), "ms": _scrape_ms(path, rounds)}
        start = time.perf_counter()
        for one in pids:
            fold_exited(path, one)
        fold_ms = (time.perf_counter() - start) * 1000 / len(pids)
        after = {"files": len(list(Path(path).glob("*.db"))), "ms": _scrape_ms(path, rounds)}
        return {"exited": exited, "left_as_they_were": before, "folded": after,
                "fold_ms_each": round(fold_ms, 3)}
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exited", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.exited, args.rounds), indent=1))


if __name__ == "__main__":
    main()
