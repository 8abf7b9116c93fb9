"""A per-end-user request rate (``AGENTLOOP_SUBJECT_RATE``, e.g. ``60/minute``): one user of a
public app cannot spend the tenant's capacity. Counted in the store, so every replica shares
one count per user and window (fixed windows); beyond it, ``429 rate_limited`` with
``Retry-After``. API keys are not limited here."""

from __future__ import annotations

import hashlib
import math

from app.api.auth import Principal
from app.api.errors import ApiError
from app.api.services import Services


async def check_rate(svc: Services, who: Principal) -> None:
    """429 once ``who``, an end user, has made more requests in the window than allowed."""
    limit = svc.settings.subject_rate_limit()
    if limit is None or who.subject is None:
        return
    allowed, window = limit
    name = hashlib.sha256(f"{who.tenant}\0{who.subject}".encode()).hexdigest()[:32]
    hits, left = await svc.backend.count_hit(f"subject:{name}", window)
    if hits > allowed:
        wait = max(1, math.ceil(left))
        raise ApiError(429, "rate_limited", f"more than {allowed} requests in {window:g} s from "
                       f"this user: retry in {wait} s", headers={"Retry-After": str(wait)})
