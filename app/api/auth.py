"""API keys, tenants and stream tokens (API.md "Auth").

``Authorization: Bearer <key>`` names a tenant; keys are compared in constant time against every
configured key and never logged. A stream token is ``<payload>.<signature>`` (base64url): the
payload holds the run id, tenant and expiry, the signature is HMAC-SHA256 under
``AGENTLOOP_STREAM_TOKEN_SECRET`` or, when unset, a secret derived from the configured keys (so
every replica with the same keys agrees). A token is read-only: only ``GET /runs/{id}/events``
of its own run accepts it, and only when the stream opens (an open stream outlives its token).
Every Run returned to an API-key caller carries a fresh one; a token never renews itself.
Tokens travel in query strings, so every log line is scrubbed of them
(``app.telemetry.redact``). With no keys configured auth is off and every caller is tenant
``default``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass

import orjson
from fastapi import Request

from app.api.errors import ApiError

DEFAULT_TENANT = "default"


@dataclass(slots=True, frozen=True)
class Principal:
    """Who is calling: a tenant, and for a stream token the one run it may read."""

    tenant: str
    run_id: str | None = None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


class Authenticator:
    """Checks bearer keys and issues/verifies stream tokens."""

    def __init__(self, keys: dict[str, str], *, secret: str | None, token_ttl: int) -> None:
        self._keys = [(k.encode(), t) for k, t in keys.items()]
        material = secret or "agentloop-stream-token:" + ",".join(sorted(keys))
        self._secret = hashlib.sha256(material.encode()).digest()
        self.token_ttl = token_ttl

    @property
    def enabled(self) -> bool:
        """Whether any key is configured."""
        return bool(self._keys)

    def tenant_for_key(self, key: str) -> str | None:
        """The key's tenant; every key is compared so timing says nothing about which matched."""
        found: str | None = None
        given = key.encode()
        for candidate, tenant in self._keys:
            if hmac.compare_digest(candidate, given) and found is None:
                found = tenant
        return found

    def issue_token(self, run_id: str, tenant: str, now: float | None = None) -> str:
        """A stream token for ``run_id`` valid for ``token_ttl`` seconds."""
        expiry = int((now or time.time()) + self.token_ttl)
        payload = _b64(orjson.dumps({"r": run_id, "t": tenant, "e": expiry}))
        return f"{payload}.{self._sign(payload)}"

    def verify_token(self, token: str, run_id: str) -> Principal | None:
        """The principal of a valid, unexpired token for ``run_id``; None for anything else
        (whatever text a client sends, a bad token is a 401, never a 500)."""
        if not token.isascii():  # hmac.compare_digest refuses non-ASCII text (TypeError)
            return None
        payload, _, signature = token.partition(".")
        if not hmac.compare_digest(self._sign(payload), signature):
            return None
        try:
            claims = orjson.loads(_unb64(payload))
            if claims["r"] != run_id or int(claims["e"]) < time.time():
                return None
            return Principal(tenant=str(claims["t"]), run_id=run_id)
        except (ValueError, TypeError, KeyError, orjson.JSONDecodeError):
            return None

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._secret, payload.encode(), hashlib.sha256).digest())

    def authenticate(self, request: Request, *, stream_run_id: str | None = None) -> Principal:
        """The caller of ``request``; ``stream_run_id`` lets a ``?token=`` for that run in."""
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() == "bearer" and key.strip():
            tenant = self.tenant_for_key(key.strip())
            if tenant is not None:
                return Principal(tenant=tenant)
            if self.enabled:
                raise _unauthorized("invalid API key")
        if not self.enabled:
            return Principal(tenant=DEFAULT_TENANT)
        token = request.query_params.get("token")
        if token and stream_run_id is not None:
            principal = self.verify_token(token, stream_run_id)
            if principal is not None:
                return principal
            raise _unauthorized("invalid or expired stream token: GET /runs/{id} with the API "
                                "key returns a fresh one")
        raise _unauthorized("missing 'Authorization: Bearer <key>'")
