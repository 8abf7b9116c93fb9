"""System calls per production run and per text delta of a server's own process, counted by
``strace -c``: the kernel side that ``bench/instructions.py`` (user space only) leaves out.
A wake of the event loop (``epoll_pwait``), a socket read or write, a ``getpid`` (Python 3.11's
``asyncio.get_running_loop()`` makes one each time) each cost the CPU a syscall's entry and
exit, and the counts repeat run to run where CPU seconds here do not.

    .venv/bin/python bench/syscalls.py [--base DIR] [--redis] [--floor] [--runs 30]
        [--concurrency 3]

Each server (this tree's ``agentloop serve``; ``--base``: another checkout's too, run on this
virtualenv; ``--floor``: ``bench/relay_floor.py``) serves 10 runs to warm up; then ``strace -c
-f`` is attached to it for ``--runs`` runs of the production workload (the https fake model
pacing frames 33 ms apart, C runs at once, each on a new client connection), at answers of 0
and 80 text deltas. Printed per syscall: calls per run at 0 deltas (``per_run``) and what
each further text delta adds (``per_delta``). Calls a server makes on a clock (a worker's
poll, a sweep) grow with the longer runs too: a few hundredths per delta. Attaching needs
ptrace rights over the server (root, or ``kernel.yama.ptrace_scope`` 0).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._live import FRAME_MS
from bench._procs import OUT, ROOT, Proc, start_fake
from bench._tls import make_tls
from bench.instructions import Target, outcome, warmed_up

SIZES = (0, 80)


def parse_summary(text: str) -> dict[str, int]:
    """Calls per syscall from ``strace -c`` output (``% time  seconds  usecs/call  calls
    [errors]  syscall`` rows; the header, rulers and the total row are skipped)."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) not in (5, 6) or parts[-1] in ("total", "syscall"):
            continue
        try:
            calls[parts[-1]] = calls.get(parts[-1], 0) + int(parts[3])
        except ValueError:
            continue
    return calls


def _attach(pid: int, out: Path, timeout: float = 30.0) -> subprocess.Popen[bytes]:
    """``strace -c -f`` on ``pid``, returned once it has attached (it says so on stderr)."""
    tracer = subprocess.Popen(["strace", "-c", "-f", "-o", str(out), "-p", str(pid)],
                              stderr=subprocess.PIPE)
    assert tracer.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = tracer.stderr.readline().decode(errors="replace")
        if "attached" in line:
            return tracer
        if not line and tracer.poll() is not None:
            break
    tracer.kill()
    tracer.communicate()
    raise RuntimeError(f"strace could not attach to {pid} (ptrace rights?)")


def count(target: Target, fake: Proc, deltas: int, runs: int, concurrency: int, *,
          redis: bool) -> dict[str, Any]:
    """Start ``target``, warm it up, count the syscalls of ``runs`` runs; stop it."""
    tmp = Path(tempfile.mkdtemp(prefix="strace-", dir=OUT))
    try:
        with warmed_up(target, fake, deltas, concurrency, redis=redis,
                       name="syscalls") as served:
            tracer = _attach(served.server.popen.pid, tmp / "summary")
            try:
                work = served.runs(runs)
            finally:
                tracer.send_signal(signal.SIGINT)  # detaches and writes the summary
                tracer.communicate(timeout=60)  # reads the rest of its stderr, closes the pipe
        calls = parse_summary((tmp / "summary").read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    done = outcome(work)
    return {"target": target.label, "deltas": deltas, "runs": runs, **done,
            "backend": served.backend,
            "calls_per_run": {name: round(n / max(done["ok"], 1), 2)
                              for name, n in calls.items()}}


def split(rows: list[dict[str, Any]], label: str) -> dict[str, Any]:
    """Per syscall: calls per run at 0 deltas and the calls each further delta adds."""
    by = {r["deltas"]: r["calls_per_run"] for r in rows if r["target"] == label}
    lo, hi = SIZES
    names = sorted(set(by[lo]) | set(by[hi]), key=lambda n: -by[hi].get(n, 0))
    table = {n: {"per_run": by[lo].get(n, 0),
                 "per_delta": round((by[hi].get(n, 0) - by[lo].get(n, 0)) / (hi - lo), 2)}
             for n in names}
    return {"target": label, "total_per_run": round(sum(by[lo].values()), 1),
            "total_per_delta": round((sum(by[hi].values()) - sum(by[lo].values())) / (hi - lo), 2),
            "syscalls": table}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, help="another checkout to count against this one")
    p.add_argument("--redis", action="store_true", help="the Redis backend (not counted)")
    p.add_argument("--floor", action="store_true", help="bench/relay_floor.py too")
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--concurrency", type=int, default=3)
    args = p.parse_args(argv)
    if shutil.which("strace") is None:
        p.error("strace is not installed")
    targets = [Target("new", ROOT)]
    if args.base is not None:
        targets.insert(0, Target("base", args.base.resolve()))
    if args.floor:
        targets.append(Target("relay-floor", ROOT, floor=True))
    fake = start_fake(FRAME_MS, tls=make_tls(OUT / "tls"), name="fake_llm_syscalls")
    rows = []
    try:
        for deltas in SIZES:
            for target in targets:
                rows.append(count(target, fake, deltas, args.runs, args.concurrency,
                                  redis=args.redis))
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "calls_per_run"}),
                      flush=True)
    finally:
        fake.stop()
    print(json.dumps([split(rows, t.label) for t in targets], indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
