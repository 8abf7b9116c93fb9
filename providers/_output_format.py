"""The response format where a provider has no native field for it: a paragraph of the system
prompt. Shared by the adapters that fall back to it (which they do is in each one's docstring).

What the model reads (``instruction``)::

    Response format: your final answer (the reply in which you call no tool) must be one JSON
    value and nothing else (no text before or after it, no code fence), matching this JSON
    Schema (format "<name>": <description>):
    <the schema as compact JSON>
"""

from __future__ import annotations

import orjson

from providers.base import ResponseFormat


def instruction(fmt: ResponseFormat) -> str:
    """The paragraph stating ``fmt`` to the model."""
    about = f'format "{fmt.name}"' + (f": {fmt.description}" if fmt.description else "")
    return ("Response format: your final answer (the reply in which you call no tool) must be "
            "one JSON value and nothing else (no text before or after it, no code fence), "
            f"matching this JSON Schema ({about}):\n{orjson.dumps(fmt.schema).decode()}")


def system_with(system: str | None, fmt: ResponseFormat | None) -> str | None:
    """``system`` with the instruction for ``fmt`` appended (``system`` itself without one)."""
    if fmt is None:
        return system
    return f"{system}\n\n{instruction(fmt)}" if system else instruction(fmt)
