"""The registry: every known tool by name, and named toolsets that may include each other.

Built-in toolsets: ``none`` (empty) and ``full`` (every exposed tool). A tool joins the toolsets
its options name; ``define_toolset`` adds groups of tools and other toolsets.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from providers.base import ToolSpec
from tool_registry.function import FunctionTool, to_result
from tool_registry.schema import validate_json_schema
from tool_registry.types import ToolContext, ToolOptions, ToolResult

log = logging.getLogger(__name__)


class WrappedTool:
    """A tool given as a ``{"spec", "execute"}`` dict or an object with ``.spec``/``.execute``."""

    def __init__(self, spec: ToolSpec, execute: Callable[..., Any],
                 options: ToolOptions | None = None) -> None:
        self.spec = spec
        self.options = options or ToolOptions()
        self._execute = execute
        params = inspect.signature(execute).parameters
        self._takes_ctx = len(params) >= 2

    @property
    def name(self) -> str:
        """The tool's name on the menu."""
        return self.spec.name

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """Arguments checked (and coerced) against the spec's JSON Schema."""
        return validate_json_schema(self.spec.parameters, args)

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Call the wrapped ``execute`` (sync or async, with or without the context)."""
        value = self._execute(args, ctx) if self._takes_ctx else self._execute(args)
        if inspect.isawaitable(value):
            value = await value
        return to_result(value)


AnyTool = FunctionTool | WrappedTool


def as_tool(obj: object) -> AnyTool:
    """Normalise anything accepted as a tool (``@function``, dict, object with spec/execute)."""
    if isinstance(obj, FunctionTool | WrappedTool):
        return obj
    if isinstance(obj, Mapping):
        spec, execute, options = obj.get("spec"), obj.get("execute"), obj.get("options")
    else:
        spec, execute = getattr(obj, "spec", None), getattr(obj, "execute", None)
        options = getattr(obj, "options", None)
    if spec is None or not callable(execute):
        if callable(obj):
            return FunctionTool(obj)  # a plain typed function
        raise TypeError(f"not a tool: {obj!r} (needs spec and execute)")
    return WrappedTool(_spec(spec), execute, options if isinstance(options, ToolOptions) else None)


def _spec(spec: object) -> ToolSpec:
    if isinstance(spec, ToolSpec):
        return spec
    if isinstance(spec, Mapping):
        fn = spec.get("function", spec)  # accept the OpenAI {"type":"function","function":…}
        params = fn.get("parameters") or fn.get("input_schema") or {"type": "object",
                                                                     "properties": {}}
        return ToolSpec(name=str(fn["name"]), description=str(fn.get("description", "")),
                        parameters=dict(params))
    raise TypeError(f"tool spec must be a ToolSpec or a dict, got {type(spec).__name__}")


class Registry:
    """Tools by name and toolsets by name."""

    def __init__(self) -> None:
        self.tools: dict[str, AnyTool] = {}
        self.skipped: dict[str, str] = {}
        """Tools left out at registration (``available_if`` false), name → reason."""
        self._toolsets: dict[str, set[str]] = {"none": set()}

    def register(self, tool: object) -> AnyTool:
        """Add a tool (replacing one of the same name); ``available_if`` is checked here."""
        t = as_tool(tool)
        check = t.options.available_if
        if check is not None and not check():
            self.skipped[t.name] = "available_if returned false"
            self.tools.pop(t.name, None)
            return t
        self.tools[t.name] = t
        for ts in t.options.toolsets:
            self._toolsets.setdefault(ts, set()).add(t.name)
        return t

    def unregister(self, name: str) -> None:
        """Remove a tool (and its toolset memberships); nothing if it is not registered."""
        self.tools.pop(name, None)
        for members in self._toolsets.values():
            members.discard(name)

    def define_toolset(self, name: str, includes: Iterable[str]) -> None:
        """A named group of tools and/or other toolsets (extends an existing one)."""
        if name in ("full", "none"):
            raise ValueError(f"toolset {name!r} is built in")
        self._toolsets.setdefault(name, set()).update(includes)

    def drop_toolset(self, name: str) -> None:
        """Forget a toolset defined with ``define_toolset`` (its tools stay registered)."""
        if name not in ("full", "none"):
            self._toolsets.pop(name, None)

    def toolset_names(self) -> list[str]:
        """Every toolset name, ``full`` included."""
        return sorted({*self._toolsets, "full"})

    def toolsets_of(self, tool_name: str) -> list[str]:
        """The toolsets a tool belongs to, through includes too."""
        return [ts for ts in self.toolset_names() if tool_name in self.expand(ts)]

    def expand(self, name: str, _seen: frozenset[str] = frozenset()) -> set[str]:
        """Tool names of a toolset (recursively); ``KeyError`` for an unknown toolset."""
        if name == "full":
            return {n for n, t in self.tools.items() if t.options.expose}
        members = self._toolsets[name]
        out: set[str] = set()
        for member in members:
            if member in self._toolsets or member == "full":
                if member not in _seen:
                    out |= self.expand(member, _seen | {name})
            elif member in self.tools:
                out.add(member)
        return out

    def has_toolset(self, name: str) -> bool:
        """Whether ``name`` is a toolset."""
        return name == "full" or name in self._toolsets


default_registry = Registry()
"""The process-wide registry ``@function`` adds to."""


class ToolModuleError(ImportError):
    """A tool module could not be imported; the message is one line naming the module, the
    cause and, for an error inside the module, its file and line."""


def import_tool_modules(modules: Iterable[str]) -> list[str]:
    """Import modules whose ``@function`` tools join the registry; returns those imported.

    Modules are looked up on ``sys.path`` and then in the working directory (``mytools`` finds
    ``./mytools.py`` even under the ``agentloop`` console script, whose ``sys.path`` does not
    hold it). Raises ``ToolModuleError`` for the first module that fails to import.
    """
    done = []
    for mod in modules:
        mod = mod.strip()
        if mod:
            _import(mod)
            done.append(mod)
            log.info("imported tool module %s", mod)
    return done


def _import(module: str) -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)  # after everything else: never shadows an installed module
    try:
        importlib.import_module(module)
    except Exception as exc:  # any failure inside the module: reported as one line
        raise ToolModuleError(_why(module, exc), name=module) from exc


def _why(module: str, exc: Exception) -> str:
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
    elif not isinstance(exc, ImportError) or exc.name != module:
        frames = traceback.extract_tb(exc.__traceback__)
        own = [f for f in frames if "importlib" not in f.filename]
        if own:
            where = f" ({own[-1].filename}, line {own[-1].lineno})"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return (f"cannot import tool module {module!r} (AGENTLOOP_TOOL_MODULES): "
            f"{type(exc).__name__}: {text}{where}")
