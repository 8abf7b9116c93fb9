"""``@function``: a typed function as a tool, added to the default registry."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, overload

from tool_registry.function import FunctionTool
from tool_registry.registry import default_registry
from tool_registry.types import ToolOptions


@overload
def function(func: Callable[..., Any], /) -> FunctionTool: ...


@overload
def function(*, name: str | None = None, description: str | None = None,
             timeout: float | None = None, defer: bool = False,
             toolsets: Iterable[str] = (), unsafe_in: Iterable[str] = (),
             requires_env: Iterable[str] = (), available_if: Callable[[], bool] | None = None,
             check_fn: Callable[[], bool] | None = None, expose: bool = True,
             register: bool = True,
             approval: bool | Callable[[dict[str, Any]], bool] = False,
             ) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def function(func: Callable[..., Any] | None = None, /, *, name: str | None = None,
             description: str | None = None, timeout: float | None = None,
             defer: bool = False, toolsets: Iterable[str] = (), unsafe_in: Iterable[str] = (),
             requires_env: Iterable[str] = (), available_if: Callable[[], bool] | None = None,
             check_fn: Callable[[], bool] | None = None, expose: bool = True,
             register: bool = True, approval: bool | Callable[[dict[str, Any]], bool] = False,
             ) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool of a typed function and add it to the default registry.

    Usable bare (``@function``) or with options (``@function(timeout=5, toolsets=["web"])``);
    ``register=False`` makes the tool without registering it; ``approval`` (True, or a
    predicate over the arguments) makes its picks wait for a person's approval.
    """
    options = ToolOptions(timeout=timeout, defer=defer, toolsets=tuple(toolsets),
                          unsafe_in=tuple(unsafe_in), requires_env=tuple(requires_env),
                          available_if=available_if, check_fn=check_fn, expose=expose,
                          approval=approval)

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        tool = FunctionTool(f, name=name, description=description, options=options)
        if register:
            default_registry.register(tool)
        return tool

    return wrap(func) if func is not None else wrap
