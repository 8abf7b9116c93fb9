"""Tool-call ids rewritten for providers that restrict their alphabet.

Anthropic and Bedrock accept tool-use ids matching ``[a-zA-Z0-9_-]{1,64}``; ids produced by other
providers (OpenAI ``call_…|fc_…``, Gemini-generated ids) may not. ``safe_tool_id`` is a pure
function of the original id, so a ``tool_use`` and the ``tool_result`` that answers it always get
the same new id without any shared state. Ids that already fit pass through unchanged.
"""

from __future__ import annotations

import hashlib
import re

_ALLOWED = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_DISALLOWED_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_LEN = 64
_HASH_LEN = 12


def safe_tool_id(original: str) -> str:
    """``original`` if it fits ``[a-zA-Z0-9_-]{1,64}``; else a cleaned prefix + a short hash.

    The hash keeps two different ids that clean to the same prefix apart.
    """
    if _ALLOWED.match(original):
        return original
    digest = hashlib.sha256(original.encode("utf-8")).hexdigest()[:_HASH_LEN]
    prefix = _DISALLOWED_CHAR.sub("_", original)[: _MAX_LEN - _HASH_LEN - 1]
    return f"{prefix}_{digest}" if prefix else f"call_{digest}"
