"""Loop overhead, in process: `python bench/loop.py` prints one JSON line.

A zero-latency fake provider streams 50 text deltas and one tool call per run. Figures:

- runs_per_s: whole runs (one tool round + one 50-delta text round) per second, one at a time
- per_delta_us: median extra time one streamed delta costs the loop (runs with 550 deltas minus
  runs with 50, divided by 500)
- per_tool_round_trip_us: median extra time a tool round costs (tool call → execution → result
  → next model call), from runs with and without the tool round
- both with the sink the service uses (every event encoded to its stored JSON) and with a bare
  list sink
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.engine import LoopConfig, run_loop
from app.engine.events import Event, encode_event, utc_now
from providers import fake
from providers.fake import FakeProvider, Step
from providers.messages import UserMessage
from tool_registry import Registry, build_menu, function


@function(register=False, name="add")
async def add_async(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@function(register=False, name="add")
def add_sync(a: int, b: int) -> int:
    """Add two integers (a sync tool: runs in a worker thread)."""
    return a + b


REGISTRIES = {"async_tool": Registry(), "sync_tool": Registry()}
REGISTRIES["async_tool"].register(add_async)
REGISTRIES["sync_tool"].register(add_sync)
MENU_REG = REGISTRIES["async_tool"]


def script(deltas: int, with_tool: bool) -> list[Step]:
    text = fake.text("x" * deltas, chunks=deltas)
    return [fake.tool_calls(("add", {"a": 2, "b": 3})), text] if with_tool else [text]


async def one_run(deltas: int, with_tool: bool, encode: bool,
                  registry: Registry = MENU_REG) -> float:
    seq = 0
    ts = utc_now()
    out: list[object] = []

    def sink(event: Event) -> None:
        nonlocal seq
        seq += 1
        out.append(encode_event(event, seq=seq, run_id="bench", ts=ts) if encode else event)

    provider = FakeProvider(script(deltas, with_tool), record=False)
    menu = build_menu(registry=registry)
    start = time.perf_counter()
    await run_loop(provider=provider, menu=menu, config=LoopConfig(model="m"), context=[],
                   emit=sink, prompts=[UserMessage(content="add 2 and 3")])
    return time.perf_counter() - start


async def median_time(reps: int, deltas: int, with_tool: bool, encode: bool,
                      registry: Registry = MENU_REG) -> float:
    for _ in range(min(50, reps)):  # warm up
        await one_run(deltas, with_tool, encode, registry)
    return statistics.median([await one_run(deltas, with_tool, encode, registry)
                              for _ in range(reps)])


async def measure(reps: int, encode: bool) -> dict[str, float]:
    base = await median_time(reps, 50, True, encode)
    many = await median_time(reps, 550, True, encode)
    no_tool = await median_time(reps, 50, False, encode)
    sync_tool = await median_time(reps, 50, True, encode, REGISTRIES["sync_tool"])
    return {
        "per_tool_round_trip_sync_tool_us": round((sync_tool - no_tool) * 1e6, 1),
        "runs_per_s": round(1 / base, 1),
        "run_ms": round(base * 1000, 3),
        "per_delta_us": round((many - base) / 500 * 1e6, 2),
        "per_tool_round_trip_us": round((base - no_tool) * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
        loop_impl = "uvloop"
    except ImportError:
        loop_impl = "asyncio"

    async def both() -> dict[str, object]:
        return {"encoded_sink": await measure(args.reps, True),
                "list_sink": await measure(args.reps, False)}

    figures = asyncio.run(both())
    encoded = figures["encoded_sink"]
    assert isinstance(encoded, dict)
    print(json.dumps({"bench": "loop", "python": platform.python_version(), "loop": loop_impl,
                      "reps": args.reps, **figures,
                      "targets": {"per_delta_us<20": encoded["per_delta_us"] < 20,
                                  "per_tool_round_trip_us<300":
                                      encoded["per_tool_round_trip_us"] < 300}}))


if __name__ == "__main__":
    main()
