"""``/mcp``: agentloop's agents as the tools of an MCP server (Streamable HTTP), so MCP
clients (desktop assistants, IDEs, other agents) call them. ``tools.py``: what is offered and
what a call does (a run through the one pipeline, followed to its end); ``routes.py``: the
endpoint, its auth and the SDK's session manager."""
