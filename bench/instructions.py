"""Instructions per production run, counted by callgrind: a figure that repeats to ~0.1 %
where CPU seconds on this shared machine spread ±15–30 % round to round.

    .venv/bin/python bench/instructions.py [--base DIR] [--redis] [--split] [--floor]
        [--runs 40] [--concurrency 3]

Each server (this tree's ``agentloop serve``; ``--base``: another checkout's too, run on this
virtualenv) starts under ``valgrind --tool=callgrind`` with counting off, serves 10 runs to
warm up, then counts the user-space instructions of its own process over ``--runs`` runs of
the production workload: the https fake model pacing frames 33 ms apart, C runs at once, each
on a new client connection (``POST /runs``, then its SSE stream to ``agent_end``), a tool call
and then the answer. Not counted: the kernel (socket writes, TLS is in user space and counts),
redis-server, the client, the fake model; so this is the figure for changes to our own code,
and CPU seconds (``make bench``) stay the figure for the service as a whole.

``--split`` measures every server at answers of 0 and 80 text deltas as well as the
production run's 40 and prints what a run costs without its text (``fixed``: requests, run
start and end, two model calls, the tool, the tool call's frames) and what each further text
delta adds (``per_frame``). ``--floor`` adds ``bench/relay_floor.py`` doing the same run. Each
server takes ~30 s; nothing else on the machine changes the counts, only what the Python code
does (hash seeds are fixed; what differs between rounds is timing: which loop turn a frame
lands in, garbage collections).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._live import FRAME_MS
from bench._procs import OUT, ROOT, Proc, free_port, start, start_fake, start_redis, wait_http
from bench._systems import agentloop_argv, agentloop_env
from bench._tls import make_tls
from bench._workload import RUN_BODY, RunFn, Workload, agentloop_run, drive

WARMUP = 10
PRODUCTION_DELTAS = 40
SPLIT_DELTAS = (0, 80)


@dataclass(frozen=True)
class Target:
    """One server to count: a tree's ``agentloop serve`` or the relay floor."""

    label: str
    root: Path
    floor: bool = False


def run_body(deltas: int) -> dict[str, Any]:
    """The production run with an answer of ``deltas`` text deltas (the fake's ``answer=N``)."""
    return {**RUN_BODY, "input": f"{RUN_BODY['input']} answer={deltas}"}


def totals(out_prefix: Path) -> int:
    """The instructions in every file callgrind wrote under ``out_prefix`` (the dump taken
    while counting and the one at exit, whose count is only what ran after counting
    stopped: none)."""
    total = 0
    for path in out_prefix.parent.glob(out_prefix.name + "*"):
        found = [line for line in path.read_text(errors="replace").splitlines()
                 if line.startswith("totals:")]  # the last line of a whole dump
        total += int(found[-1].split()[1]) if found else 0
    return total


def server_argv(target: Target, port: int, fake: Proc) -> list[str]:
    """How ``target`` is started (not under valgrind: the caller adds that)."""
    if target.floor:
        return [sys.executable, str(ROOT / "bench" / "relay_floor.py"), "serve", "--port",
                str(port), "--model", fake.url + "/v1"]
    return agentloop_argv(port, target.root)


@dataclass(frozen=True)
class Served:
    """A warmed-up server (``warmed_up``) and what ``runs`` drives it with."""

    server: Proc
    port: int
    run_fn: RunFn
    concurrency: int
    backend: str

    def runs(self, n: int) -> Workload:
        """``n`` runs of the workload, ``concurrency`` at a time."""
        return asyncio.run(drive(self.run_fn, self.port, n, self.concurrency, run_timeout=300,
                                 total_timeout=3600))


@contextlib.contextmanager
def warmed_up(target: Target, fake: Proc, deltas: int, concurrency: int, *, redis: bool,
              name: str, prefix: Sequence[str] = ()) -> Iterator[Served]:
    """``target`` started (its argv after ``prefix``: a tool to run it under), with a fresh
    redis-server when ``redis``, answering ``deltas`` text deltas per run, warmed up by
    ``WARMUP`` runs; both stopped on leaving."""
    env = agentloop_env(fake, target.root) | {"PYTHONHASHSEED": "0"}
    redis_proc = start_redis() if redis and not target.floor else None
    if redis_proc is not None:
        env["AGENTLOOP_REDIS_URL"] = f"redis://127.0.0.1:{redis_proc.port}/0"
    port = free_port()
    server = start(f"{name}-{target.label}", [*prefix, *server_argv(target, port, fake)], port,
                   env=env, cwd=target.root)
    try:
        wait_http(server, "/healthz", 300)
        run_fn = functools.partial(agentloop_run, body=run_body(deltas))
        asyncio.run(drive(run_fn, port, WARMUP, min(WARMUP, concurrency)))
        yield Served(server, port, run_fn, concurrency,
                     "redis" if redis_proc is not None else "memory")
    finally:
        server.stop()
        if redis_proc is not None:
            redis_proc.stop()


def outcome(work: Workload) -> dict[str, Any]:
    """Runs that completed and the first few errors of the others."""
    return {"ok": sum(r.ok for r in work.records),
            "errors": sorted({r.error for r in work.records if r.error})[:3]}


def count(target: Target, fake: Proc, deltas: int, runs: int, concurrency: int, *,
          redis: bool) -> dict[str, Any]:
    """Start ``target`` under callgrind, warm it up, count ``runs`` runs; stop it."""
    tmp = Path(tempfile.mkdtemp(prefix="callgrind-", dir=OUT))
    prefix = tmp / "out"
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                f"--callgrind-out-file={prefix}"]
    try:
        with warmed_up(target, fake, deltas, concurrency, redis=redis, name="callgrind",
                       prefix=valgrind) as served:
            _control(served.server, "-i", "on")
            work = served.runs(runs)
            _control(served.server, "-i", "off")
            _control(served.server, "-d")
            _await_dump(prefix)
        instructions = totals(prefix)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    done = outcome(work)
    return {"target": target.label, "deltas": deltas, "runs": runs, **done,
            "instructions_per_run": round(instructions / max(done["ok"], 1)),
            "backend": served.backend}


def _await_dump(prefix: Path, timeout: float = 60.0) -> None:
    """The dump ``callgrind_control -d`` asked for is written at valgrind's next scheduling
    point, not before the command returns: wait until its totals are in a file."""
    deadline = time.monotonic() + timeout
    while totals(prefix) == 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"callgrind wrote no dump under {prefix.parent}")
        time.sleep(0.2)


def _control(server: Proc, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(server.popen.pid)], check=True,
                   capture_output=True, timeout=120)


def split(rows: list[dict[str, Any]], label: str) -> dict[str, Any]:
    """Fixed and per-frame instructions of ``label`` from its counts at 0 and 80 deltas."""
    by = {r["deltas"]: r["instructions_per_run"] for r in rows if r["target"] == label}
    lo, hi = SPLIT_DELTAS
    per_frame = (by[hi] - by[lo]) / (hi - lo)
    return {"target": label, "fixed_M": round(by[lo] / 1e6, 2),
            "per_frame_k": round(per_frame / 1e3, 1),
            "production_M": round(by.get(PRODUCTION_DELTAS, 0) / 1e6, 2)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, help="another checkout to count against this one")
    p.add_argument("--redis", action="store_true", help="the Redis backend (not counted)")
    p.add_argument("--split", action="store_true",
                   help="also at 0 and 80 text deltas: fixed and per-frame parts")
    p.add_argument("--floor", action="store_true", help="bench/relay_floor.py too")
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--concurrency", type=int, default=3)
    args = p.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        p.error("valgrind (with callgrind_control) is not installed")
    targets = [Target("new", ROOT)]
    if args.base is not None:
        targets.insert(0, Target("base", args.base.resolve()))
    if args.floor:
        targets.append(Target("relay-floor", ROOT, floor=True))
    sizes = [PRODUCTION_DELTAS, *(SPLIT_DELTAS if args.split else ())]
    fake = start_fake(FRAME_MS, tls=make_tls(OUT / "tls"), name="fake_llm_instructions")
    rows = []
    try:
        for deltas in sizes:
            for target in targets:
                rows.append(count(target, fake, deltas, args.runs, args.concurrency,
                                  redis=args.redis))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        fake.stop()
    summary: dict[str, Any] = {
        t.label: round(next(r["instructions_per_run"] for r in rows if r["target"] == t.label
                            and r["deltas"] == PRODUCTION_DELTAS) / 1e6, 3) for t in targets}
    summary = {"M_instructions_per_run": summary}
    if args.base is not None:
        summary["new/base"] = round(summary["M_instructions_per_run"]["new"]
                                    / summary["M_instructions_per_run"]["base"], 4)
    if args.split:
        summary["split"] = [split(rows, t.label) for t in targets]
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
