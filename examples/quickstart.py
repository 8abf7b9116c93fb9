"""Runnable: `python examples/quickstart.py` — a tool loop with the offline demo model."""

import asyncio

from app import runtime
from tool_registry import function


@function
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


async def main() -> None:
    # No provider key is needed: "demo:echo" is the offline demo model. It calls a tool the
    # message names (with numbers from the message), then answers from the tool's result.
    result = await runtime.exec("please add 2 and 3", model="demo:echo", tools=[add])
    print(result.stop_reason)  # stop
    print(result.text)  # [demo model] The tool `add` returned:\n5
    for message in result.messages:
        print(message.role, end=" ")  # user assistant tool_result assistant
    print()

    # Events as they happen (the same events the HTTP service streams over SSE):
    async for event in runtime.stream("what is add 40 and 2?", model="demo:echo", tools=[add]):
        if event.type == "tool_execution_end":
            print("tool result:", event.result["content"][0].text)  # tool result: 42


if __name__ == "__main__":
    asyncio.run(main())
