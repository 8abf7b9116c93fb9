"""API keys, stream tokens and end-user tokens (API.md "Auth").

``Authorization: Bearer <credential>`` is one of:

- an **API key**: its tenant, with full power in it. Keys are compared in constant time against
  every configured key and never logged;
- a **client token** (``app.api.auth.client_tokens``), minted by the app's backend: an end user
  of one tenant;
- an identity provider's **JWT** (``app.api.auth.idp``), when ``AGENTLOOP_JWT_JWKS_URL`` or
  ``AGENTLOOP_JWT_SECRET`` is set: an end user too.

A **stream token** is ``<payload>.<signature>`` (base64url): the payload holds the run (or
thread) id, tenant and expiry, the signature is HMAC-SHA256 under
``AGENTLOOP_STREAM_TOKEN_SECRET`` or, when unset, a secret derived from the configured keys (so
every replica with the same keys agrees). It is read-only: only the events route of its own
run (or thread) accepts it, as ``?token=``, and only when the stream opens (an open stream
outlives its token). That query parameter also takes a client token or a JWT (an
``EventSource`` cannot send a header). Tokens travel in query strings, so every log line is
scrubbed of them (``app.telemetry.redact``). With no keys and no JWT settings, auth is off and
every caller without an end-user token is tenant ``default``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import orjson
from fastapi import Request

from app.api.auth.client_tokens import ClientTokens, is_client_token
from app.api.auth.idp import IdentityProvider, InvalidJwt
from app.api.auth.principal import Principal
from app.api.errors import ApiError

DEFAULT_TENANT = "default"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def unauthorized(message: str) -> ApiError:
    """401 with the bearer challenge."""
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def _looks_like_jwt(credential: str) -> bool:
    return credential.count(".") == 2 and credential.isascii()


class Authenticator:
    """Checks credentials and issues stream tokens (see the module docstring)."""

    def __init__(self, keys: dict[str, str], *, secret: str | None, token_ttl: int,
                 idp: IdentityProvider | None = None) -> None:
        self._keys = [(k.encode(), t) for k, t in keys.items()]
        material = secret or "agentloop-stream-token:" + ",".join(sorted(keys))
        self._secret = hashlib.sha256(material.encode()).digest()
        self.token_ttl = token_ttl
        self.client_tokens = ClientTokens(hashlib.sha256(
            b"agentloop-client-token:" + material.encode()).digest())
        self.idp = idp if idp is not None and idp.settings.configured else None

    @property
    def enabled(self) -> bool:
        """Whether callers must say who they are (a key or JWT settings are configured)."""
        return bool(self._keys) or self.idp is not None

    def tenant_for_key(self, key: str) -> str | None:
        """The key's tenant; every key is compared so timing says nothing about which matched."""
        found: str | None = None
        given = key.encode()
        for candidate, tenant in self._keys:
            if hmac.compare_digest(candidate, given) and found is None:
                found = tenant
        return found

    def issue_token(self, run_id: str, tenant: str, now: float | None = None, *,
                    owner: str | None = None) -> str:
        """A stream token for ``run_id`` (or a thread id) valid for ``token_ttl`` seconds;
        ``owner``: the end user the run (or thread) is of, whose streams its streams count
        with (``Principal.stream_holder``)."""
        expiry = int((now or time.time()) + self.token_ttl)
        claims: dict[str, str | int] = {"r": run_id, "t": tenant, "e": expiry}
        if owner is not None:
            claims["o"] = owner
        payload = _b64(orjson.dumps(claims))
        return f"{payload}.{self._sign(payload)}"

    def verify_token(self, token: str, run_id: str) -> Principal | None:
        """The principal of a valid, unexpired stream token for ``run_id``; None for anything
        else (whatever text a client sends, a bad token is a 401, never a 500)."""
        if not token.isascii():  # hmac.compare_digest refuses non-ASCII text (TypeError)
            return None
        payload, _, signature = token.partition(".")
        if not hmac.compare_digest(self._sign(payload), signature):
            return None
        try:
            claims = orjson.loads(_unb64(payload))
            if claims["r"] != run_id or int(claims["e"]) < time.time():
                return None
            owner = claims.get("o")
            return Principal(tenant=str(claims["t"]), run_id=run_id, via="stream_token",
                             streams_of=owner if isinstance(owner, str) else None)
        except (ValueError, TypeError, KeyError, orjson.JSONDecodeError):
            return None

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._secret, payload.encode(), hashlib.sha256).digest())

    async def authenticate(self, request: Request, *,
                           stream_run_id: str | None = None) -> Principal:
        """The caller of ``request``; ``stream_run_id`` lets a ``?token=`` for that run (or
        thread) in, or an end user's token."""
        header = request.headers.get("authorization", "")
        scheme, _, credential = header.partition(" ")
        credential = credential.strip()
        if scheme.lower() == "bearer" and credential:
            tenant = self.tenant_for_key(credential)
            if tenant is not None:
                return Principal(tenant=tenant)
            end_user = await self._end_user(credential)
            if end_user is not None:
                return end_user
            if self.enabled:
                raise unauthorized("invalid API key or token")
        token = request.query_params.get("token") if stream_run_id is not None else None
        if token:
            principal = self.verify_token(token, stream_run_id or "")
            if principal is None:
                principal = await self._end_user(token)
            if principal is not None:
                return principal
            if self.enabled:
                raise unauthorized("invalid or expired stream token: GET /runs/{id} with the "
                                   "API key returns a fresh one")
        if not self.enabled:
            return Principal(tenant=DEFAULT_TENANT, via="open")
        raise unauthorized("missing 'Authorization: Bearer <key or token>'")

    async def _end_user(self, credential: str) -> Principal | None:
        """The end user of a client token or an identity provider's JWT; None when it is
        neither (401 with the reason for a JWT the provider's keys refuse)."""
        if not _looks_like_jwt(credential):
            return None
        if is_client_token(credential):
            principal = self.client_tokens.verify(credential)
            if principal is None:
                raise unauthorized("invalid or expired client token")
            return principal
        if self.idp is None:
            return None
        try:
            return await self.idp.verify(credential)
        except InvalidJwt as exc:
            raise unauthorized(f"invalid token: {exc}") from exc

    def tenant_of(self, request: Request, *, stream_run_id: str | None = None) -> str | None:
        """The tenant a request's credentials name, without a key-set fetch (for its log
        lines; None when they name none it can tell)."""
        header = request.headers.get("authorization", "")
        scheme, _, credential = header.partition(" ")
        if scheme.lower() == "bearer" and credential.strip():
            tenant = self.tenant_for_key(credential.strip())
            if tenant is not None:
                return tenant
            user = self.client_tokens.verify(credential.strip())
            return user.tenant if user is not None else None
        token = request.query_params.get("token")
        if token and stream_run_id is not None:
            found = self.verify_token(token, stream_run_id) or self.client_tokens.verify(token)
            return found.tenant if found is not None else None
        return None if self.enabled else DEFAULT_TENANT

    async def close(self) -> None:
        """Release what the identity provider holds."""
        if self.idp is not None:
            await self.idp.close()
