"""The query of the list endpoints (``GET /runs``, ``GET /threads``): ``status``,
``metadata.<key>=<value>`` filters, ``limit`` and the ``cursor`` a page returned."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from fastapi import Request

from app.api.errors import ApiError


def metadata_filters(request: Request) -> dict[str, str]:
    """The ``metadata.<key>=<value>`` query parameters."""
    return {k.removeprefix("metadata."): v for k, v in request.query_params.items()
            if k.startswith("metadata.") and len(k) > len("metadata.")}


def check_status(status: str | None, allowed: Iterable[str]) -> None:
    """422 for a ``status`` filter no item can have."""
    allowed = tuple(allowed)
    if status is not None and status not in allowed:
        raise ApiError(422, "validation_error", f"status must be one of {', '.join(allowed)}",
                       "status")


def check_cursor(cursor: str | None, is_id: Callable[[str], bool]) -> None:
    """422 unless ``cursor`` has the shape ``next_cursor`` has (``<created_at>|<id>``); the
    backends would otherwise restart from the newest item or pass a NaN score to the store."""
    if not cursor:
        return
    created, _, item_id = cursor.partition("|")
    try:
        ok = math.isfinite(float(created)) and is_id(item_id)
    except ValueError:
        ok = False
    if not ok:
        raise ApiError(422, "validation_error", "cursor: not a cursor this API returned",
                       "cursor")
