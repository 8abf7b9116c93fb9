"""End-user tokens the app's backend mints with its API key (``POST /client_tokens``).

A client token is a JWT (RFC 7519, HS256 under a secret of the service's own: every replica
with the same keys or ``AGENTLOOP_STREAM_TOKEN_SECRET`` agrees) naming its tenant, its subject
(the app's user id), the agents it may start and, optionally, the only threads it may use. It
goes in ``Authorization: Bearer`` or an ``EventSource``'s ``?token=``; it expires after its
``ttl`` and is never renewed by the service (the app mints the next one).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

import jwt

from app.api.auth.principal import Principal

ISSUER = "agentloop"
AUDIENCE = "agentloop:client"


def is_client_token(token: str) -> bool:
    """Whether ``token`` says it is one of ours (its signature is not checked here)."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return False
    return claims.get("iss") == ISSUER and claims.get("aud") == AUDIENCE


class ClientTokens:
    """Mints and checks client tokens under ``secret``."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def mint(self, *, tenant: str, subject: str, agents: Iterable[str] | None,
             threads: Iterable[str] | None, ttl: int, now: float | None = None
             ) -> tuple[str, float]:
        """``(token, expires_at)``; ``agents`` None grants every agent."""
        issued = int(now if now is not None else time.time())
        claims: dict[str, object] = {"iss": ISSUER, "aud": AUDIENCE, "sub": subject,
                                     "tenant": tenant, "iat": issued, "exp": issued + ttl,
                                     "jti": uuid.uuid4().hex}
        if agents is not None:
            claims["agents"] = sorted(set(agents))
        if threads is not None:
            claims["threads"] = sorted(set(threads))
        return jwt.encode(claims, self._secret, algorithm="HS256"), float(issued + ttl)

    def verify(self, token: str) -> Principal | None:
        """The end user of a valid, unexpired client token; None for anything else."""
        try:
            claims = jwt.decode(token, self._secret, algorithms=["HS256"], audience=AUDIENCE,
                                issuer=ISSUER, options={"require": ["exp", "sub", "iat"]})
            agents, threads = claims.get("agents"), claims.get("threads")
            return Principal(tenant=str(claims["tenant"]), subject=str(claims["sub"]),
                             agents=None if agents is None else frozenset(map(str, agents)),
                             threads=None if threads is None else frozenset(map(str, threads)),
                             via="client_token")
        except (jwt.PyJWTError, KeyError, TypeError):
            return None
