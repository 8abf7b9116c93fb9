"""Declaring tools: ``from tool_registry import function``."""

from tool_registry.decorator import function
from tool_registry.function import FunctionTool
from tool_registry.policy import Menu, MenuError, build_menu
from tool_registry.registry import (
    Registry,
    ToolModuleError,
    as_tool,
    default_registry,
    import_tool_modules,
)
from tool_registry.types import (
    ArgumentError,
    CancelSignal,
    Progress,
    Tool,
    ToolContext,
    ToolOptions,
    ToolResult,
)

__all__ = [
    "ArgumentError",
    "CancelSignal",
    "FunctionTool",
    "Menu",
    "MenuError",
    "Progress",
    "Registry",
    "Tool",
    "ToolContext",
    "ToolModuleError",
    "ToolOptions",
    "ToolResult",
    "as_tool",
    "build_menu",
    "default_registry",
    "function",
    "import_tool_modules",
]
