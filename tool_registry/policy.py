"""The gating layers that turn a request's tool arguments into the menu a run offers.

In order (each layer only removes):

1. ``available_if`` — checked at registration (``Registry.register``)
2. ``expose`` — unexposed tools are never on a menu
3. membership — the explicit ``tools`` list, else the ``toolset``, else ``full``
4. source channel — tools whose ``unsafe_in`` names the request's ``tools_source``
5. availability — ``requires_env`` all set and ``check_fn()`` true
6. ``tools_deny`` then ``tools_allow`` (glob patterns; allow is a ceiling applied last) and the
   operator's disabled tools
7. deferral — a deferred tool stays callable-to-be: its schema is not sent until ``tool_search``
   loads it, from the next round on; ``tool_search`` itself is offered only when some tool on the
   menu is deferred
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from providers.base import ToolSpec
from tool_registry.registry import AnyTool, Registry, as_tool, default_registry

SEARCH_TOOL = "tool_search"
"""The built-in tool that loads deferred tools; offered only when a menu has any."""


class MenuError(ValueError):
    """A request named a tool or toolset that does not exist (``field`` says which argument)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(slots=True)
class Menu:
    """The tools one run may call. Deferred tools become active once ``load``-ed."""

    tools: dict[str, AnyTool] = field(default_factory=dict)
    deferred: set[str] = field(default_factory=set)
    loaded: list[str] = field(default_factory=list)
    """Deferred tools made active so far, in load order (a resumed run loads them again)."""
    on_load: Callable[[list[str]], None] | None = None
    """Called with ``loaded`` whenever it grows (the runner persists it with the run)."""

    def active(self) -> list[AnyTool]:
        """Tools whose schemas go to the model this round."""
        return [t for n, t in self.tools.items() if n not in self.deferred]

    def specs(self) -> list[ToolSpec]:
        """The specs sent to the provider."""
        return [t.spec for t in self.active()]

    def names(self) -> list[str]:
        """Names of the active tools."""
        return [t.name for t in self.active()]

    def lookup(self, name: str) -> AnyTool | None:
        """The callable tool ``name``, or None (unknown, or deferred and not yet loaded)."""
        return None if name in self.deferred else self.tools.get(name)

    def load(self, names: Iterable[str]) -> list[str]:
        """Make deferred tools active; returns those that were loaded."""
        loaded = [n for n in dict.fromkeys(names) if n in self.deferred]
        self.deferred.difference_update(loaded)
        if loaded:
            self.loaded.extend(loaded)
            if self.on_load is not None:
                self.on_load(list(self.loaded))
        return loaded


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def build_menu(*, tools: Sequence[object] | None = None, toolset: str | None = None,
               tools_source: str | None = None, tools_allow: Sequence[str] | None = None,
               tools_deny: Sequence[str] | None = None, disabled: Iterable[str] = (),
               registry: Registry = default_registry,
               env: Mapping[str, str] | None = None) -> Menu:
    """Apply the layers to a request's tool arguments. Unknown names raise ``MenuError``."""
    env = os.environ if env is None else env
    candidates = _membership(registry, tools, toolset)
    disabled_names = _expand_names(registry, disabled)
    menu = Menu()
    for tool in candidates:
        opts = tool.options
        name = tool.name
        if not opts.expose:
            continue
        if tools_source and tools_source in opts.unsafe_in:
            continue
        if any(not env.get(var) for var in opts.requires_env):
            continue
        if opts.check_fn is not None and not opts.check_fn():
            continue
        if tools_deny and _matches(name, tools_deny):
            continue
        if name in disabled_names:
            continue
        if tools_allow is not None and not _matches(name, tools_allow):
            continue
        menu.tools[name] = tool
        if opts.defer:
            menu.deferred.add(name)
    if not menu.deferred:  # nothing to find: keep the search tool off the menu
        menu.tools.pop(SEARCH_TOOL, None)
    return menu


def _membership(registry: Registry, tools: Sequence[object] | None,
                toolset: str | None) -> list[AnyTool]:
    if tools is not None:
        out = []
        for i, item in enumerate(tools):
            if isinstance(item, str):
                found = registry.tools.get(item)
                if found is None:
                    raise MenuError(f"unknown tool {item!r}", f"tools[{i}]")
                out.append(found)
            else:
                out.append(as_tool(item))
        return out
    name = toolset or "full"
    if not registry.has_toolset(name):
        raise MenuError(f"unknown toolset {name!r}; known: {registry.toolset_names()}",
                        "toolset")
    members = registry.expand(name)
    return [t for n, t in registry.tools.items() if n in members]


def _expand_names(registry: Registry, names: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for n in names:
        n = n.strip()
        if registry.has_toolset(n) and n not in ("full",):
            out |= registry.expand(n)
        elif n:
            out.add(n)
    return out
