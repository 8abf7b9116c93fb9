"""The benchmark's tool; agentloop loads it with ``AGENTLOOP_TOOL_MODULES=bench.bench_tools``."""

from tool_registry import function


@function
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b
