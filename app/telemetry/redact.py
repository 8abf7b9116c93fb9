"""Secrets scrubbed from log lines: stream tokens (they travel in ``?token=`` query strings).

``redact(line)`` is applied to every formatted line of the service's log handler
(``app.telemetry.logs``), so uvicorn's access log (``GET /runs/x/events?token=... HTTP/1.1``), error
logs and exception texts are covered alike. Two rules, either enough on its own:

- the value of a query parameter whose name decodes to ``token`` (the way Starlette decodes it:
  ``%74oken`` and ``token`` are the same parameter) becomes ``[redacted]``;
- anything shaped like a stream token (``<base64url payload>.<43-character base64url HMAC>``)
  becomes ``[redacted]`` wherever it stands (a token quoted in an exception message).
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

REDACTED = "[redacted]"
_PARAM = re.compile(r"(?:(?<=[?&\s;,(\[{\"'])|^)([^=&\s\"'?#]+)=([^&\s\"'#\\]*)")
"""``name=value`` at the start of a query parameter (or after a space or quote)."""
_TOKEN_SHAPE = re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{43}"
                          r"(?![A-Za-z0-9_-])")
"""A stream token: base64url JSON claims, a dot, a base64url HMAC-SHA256 (43 characters)."""
_SECRET_NAMES = frozenset({"token"})


def _param(match: re.Match[str]) -> str:
    name = match.group(1)
    if unquote_plus(name).strip().lower() in _SECRET_NAMES:
        return f"{name}={REDACTED}"
    return match.group(0)


def redact(line: str) -> str:
    """``line`` without stream tokens (unchanged when it holds none)."""
    if "=" in line:
        line = _PARAM.sub(_param, line)
    if "." in line:
        line = _TOKEN_SHAPE.sub(REDACTED, line)
    return line
