"""``@function``: a typed Python function becomes a tool.

The name comes from the function, the description from its docstring, the JSON Schema from its
type hints (pydantic), parameter descriptions from a Google-style ``Args:`` section. Parameters
annotated ``ToolContext``, ``Progress`` or ``CancelSignal`` are injected by the loop and hidden
from the schema. Sync functions run in a worker thread so they never block the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import orjson

from providers.base import ToolSpec
from providers.messages import ImageContent, TextContent
from tool_registry.schema import (
    build_model,
    injected_params,
    model_schema,
    parse_docstring,
    validate_with_model,
)
from tool_registry.types import CancelSignal, Progress, ToolContext, ToolOptions, ToolResult


class FunctionTool:
    """A tool made from a Python function; callable directly as the original function too."""

    def __init__(self, func: Callable[..., Any], *, name: str | None = None,
                 description: str | None = None, options: ToolOptions | None = None) -> None:
        self.func = func
        self.options = options or ToolOptions()
        doc_desc, param_docs = parse_docstring(func.__doc__)
        tool_name = name or func.__name__
        self._model = build_model(func, tool_name, param_docs)
        self._injected = injected_params(func)
        self._is_async = inspect.iscoroutinefunction(func)
        self.spec = ToolSpec(name=tool_name, description=description or doc_desc,
                             parameters=model_schema(self._model))

    @property
    def name(self) -> str:
        """The tool's name on the menu."""
        return self.spec.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<FunctionTool {self.spec.name}>"

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """Validated, coerced arguments (``ArgumentError`` names each bad field)."""
        return validate_with_model(self._model, args)

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Call the function with ``args`` plus the injected parameters."""
        kwargs = dict(args)
        for pname, hint in self._injected.items():
            if hint is ToolContext:
                kwargs[pname] = ctx
            elif hint is Progress:
                kwargs[pname] = ctx.progress
            elif hint is CancelSignal:
                kwargs[pname] = ctx.cancel
        if self._is_async:
            value = await self.func(**kwargs)
        else:
            value = await asyncio.to_thread(self.func, **kwargs)
        return to_result(value)


def to_result(value: Any) -> ToolResult:
    """Whatever a tool returned, as a ``ToolResult`` (non-strings are sent as JSON)."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult.text(value)
    if isinstance(value, TextContent | ImageContent):
        return ToolResult(content=[value])
    if isinstance(value, list) and value and all(
            isinstance(v, TextContent | ImageContent) for v in value):
        return ToolResult(content=list(value))
    if value is None:
        return ToolResult.text("(no output)")
    text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    return ToolResult.text(text, details=value)
