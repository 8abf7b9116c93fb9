"""``tool_search``: find deferred tools and make them callable from the next round.

A deferred tool's schema is not sent to the model (it keeps the menu small). The model calls
``tool_search`` with a name or keywords; matching deferred tools on the run's menu are loaded and
their schemas returned, and from the next round on the model sees and may call them.
"""

from __future__ import annotations

import re
from typing import Any

from tool_registry.decorator import function
from tool_registry.types import ToolContext, ToolResult

MAX_MATCHES = 5


def _score(query_words: list[str], name: str, description: str) -> int:
    name_l, desc_l = name.lower(), description.lower()
    score = 0
    for word in query_words:
        if word == name_l:
            score += 10
        elif word in name_l:
            score += 4
        elif word in desc_l:
            score += 1
    return score


@function(name="tool_search")
def tool_search(query: str, ctx: ToolContext) -> ToolResult:
    """Find more tools by name or keywords; found tools become callable from your next turn.

    Args:
        query: a tool name, or a few keywords describing what the tool should do.
    """
    menu = ctx.menu
    if menu is None or not menu.deferred:
        return ToolResult.text("No further tools are available to load.")
    words = [w for w in re.split(r"[^a-z0-9_]+", query.lower()) if w]
    ranked = sorted(
        ((_score(words, name, menu.tools[name].spec.description), name)
         for name in menu.deferred),
        key=lambda pair: (-pair[0], pair[1]))
    found = [name for score, name in ranked if score > 0][:MAX_MATCHES]
    if not found:
        names = ", ".join(sorted(menu.deferred))
        return ToolResult.text(f"No tool matches {query!r}. Tools that can be loaded: {names}")
    menu.load(found)
    schemas: list[dict[str, Any]] = [
        {"name": n, "description": menu.tools[n].spec.description,
         "parameters": menu.tools[n].spec.parameters} for n in found]
    lines = [f"Loaded {len(found)} tool(s); you can call them from your next turn:"]
    lines += [f"- {s['name']}: {s['description']}" for s in schemas]
    return ToolResult.text("\n".join(lines), details={"loaded": schemas})
