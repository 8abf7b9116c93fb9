"""The built-in tools. Importing this package registers them and defines their toolsets.

=============  =============================================================
toolset        tools
=============  =============================================================
``readonly``   read_file, list_files, search_files
``files``      ``readonly`` + write_file, edit_file
``code``       run_python, run_shell (only while ``sandbox_mode()`` allows)
``web``        http_fetch
``full``       every exposed tool, tool_search included (built into Registry)
=============  =============================================================

Tools that change things or run code (write_file, edit_file, run_python, run_shell, http_fetch)
are ``unsafe_in`` the ``web`` and ``public`` channels by default (``files.UNTRUSTED_CHANNELS``);
operators disable more with ``build_menu(disabled=...)``. Settings: ``builtin.settings``.
"""

from __future__ import annotations

from tool_registry.builtin import _search, code, files, tool_search, web
from tool_registry.builtin.sandbox import sandbox_mode
from tool_registry.builtin.settings import BuiltinSettings, configure, current
from tool_registry.registry import Registry, default_registry

TOOLSETS: dict[str, tuple[str, ...]] = {
    "readonly": (files.read_file.name, _search.list_files.name, _search.search_files.name),
    "files": ("readonly", files.write_file.name, files.edit_file.name),
    "code": (code.run_python.name, code.run_shell.name),
    "web": (web.http_fetch.name,),
}
"""Toolset name → member tools and toolsets."""


def define_toolsets(registry: Registry = default_registry) -> None:
    """Add the built-in toolsets to ``registry`` (done for the default one on import)."""
    for name, members in TOOLSETS.items():
        registry.define_toolset(name, members)


define_toolsets()

__all__ = ["TOOLSETS", "BuiltinSettings", "configure", "current", "define_toolsets",
           "sandbox_mode", "tool_search"]
